"""The compositing ops, the packed scan and the ray-box op on each backend against their torch twins, on the
same packed samples: exactly where a backend runs the twin, to float32 rounding where it has its own code
(nerfacc's CUDA scans) or runs on another device."""

from __future__ import annotations

import pytest
import torch

from nerfstudio_accel.kernels import lattice
from nerfstudio_accel.ops import _torch_impl
from nerfstudio_accel.ops.backends import nerfacc_ops_unavailable_reason
from nerfstudio_accel.ops.packed_scan import packed_exclusive_sum
from nerfstudio_accel.ops.ray_aabb import ray_aabb_intersect
from nerfstudio_accel.ops.volume_rendering import (
    accumulate_along_rays,
    render_visibility_from_density,
    render_weight_from_density,
)

N_RAYS = 64
BACKENDS = [("torch", "cpu"), ("kernel", "cpu"), ("torch", "cuda"), ("kernel", "cuda"), ("nerfacc", "cuda")]
BACKEND_IDS = [f"{backend}-{device}" for backend, device in BACKENDS]


def device_for(backend: str, device: str) -> torch.device:
    """``device``, or a skip saying why this backend cannot run here."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip(f"the {backend} backend on CUDA tensors needs a CUDA GPU")
    reason = nerfacc_ops_unavailable_reason() if backend == "nerfacc" else ""
    if reason:
        pytest.skip(f"nerfacc CUDA ops unavailable: {reason}")
    return torch.device(device)


def assert_like_twin(actual: torch.Tensor, expected: torch.Tensor, backend: str, device: str) -> None:
    """Bit-equal on the CPU backends that run the twin; within float32 rounding on CUDA."""
    if device == "cpu":
        assert torch.equal(actual, expected)
    else:
        torch.testing.assert_close(actual.cpu(), expected, rtol=1e-4, atol=1e-5)


def packed_problem(seed: int = 0):
    """Packed, ray-sorted intervals of uneven rays (some empty), densities from clear to opaque, colours."""
    generator = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, 40, (N_RAYS,), generator=generator)
    counts[:3] = 0
    ray_indices = torch.repeat_interleave(torch.arange(N_RAYS), counts)
    dt = 0.005 + 0.05 * torch.rand(ray_indices.numel(), generator=generator)
    t_ends = torch.cumsum(dt, 0)
    sigmas = torch.exp(2.0 * torch.randn(ray_indices.numel(), generator=generator))
    colors = torch.rand(ray_indices.numel(), 3, generator=generator)
    return ray_indices, t_ends - dt, t_ends, sigmas, colors


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


@pytest.mark.parametrize("backend, device", BACKENDS, ids=BACKEND_IDS)
def test_sums_along_rays_match_the_twin(backend, device):
    on = device_for(backend, device)
    ray_indices, _, _, sigmas, colors = packed_problem(seed=3)
    weights = sigmas / (1.0 + sigmas)
    for values in (colors, None):
        expected = _torch_impl.accumulate_along_rays(weights, values, ray_indices, N_RAYS)
        actual = accumulate_along_rays(
            weights.to(on), None if values is None else values.to(on), ray_indices.to(on), N_RAYS, backend=backend
        )
        assert_like_twin(actual, expected, backend, device)


@pytest.mark.parametrize("backend, device", BACKENDS, ids=BACKEND_IDS)
def test_packed_exclusive_sum_matches_the_twin(backend, device):
    on = device_for(backend, device)
    ray_indices, _, _, sigmas, _ = packed_problem(seed=4)
    expected = _torch_impl.packed_exclusive_sum(sigmas, ray_indices)
    assert_like_twin(
        packed_exclusive_sum(sigmas.to(on), ray_indices.to(on), backend=backend), expected, backend, device
    )


@pytest.mark.parametrize("backend, device", BACKENDS, ids=BACKEND_IDS)
def test_ray_aabb_intersect_matches_the_twin(backend, device):
    """Rays from outside and inside the box, axis-aligned ones, and misses."""
    on = device_for(backend, device)
    generator = torch.Generator().manual_seed(5)
    origins = torch.cat([2.5 * torch.randn(60, 3, generator=generator), 0.5 * torch.rand(20, 3, generator=generator)])
    directions = torch.nn.functional.normalize(torch.randn(80, 3, generator=generator), dim=-1)
    directions[:5] = torch.tensor([0.0, 0.0, 1.0])
    aabb = torch.tensor([-1.0, -0.5, 0.0, 1.0, 1.5, 1.0])
    expected = lattice.ray_aabb_intersect(origins, directions, aabb)
    assert 0 < int(expected[2].sum()) < 80
    actual = ray_aabb_intersect(origins.to(on), directions.to(on), aabb.to(on), backend=backend)
    for got, want in zip(actual, expected):
        if got.dtype == torch.bool:
            assert torch.equal(got.cpu(), want)
        else:
            assert_like_twin(got, want, backend, device)
