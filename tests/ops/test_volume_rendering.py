"""The compositing ops, the packed scan and the ray-box op on each backend against their torch twins, on the
same packed samples: exactly where a backend runs the twin, to float32 rounding where it has its own code
(nerfacc's CUDA scans) or runs on another device."""

from __future__ import annotations

import pytest
import torch

from nerfstudio_accel.kernels.packed_rays import ray_starts
from nerfstudio_accel.ops import _torch_impl
from nerfstudio_accel.ops.volume_rendering import (
    accumulate_along_rays,
    composite_along_rays,
    fused_compositing_takes,
    render_visibility_from_density,
    render_weight_from_density,
)
from twin_checks import BACKEND_IDS, BACKENDS, DEVICES, N_RAYS, assert_like_twin, device_for, packed_problem


@pytest.mark.parametrize("backend, device", BACKENDS, ids=BACKEND_IDS)
def test_weights_and_their_gradient_match_the_twin(backend, device):
    on = device_for(backend, device)
    ray_indices, t_starts, t_ends, sigmas, _ = packed_problem()
    expected_sigmas = sigmas.clone().requires_grad_(True)
    expected = _torch_impl.render_weight_from_density(t_starts, t_ends, expected_sigmas, ray_indices, N_RAYS)
    upstream = torch.rand(expected.shape, generator=torch.Generator().manual_seed(1))
    (expected * upstream).sum().backward()
    actual_sigmas = sigmas.to(on).requires_grad_(True)
    actual = render_weight_from_density(
        t_starts.to(on), t_ends.to(on), actual_sigmas, ray_indices.to(on), N_RAYS, backend=backend
    )
    (actual * upstream.to(on)).sum().backward()
    assert_like_twin(actual.detach(), expected.detach(), backend, device)
    assert_like_twin(actual_sigmas.grad, expected_sigmas.grad, backend, device)


@pytest.mark.parametrize("backend, device", BACKENDS, ids=BACKEND_IDS)
@pytest.mark.parametrize("early_stop_eps, alpha_threshold", [(1e-4, 0.0), (1e-2, 0.05)])
def test_visibility_matches_the_twin(backend, device, early_stop_eps, alpha_threshold):
    on = device_for(backend, device)
    ray_indices, t_starts, t_ends, sigmas, _ = packed_problem(seed=2)
    expected = _torch_impl.render_visibility_from_density(
        t_starts, t_ends, sigmas, ray_indices, N_RAYS, early_stop_eps=early_stop_eps, alpha_threshold=alpha_threshold
    )
    actual = render_visibility_from_density(
        *(t.to(on) for t in (t_starts, t_ends, sigmas, ray_indices)),
        N_RAYS,
        early_stop_eps=early_stop_eps,
        alpha_threshold=alpha_threshold,
        backend=backend,
    )
    assert 0 < int(expected.sum()) < expected.numel()
    if device == "cpu":
        assert torch.equal(actual, expected)
    else:  # a sample within float32 rounding of a threshold may fall on either side
        transmittance, alphas = _torch_impl.render_transmittance_from_density(
            t_starts, t_ends, sigmas, ray_indices, N_RAYS
        )
        tie = ((transmittance - early_stop_eps).abs() <= 1e-5 * early_stop_eps) | (
            (alphas - alpha_threshold).abs() <= 1e-6
        )
        assert torch.equal(actual.cpu()[~tie], expected[~tie])


@pytest.mark.parametrize("device", DEVICES)
def test_sums_along_rays_match_the_twin(device):
    """One implementation on every device: the same sums as the twin on the CPU."""
    on = device_for("torch", device)
    ray_indices, _, _, sigmas, colors = packed_problem(seed=3)
    weights = sigmas / (1.0 + sigmas)
    for values in (colors, None):
        expected = _torch_impl.accumulate_along_rays(weights, values, ray_indices, N_RAYS)
        actual = accumulate_along_rays(
            weights.to(on), None if values is None else values.to(on), ray_indices.to(on), N_RAYS
        )
        assert_like_twin(actual, expected, "torch", device)


# --- the fused CPU compositing kernel (kernels/compositing_numba.py) against the twin ---


def _composite(backend, ray_indices, t_starts, t_ends, sigmas, colors, seed=3):
    """Outputs and the gradients of sigmas and colours under random upstream gradients on all four outputs."""
    sigmas = sigmas.clone().requires_grad_(True)
    colors = colors.clone().requires_grad_(True)
    outputs = composite_along_rays(t_starts, t_ends, sigmas, colors, ray_indices, N_RAYS, backend=backend)
    generator = torch.Generator().manual_seed(seed)
    upstream = [torch.randn(output.shape, generator=generator) for output in outputs]
    grads = torch.autograd.grad(outputs, [sigmas, colors], upstream)
    return [output.detach() for output in outputs], list(grads)


def _assert_close_to_twin(problem):
    expected_outputs, expected_grads = _composite("torch", *problem)
    actual_outputs, actual_grads = _composite("kernel", *problem)
    for actual, expected in zip(actual_outputs + actual_grads, expected_outputs + expected_grads):
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6, equal_nan=True)
    return actual_outputs, actual_grads


def test_the_kernel_runs_on_cpu_float32_and_its_outputs_and_gradients_match_the_twin():
    problem = packed_problem(seed=4)
    ray_indices, t_starts, t_ends, sigmas, colors = problem
    assert fused_compositing_takes(t_starts, t_ends, sigmas, colors)
    weights = composite_along_rays(
        t_starts, t_ends, sigmas.requires_grad_(True), colors, ray_indices, N_RAYS, "kernel"
    )[0]
    assert type(weights.grad_fn).__name__ == "_FusedCompositingBackward"  # the kernel ran, not the twin
    outputs, grads = _assert_close_to_twin(packed_problem(seed=4))
    assert 0.05 < float(outputs[1].mean()) < 0.95  # some rays clear, some opaque: both gradient terms matter
    assert bool((grads[0] > 0).any()) and bool((grads[0] < 0).any())


def test_overflowing_densities_match_the_twin():
    ray_indices, t_starts, t_ends, sigmas, colors = packed_problem(seed=5)
    first_sample = torch.searchsorted(ray_indices, torch.arange(N_RAYS))
    sigmas[first_sample[10] + 1] = float("inf")  # an optical depth above the cap: the scan adds the cap
    sigmas[first_sample[20] + 1] = 1e9 / 0.005  # finite but capped: no gradient through the scan
    t_ends[first_sample[40] + 1] = t_starts[first_sample[40] + 1]  # a zero-length interval: no weight
    outputs, grads = _assert_close_to_twin((ray_indices, t_starts, t_ends, sigmas, colors))
    assert float(outputs[0][first_sample[10] + 2]) == 0.0  # behind the infinite density nothing shows
    assert float(outputs[0][first_sample[40] + 1]) == 0.0
    assert all(bool(torch.isfinite(t).all()) for t in outputs + grads)


def test_a_nan_density_spoils_its_own_ray_only():
    """The twin's values keep a NaN to its ray too; its gradient, a reverse cumulative sum over the whole batch,
    spreads NaN to every earlier sample (a NaN loss skips the step either way)."""
    ray_indices, t_starts, t_ends, sigmas, colors = packed_problem(seed=5)
    nan_sample = int(torch.searchsorted(ray_indices, torch.tensor(30))) + 1
    sigmas[nan_sample] = float("nan")
    expected_outputs, expected_grads = _composite("torch", ray_indices, t_starts, t_ends, sigmas, colors)
    actual_outputs, actual_grads = _composite("kernel", ray_indices, t_starts, t_ends, sigmas, colors)
    for actual, expected in zip(actual_outputs, expected_outputs):
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6, equal_nan=True)
    other_rays = ray_indices != 30
    assert torch.isfinite(actual_outputs[0][other_rays]).all()
    for actual, expected in zip(actual_grads, expected_grads):
        assert torch.isfinite(actual[other_rays]).all()
        after = torch.arange(ray_indices.numel()) > nan_sample  # where the twin's gradient is still finite
        torch.testing.assert_close(actual[after & other_rays], expected[after & other_rays], rtol=1e-5, atol=1e-6)


def test_ray_starts_bound_each_rays_samples():
    ray_indices = packed_problem(seed=7)[0]
    starts = ray_starts(ray_indices, N_RAYS)
    assert starts.shape == (N_RAYS + 1,) and int(starts[0]) == 0 and int(starts[-1]) == ray_indices.numel()
    for ray in (0, 5, N_RAYS - 1):  # the first rays are empty
        assert bool((ray_indices[starts[ray] : starts[ray + 1]] == ray).all())
        assert int(starts[ray + 1] - starts[ray]) == int((ray_indices == ray).sum())


def test_an_empty_batch_composites_to_empty_rays():
    empty = torch.zeros(0)
    outputs, grads = _composite("kernel", torch.zeros(0, dtype=torch.long), empty, empty, empty, torch.zeros(0, 3))
    assert outputs[0].shape == (0,) and outputs[2].shape == (N_RAYS, 3)
    assert not outputs[1].any() and grads[0].shape == (0,)


@pytest.mark.parametrize("case", ["float64", "interval graph"])
def test_tensors_the_kernel_cannot_take_go_to_the_twin(case):
    ray_indices, t_starts, t_ends, sigmas, colors = packed_problem(seed=6)
    if case == "float64":
        t_starts, t_ends, sigmas, colors = (t.double() for t in (t_starts, t_ends, sigmas, colors))
    else:
        t_ends = t_ends.clone().requires_grad_(True)
    assert not fused_compositing_takes(t_starts, t_ends, sigmas, colors)
    weights = composite_along_rays(
        t_starts, t_ends, sigmas.requires_grad_(True), colors, ray_indices, N_RAYS, "kernel"
    )[0]
    assert type(weights.grad_fn).__name__ != "_FusedCompositingBackward"
