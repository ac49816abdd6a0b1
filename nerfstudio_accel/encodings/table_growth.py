"""A hash table laid out anew in more rows a level, reading what it read before.

Two layouts that differ only in ``log2_hashmap_size`` index the same vertices; growing from ``2**a`` to ``2**b``
rows (``a < b``), every level is one of three kinds:

- dense in both: the same rows, copied;
- hashed in both: a vertex's row is its hash modulo ``2**b``, whose low ``a`` bits are its old row, so the new
  level is the old one repeated ``2**(b - a)`` times;
- hashed before and dense now: each vertex of the grid takes the row its hash read.

So every point reads the features it read before, except points whose corners cross the upper faces of a level of
the third kind (a vertex there wraps onto another's dense row, as it did not under the hash): those lie within one
cell of the box's upper faces at that level.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
from jaxtyping import Float
from torch import Tensor

from nerfstudio_accel.kernels.hash_layout import MAX_LOG2_ROWS, HashGridLayout
from nerfstudio_accel.ops._hash_encoding_torch import corner_rows


def layout_of_length(layout: HashGridLayout, num_params: int) -> Optional[HashGridLayout]:
    """``layout`` with the rows a level whose table holds ``num_params`` entries; None where no size gives that or
    ``layout`` keeps dense levels past its rows (a spatial block's: which levels the source kept dense is not told
    by its length)."""
    if layout.log2_dense_limit is not None:
        return None
    for log2_rows in range(1, MAX_LOG2_ROWS + 1):
        other = dataclasses.replace(layout, log2_hashmap_size=log2_rows)
        if other.num_params == num_params:
            return other
    return None


def grow_table(
    table: Float[Tensor, " small_params"], small: HashGridLayout, large: HashGridLayout
) -> Float[Tensor, " large_params"]:
    """``table``, of layout ``small``, in layout ``large``: the same grid with at least as many rows a level
    (the module docstring says which points read the same features after). Raises ValueError for layouts that
    differ in anything else."""
    if large.log2_hashmap_size < small.log2_hashmap_size or small != dataclasses.replace(
        large, log2_hashmap_size=small.log2_hashmap_size
    ):
        raise ValueError(f"cannot grow a hash table of layout {small} into {large}: only more rows a level")
    if table.numel() != small.num_params:
        raise ValueError(f"a table of layout {small} holds {small.num_params} entries, not {table.numel()}")
    features = small.features_per_level
    rows = table.detach().reshape(-1, features)
    offsets = small.level_offsets
    levels = []
    for level in range(small.num_levels):
        old = rows[offsets[level] : offsets[level + 1]]
        entries = large.level_entries(level)
        if small.level_is_dense(level):  # dense in both; a tiny level may round up to more rows now
            levels.append(torch.cat([old, old.new_zeros(entries - old.shape[0], features)]))
        elif not large.level_is_dense(level):
            levels.append(old.repeat(entries // old.shape[0], 1))
        else:
            resolution = large.level_resolution(level)
            index = torch.arange(resolution**3, device=table.device)
            vertex = torch.stack([index % resolution, index // resolution % resolution, index // resolution**2], -1)
            grown = old.new_zeros(entries, features)  # rows past the grid: read only by wrapped vertices
            grown[: resolution**3] = old[corner_rows(vertex, small, level)]
            levels.append(grown)
    return torch.cat(levels).reshape(-1)
