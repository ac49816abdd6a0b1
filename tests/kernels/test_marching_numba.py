"""The fused numba marcher against the torch reference: the same packed samples, on bounded and
contracted (multi-level, cone-angle) grids, rays from inside and outside the box, misses, no rays."""

from __future__ import annotations

import pytest
import torch

from accel_test_helpers import marching_scene as scene
from accel_test_helpers import sample
from nerfstudio_accel.kernels import marching_numba
from nerfstudio_accel.sampling import torch_ops
from nerfstudio_accel.sampling.occupancy import MarchingOptions, OccupancySampler


@pytest.mark.parametrize(
    "levels, step_size, cone_angle",
    [(1, 2 * 3**0.5 / 1000, 0.0), (4, 2 * 3**0.5 / 256, 1 / 256), (2, 0.01, 0.02)],
    ids=["bounded", "contracted-cone", "coarse-cone"],
)
def test_fused_marcher_gives_the_reference_samples(levels, step_size, cone_angle):
    inputs = scene(levels, seed=levels)
    expected = torch_ops.traverse_occupancy_grid(*inputs, step_size, cone_angle)
    actual = marching_numba.traverse_occupancy_grid(*inputs, step_size, cone_angle)
    assert expected[0].numel() > 1000  # the grids are neither empty nor trivially full
    assert torch.equal(actual[0], expected[0])
    assert actual[1].dtype == expected[1].dtype == torch.float32
    # uniform steps are bit-identical; geometric steps may differ by an ulp of pow()
    tolerance = 0.0 if cone_angle == 0.0 else 1e-6
    torch.testing.assert_close(actual[1], expected[1], rtol=tolerance, atol=tolerance)
    torch.testing.assert_close(actual[2], expected[2], rtol=tolerance, atol=tolerance)


def test_fused_marcher_without_rays_or_without_occupied_cells():
    origins, directions, binaries, aabbs, near, far = scene(1, seed=0, n_rays=10)
    empty = marching_numba.traverse_occupancy_grid(
        origins[:0], directions[:0], binaries, aabbs, near[:0], far[:0], 0.01
    )
    assert all(t.numel() == 0 for t in empty) and empty[0].dtype == torch.int64
    nothing = marching_numba.traverse_occupancy_grid(
        origins, directions, torch.zeros_like(binaries), aabbs, near, far, 0.01
    )
    assert all(t.numel() == 0 for t in nothing)


def test_sampler_with_kernel_backend_samples_like_the_torch_backend():
    """Through OccupancySampler.sample with culling: the two backends keep the same samples."""
    origins, directions, binaries, _, _, _ = scene(1, seed=5)
    options = MarchingOptions(render_step_size=0.01)
    results = []
    for backend in ("kernel", "torch"):
        sampler = OccupancySampler(torch.tensor([-1.0, -1.0, -1.0, 1.0, 1.0, 1.0]), resolution=24, backend=backend)
        sampler.grid.binaries = binaries.clone()
        density = lambda points: 50.0 * torch.exp(-(points**2).sum(dim=-1, keepdim=True) / 0.2)  # noqa: E731
        results.append(sample(sampler, origins, directions, options, density_fn=density))
    for actual, expected in zip(*results):
        assert torch.equal(actual, expected)
