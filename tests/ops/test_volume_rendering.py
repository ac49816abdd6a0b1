"""The compositing ops, the packed scan and the ray-box op on each backend against their torch twins, on the
same packed samples: exactly where a backend runs the twin, to float32 rounding where it has its own code
(nerfacc's CUDA scans) or runs on another device."""

from __future__ import annotations

import pytest
import torch

from nerfstudio_accel.ops import _torch_impl
from nerfstudio_accel.ops.volume_rendering import (
    accumulate_along_rays,
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
