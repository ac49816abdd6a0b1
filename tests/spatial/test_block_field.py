"""BlockFields answers each point with its own cell's field, values and gradients alike; its cells share one
appearance embedding."""

from __future__ import annotations

import pytest
import torch

from nerfstudio_accel.errors import CheckpointError
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


def test_the_cells_share_one_appearance_vector_per_image():
    """Each sample's colour MLP reads its image's vector from the one embedding (the mean outside training), and
    samples of every cell train that vector."""
    torch.manual_seed(0)
    cells = kd_cells(BOX, 2)
    fields = [
        HashGridField(cell, num_levels=4, max_res=32, log2_hashmap_size=10, appearance_dim=4, shared_appearance=True)
        for cell in cells
    ]
    appearance = torch.nn.Embedding(5, 4)
    split = BlockFields(fields, cells, appearance)
    assert all(field.appearance is None for field in fields)
    points = torch.stack([cells[0].mean(dim=0), cells[1].mean(dim=0)])
    directions = torch.nn.functional.normalize(torch.ones(2, 3), dim=-1)
    cameras = torch.tensor([3, 3])
    _, color = split.field_raw(points, directions, cameras)
    for k in range(2):
        head = fields[k].density_head(points[k : k + 1])
        own = fields[k].color_raw(head[:, 1:], directions[k : k + 1], appearance=appearance.weight[3:4])
        assert torch.allclose(color[k : k + 1], own)
    grads = []
    for k in range(2):  # each cell's sample alone trains image 3's vector, and only it
        appearance.zero_grad()
        split.field_raw(points[k : k + 1], directions[k : k + 1], cameras[k : k + 1])[1].sum().backward()
        grad = appearance.weight.grad
        assert float(grad[3].abs().sum()) > 0 and float(grad[torch.arange(5) != 3].abs().sum()) == 0
        grads.append(grad[3].clone())
    assert not torch.allclose(grads[0], grads[1]), "two cells' colour MLPs, two gradients"
    split.eval()
    _, evaluated = split.field_raw(points, directions, cameras)
    head = fields[0].density_head(points[:1])
    mean = appearance.weight.mean(dim=0, keepdim=True)
    assert torch.allclose(evaluated[:1], fields[0].color_raw(head[:, 1:], directions[:1], appearance=mean))


def test_a_checkpoint_with_an_embedding_per_block_is_refused_in_one_line():
    """A split capture saved when each block held its own embedding would otherwise load without them (nerfstudio's
    tools retry a failed strict load without strictness) and render with a fresh embedding."""
    cells = kd_cells(BOX, 2)
    old = BlockFields(
        [HashGridField(cell, num_levels=4, max_res=32, num_images=3, appearance_dim=4) for cell in cells], cells
    )
    new = BlockFields(
        [HashGridField(cell, num_levels=4, max_res=32, appearance_dim=4, shared_appearance=True) for cell in cells],
        cells,
        torch.nn.Embedding(3, 4),
    )
    with pytest.raises(CheckpointError, match="each hold their own appearance embedding"):
        new.load_state_dict(old.state_dict(), strict=False)
    new.load_state_dict(new.state_dict())  # the shared layout loads
