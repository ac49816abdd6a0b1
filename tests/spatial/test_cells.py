"""The k-d cells of a split scene: they tile the box (a capture's reach out to all of space), every point has exactly
one, and a capture's cell maps into its own region of the contracted grid."""

from __future__ import annotations

import pytest
import torch

from nerfstudio_accel.fields.hash_grid_field import grid_coordinates
from nerfstudio_accel.spatial.cells import MAX_BLOCKS, cell_of, contracted_region, kd_cells, unbounded_cells

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


@pytest.mark.parametrize("k", range(2, MAX_BLOCKS + 1))
def test_a_captures_cells_cover_all_space_and_each_maps_into_its_own_grid_region(k):
    """Points near the box and far out (up to 10^4 box sizes): each lies inside exactly one unbounded cell, and its
    contracted grid coordinates lie in that cell's region; cells split through the box's centre (2 and 4 here; 8 on
    a cube) give regions that tile the contracted grid."""
    cells = unbounded_cells(kd_cells(BOX, k), BOX)
    generator = torch.Generator().manual_seed(k)
    directions = torch.nn.functional.normalize(torch.randn(6000, 3, generator=generator), dim=-1)
    distances = 10.0 ** (torch.rand(6000, 1, generator=generator) * 6.0 - 2.0)  # 0.01 to 10^4 from the centre
    points = BOX.mean(dim=0) + directions * distances
    inside = ((points[:, None] > cells[None, :, 0]) & (points[:, None] < cells[None, :, 1])).all(dim=-1)
    assert bool((inside.sum(dim=1) == 1).all()), "the cells tile all of space"
    assert torch.equal(cell_of(points, cells), torch.argmax(inside.int(), dim=1))
    regions = torch.stack([contracted_region(cell, BOX) for cell in cells])
    grid = grid_coordinates(points, BOX, contract=True)
    own = regions[cell_of(points, cells)]
    assert bool(((grid >= own[:, 0] - 1e-6) & (grid <= own[:, 1] + 1e-6)).all())
    if k in (2, 4):
        volumes = (regions[:, 1] - regions[:, 0]).prod(dim=-1)
        assert float(volumes.sum()) == pytest.approx(1.0, abs=1e-5)


def test_a_bounded_cell_stays_in_the_box_and_an_outer_one_reaches_out():
    cells = unbounded_cells(kd_cells(BOX, 2), BOX)
    assert cells[0, 1, 0] == 1.0 and cells[1, 0, 0] == 1.0, "the split plane stays where it was"
    assert bool((cells[:, 0] < -1e5).sum() == 5) and bool((cells[:, 1] > 1e5).sum() == 5)
