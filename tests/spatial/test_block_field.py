"""BlockFields answers each point with its own cell's field, values and gradients alike."""

from __future__ import annotations

import torch

from nerfstudio_accel.fields.hash_grid_field import HashGridField
from nerfstudio_accel.spatial.block_field import BlockFields
from nerfstudio_accel.spatial.cells import cell_of, kd_cells

BOX = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]])


def block_fields(k: int = 3) -> BlockFields:
    torch.manual_seed(0)
    cells = kd_cells(BOX, k)
    fields = [HashGridField(cell, num_levels=4, max_res=32, log2_hashmap_size=10) for cell in cells]
    return BlockFields(fields, cells)


def test_each_point_is_answered_by_its_cells_field():
    split = block_fields()
    points = torch.rand(300, 3) * 2 - 1
    directions = torch.nn.functional.normalize(torch.randn(300, 3), dim=-1)
    cells = cell_of(points, split.cells)
    density, color = split.field_raw(points, directions)
    encodings = split.encode(points)
    for k, field in enumerate(split.field_list()):
        rows = cells == k
        assert int(rows.sum()) > 0
        own_density, own_color = field.field_raw(points[rows], directions[rows])
        assert torch.allclose(density[rows], own_density) and torch.allclose(color[rows], own_color)
        assert torch.allclose(encodings[rows], field.encode(points[rows]))
        assert torch.allclose(split.density(points)[rows], field.density(points[rows]))
    heads = split.density_head(points, encodings)
    assert torch.allclose(heads, split.density_head(points))
    assert torch.allclose(split.color_raw(heads[:, 1:], directions, None, points), color)


def test_gradients_reach_only_the_fields_of_cells_with_points():
    split = block_fields()
    points = split.cells[1].mean(dim=0) + 0.01 * torch.randn(50, 3)  # all in cell 1
    density, color = split.field_raw(points, torch.nn.functional.normalize(torch.randn(50, 3), dim=-1))
    (density.sum() + color.sum()).backward()
    grads = [field.position_encoding.table.grad for field in split.field_list()]
    assert grads[0] is None and grads[2] is None
    assert grads[1] is not None and float(grads[1].abs().sum()) > 0


def test_coarse_to_fine_weights_reach_every_cell():
    split = block_fields(2)
    weights = torch.ones(split.position_encoding.get_out_dim())
    split.level_weights = weights
    assert all(field.level_weights is weights for field in split.field_list())
