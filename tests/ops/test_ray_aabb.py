"""The ray-box op on every device against the slab test the marchers start from."""

from __future__ import annotations

import pytest
import torch

from nerfstudio_accel.kernels import lattice
from nerfstudio_accel.ops.ray_aabb import ray_aabb_intersect
from twin_checks import DEVICES, assert_like_twin, device_for


@pytest.mark.parametrize("device", DEVICES)
def test_ray_aabb_intersect_matches_the_twin(device):
    """Rays from outside and inside the box, axis-aligned ones, and misses."""
    on = device_for("torch", device)
    generator = torch.Generator().manual_seed(5)
    origins = torch.cat([2.5 * torch.randn(60, 3, generator=generator), 0.5 * torch.rand(20, 3, generator=generator)])
    directions = torch.nn.functional.normalize(torch.randn(80, 3, generator=generator), dim=-1)
    directions[:5] = torch.tensor([0.0, 0.0, 1.0])
    aabb = torch.tensor([-1.0, -0.5, 0.0, 1.0, 1.5, 1.0])
    expected = lattice.ray_aabb_intersect(origins, directions, aabb)
    assert 0 < int(expected[2].sum()) < 80
    actual = ray_aabb_intersect(origins.to(on), directions.to(on), aabb.to(on))
    for got, want in zip(actual, expected):
        if got.dtype == torch.bool:
            assert torch.equal(got.cpu(), want)
        else:
            assert_like_twin(got, want, "torch", device)
