"""ProposalDensityField: non-negative densities anywhere (bounded: clamped to the box; contracted: finite far
away), a graph into its hash table and MLP, empty inputs."""

from __future__ import annotations

import pytest
import torch

from nerfstudio_accel.fields.proposal_field import ProposalDensityField

AABB = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]])


@pytest.mark.parametrize("contract", [False, True])
def test_densities_are_non_negative_and_train(contract):
    torch.manual_seed(0)
    field = ProposalDensityField(AABB, contract, max_res=64, log2_hashmap_size=12)
    positions = torch.cat([torch.rand(100, 3) * 2 - 1, 1e4 * torch.randn(20, 3)])
    densities = field(positions)
    assert densities.shape == (120, 1)
    assert bool(torch.isfinite(densities).all()) and bool((densities >= 0).all())
    densities.sum().backward()
    assert all(parameter.grad is not None for parameter in field.parameters())
    assert float(field.position_encoding.table.grad.abs().sum()) > 0


def test_bounded_points_outside_the_box_read_the_box_face():
    torch.manual_seed(0)
    field = ProposalDensityField(AABB, contract=False, max_res=64, log2_hashmap_size=12)
    outside = torch.tensor([[3.0, 0.2, -0.4], [0.1, -7.0, 0.5]])
    with torch.no_grad():
        assert torch.equal(field(outside), field(outside.clamp(-1.0, 1.0)))


def test_no_points_no_call():
    field = ProposalDensityField(AABB, contract=True, max_res=64, log2_hashmap_size=12)
    assert field(torch.zeros(0, 3)).shape == (0, 1)
