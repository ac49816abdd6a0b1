"""The view directions' spherical harmonics: the CPU kernel bit for bit against nerfstudio's encoding (the twin),
the twin wherever the kernel does not run, and the field's colour through either."""

from __future__ import annotations

import pytest
import torch
from nerfstudio.utils.math import components_from_spherical_harmonics

from accel_test_helpers import field_pair
from nerfstudio_accel.ops.direction_encoding import spherical_harmonics


def _directions(n: int = 4000, seed: int = 0) -> torch.Tensor:
    directions = torch.randn(n, 3, generator=torch.Generator().manual_seed(seed))
    directions[:3] = torch.eye(3)  # the axes, where most components vanish
    return directions / directions.norm(dim=-1, keepdim=True)


def test_the_kernel_is_bit_identical_to_nerfstudios_encoding():
    directions = _directions()
    expected = components_from_spherical_harmonics(4, directions)
    actual = spherical_harmonics(directions, 4, backend="kernel")
    assert actual.shape == (4000, 16)
    assert torch.equal(actual, expected)
    assert not torch.equal(actual, spherical_harmonics(_directions(seed=1), 4, backend="kernel"))


@pytest.mark.parametrize("backend, levels, dtype", [("torch", 4, torch.float32), ("kernel", 3, torch.float32),
                                                    ("kernel", 4, torch.float64)])  # fmt: skip
def test_what_the_kernel_does_not_take_runs_the_twin(backend, levels, dtype):
    directions = _directions(100).to(dtype)
    expected = components_from_spherical_harmonics(levels, directions)
    actual = spherical_harmonics(directions, levels, backend=backend)
    assert actual.dtype == expected.dtype and torch.equal(actual, expected)


def test_the_fields_colour_is_the_same_on_either_backend():
    reference, fused = field_pair("torch", "kernel")
    geo = torch.randn(500, reference.geo_feat_dim, requires_grad=True)
    directions = _directions(500)
    expected = reference.color_raw(geo, directions)
    actual = fused.color_raw(geo, directions)
    assert torch.equal(actual, expected)
    (grad,) = torch.autograd.grad(actual.sum(), geo)  # the geometry features still learn through the colour MLP
    assert grad.abs().sum() > 0
