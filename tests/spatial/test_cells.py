"""The k-d cells of a split scene: they tile the box, and every point has exactly one."""

from __future__ import annotations

import pytest
import torch

from nerfstudio_accel.spatial.cells import MAX_BLOCKS, cell_of, kd_cells

BOX = torch.tensor([[-1.0, -2.0, -0.5], [3.0, 2.0, 1.5]])


@pytest.mark.parametrize("k", range(1, MAX_BLOCKS + 1))
def test_cells_tile_the_box_in_equal_shares(k):
    cells = kd_cells(BOX, k)
    assert cells.shape == (k, 2, 3)
    volumes = (cells[:, 1] - cells[:, 0]).prod(dim=-1)
    box_volume = float((BOX[1] - BOX[0]).prod())
    assert float(volumes.sum()) == pytest.approx(box_volume)
    assert torch.allclose(volumes, torch.full((k,), box_volume / k))
    points = BOX[0] + torch.rand(4000, 3, generator=torch.Generator().manual_seed(k)) * (BOX[1] - BOX[0])
    inside = ((points[:, None] > cells[None, :, 0]) & (points[:, None] < cells[None, :, 1])).all(dim=-1)
    assert bool((inside.sum(dim=1) == 1).all()), "interiors are disjoint and cover the box"
    assert torch.equal(cell_of(points, cells), torch.argmax(inside.int(), dim=1))


def test_points_outside_every_cell_go_to_the_nearest():
    cells = kd_cells(BOX, 2)  # split along x (the longest axis) at 1
    outside = torch.tensor([[-9.0, 0.0, 0.0], [9.0, 0.0, 0.0], [2.0, 50.0, -50.0]])
    assert cell_of(outside, cells).tolist() == [0, 1, 1]


def test_a_split_beyond_the_built_depth_is_refused():
    with pytest.raises(ValueError, match=f"1 to {MAX_BLOCKS} cells"):
        kd_cells(BOX, MAX_BLOCKS + 1)
