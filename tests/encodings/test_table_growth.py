"""A hash table grown into more rows a level reads, at each point, the features it read before."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from nerfstudio_accel.encodings.table_growth import grow_table, layout_of_length
from nerfstudio_accel.kernels.hash_layout import HashGridLayout
from nerfstudio_accel.ops._hash_encoding_torch import encode_torch

LARGE = HashGridLayout(num_levels=4, features_per_level=2, log2_hashmap_size=12, base_resolution=4, per_level_scale=2.0)
"""Levels of 4, 8, 16 and 32 vertices a side: 2^6 rows keep level 0 dense and hash the rest, 2^12 rows keep levels
0 to 2 dense (levels 1 and 2 go from hashed to dense) and hash level 3."""
SMALL = dataclasses.replace(LARGE, log2_hashmap_size=6)


def table_of(layout: HashGridLayout) -> torch.Tensor:
    return torch.empty(layout.num_params).uniform_(-1.0, 1.0, generator=torch.Generator().manual_seed(0))


def test_the_layouts_have_every_kind_of_level():
    assert [SMALL.level_is_dense(level) for level in range(4)] == [True, False, False, False]
    assert [LARGE.level_is_dense(level) for level in range(4)] == [True, True, True, False]


def test_points_inside_the_grid_read_the_same_features_after_growing():
    """Points in [0, 0.8)^3: every corner lies inside each level's grid (the scales are 3, 7, 15 and 31)."""
    table = table_of(SMALL)
    grown = grow_table(table, SMALL, LARGE)
    assert grown.shape == (LARGE.num_params,)
    points = torch.rand(4096, 3, generator=torch.Generator().manual_seed(1)) * 0.8
    assert torch.equal(encode_torch(points, grown, LARGE), encode_torch(points, table, SMALL))


def corners_past_the_grid(points: torch.Tensor, level: int) -> torch.Tensor:
    """``(n,)``: whether a point's upper corners at ``level`` lie past the level's last vertex."""
    upper = torch.floor(points * LARGE.level_scale(level) + 0.5).long() + 1
    return (upper >= LARGE.level_resolution(level)).any(dim=-1)


def test_near_the_upper_faces_only_corners_past_a_level_that_became_dense_read_otherwise():
    """Points up to the box's upper faces: the level dense in both and the level hashed in both read the same
    features everywhere; the levels that became dense, wherever no corner lies past the grid."""
    table = table_of(SMALL)
    grown = grow_table(table, SMALL, LARGE)
    points = torch.rand(4096, 3, generator=torch.Generator().manual_seed(2)) * 0.2 + 0.8
    points[:16] = 1.0
    before = encode_torch(points, table, SMALL).view(-1, 4, 2)
    after = encode_torch(points, grown, LARGE).view(-1, 4, 2)
    assert torch.equal(after[:, [0, 3]], before[:, [0, 3]])
    for level in (1, 2):
        past = corners_past_the_grid(points, level)
        assert 0 < int(past.sum()) < len(points)
        assert torch.equal(after[~past, level], before[~past, level])
        assert not torch.equal(after[past, level], before[past, level])


def test_growing_into_the_same_layout_keeps_the_table():
    table = table_of(SMALL)
    assert torch.equal(grow_table(table, SMALL, SMALL), table)


def test_other_layouts_and_lengths_are_refused():
    table = table_of(SMALL)
    with pytest.raises(ValueError, match="only more rows a level"):
        grow_table(table, SMALL, dataclasses.replace(LARGE, base_resolution=8))
    with pytest.raises(ValueError, match="only more rows a level"):
        grow_table(table_of(LARGE), LARGE, SMALL)
    with pytest.raises(ValueError, match="holds"):
        grow_table(table[:-2], SMALL, LARGE)


def test_the_layout_is_found_from_a_table_length():
    assert layout_of_length(LARGE, SMALL.num_params) == SMALL
    assert layout_of_length(SMALL, LARGE.num_params) == LARGE
    assert layout_of_length(LARGE, SMALL.num_params + 2) is None


def test_a_block_layout_with_dense_levels_past_its_rows_is_not_guessed():
    """A spatial block keeps one model's dense levels (``log2_dense_limit``): which ones, its length does not tell."""
    block = dataclasses.replace(LARGE, log2_hashmap_size=10, log2_dense_limit=12)
    smaller = dataclasses.replace(block, log2_hashmap_size=6, log2_dense_limit=12)
    assert layout_of_length(block, smaller.num_params) is None


def test_a_tiny_dense_level_rounds_up_to_its_new_rows():
    """One vertex a side fills 8 rows, more than 2^2: the level is dense at 2^2 and 2^4 rows, in 4 then 8 rows."""
    tiny = HashGridLayout(num_levels=1, features_per_level=2, log2_hashmap_size=2, base_resolution=1)
    larger = dataclasses.replace(tiny, log2_hashmap_size=4)
    assert (tiny.level_entries(0), larger.level_entries(0)) == (4, 8)
    table = table_of(tiny)
    grown = grow_table(table, tiny, larger)
    assert grown.shape == (larger.num_params,) and torch.equal(grown[: tiny.num_params], table)
    points = torch.rand(64, 3, generator=torch.Generator().manual_seed(3))
    assert torch.equal(encode_torch(points, grown, larger), encode_torch(points, table, tiny))
