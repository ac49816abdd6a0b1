"""The multiresolution hash grid's table layout: what every encoding backend implements.

One flat table holds all levels one after another, each level ``entries x features`` in row-major
order. Level sizes, resolutions and indexing follow tiny-cuda-nn's ``HashGrid`` (linear interpolation),
so the same table is valid for the pure-torch reference, the fused kernels and tiny-cuda-nn itself:

- level ``l`` has scale ``s_l = base_resolution * per_level_scale**l - 1`` and ``ceil(s_l) + 1`` vertices
  per axis; a point ``x`` in ``[0, 1]^3`` lies at ``x * s_l + 0.5`` in vertex units;
- a level holds ``min(round_up_8(resolution**3), 2**log2_hashmap_size)`` entries; levels whose grid fits
  are indexed densely (``i + j r + k r^2``), finer ones by the spatial hash
  ``i * P0 ^ j * P1 ^ k * P2`` (uint32, ``P`` = :data:`HASH_PRIMES`), both taken modulo the level size;
- ``log2_dense_limit`` (not tiny-cuda-nn's) stores densely every level whose grid has at most ``2**log2_dense_limit``
  vertices, also where that is more rows than the hash table's: a block of a split scene keeps the dense levels
  of one model, whose table is larger.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from jaxtyping import Float, Int
from torch import Tensor

HASH_PRIMES = (1, 2654435761, 805459861)
"""Per-axis multipliers of the spatial hash (XOR-combined, uint32 wrap-around)."""


MAX_LOG2_ROWS = 30
"""The most rows a level a table may have, as a power of two (row indices stay within int32)."""


@dataclass(frozen=True)
class HashGridLayout:
    """Shape of a multiresolution hash grid (see the module docstring for the indexing rules)."""

    num_levels: int = 16
    features_per_level: int = 2
    log2_hashmap_size: int = 19
    base_resolution: int = 16
    per_level_scale: float = 2.0
    log2_dense_limit: Optional[int] = None
    """Levels with at most ``2**log2_dense_limit`` vertices are dense whatever the table's size; None: those that
    fit in ``2**log2_hashmap_size`` rows (tiny-cuda-nn's rule)."""

    @classmethod
    def from_resolutions(
        cls,
        num_levels: int,
        min_res: int,
        max_res: int,
        log2_hashmap_size: int,
        features_per_level: int = 2,
        log2_dense_limit: Optional[int] = None,
    ) -> "HashGridLayout":
        """Levels growing geometrically from ``min_res`` to ``max_res`` (nerfstudio's parametrisation)."""
        growth = math.exp((math.log(max_res) - math.log(min_res)) / (num_levels - 1)) if num_levels > 1 else 1.0
        return cls(num_levels, features_per_level, log2_hashmap_size, min_res, growth, log2_dense_limit)

    def __post_init__(self) -> None:
        if self.num_levels < 1 or self.features_per_level < 1:
            raise ValueError("a hash grid needs at least one level and one feature per level")
        if not 1 <= self.log2_hashmap_size <= MAX_LOG2_ROWS:
            raise ValueError(f"log2_hashmap_size must be in [1, {MAX_LOG2_ROWS}], got {self.log2_hashmap_size}")
        if self.log2_dense_limit is not None and not self.log2_hashmap_size <= self.log2_dense_limit <= MAX_LOG2_ROWS:
            raise ValueError(
                f"log2_dense_limit must be in [log2_hashmap_size, {MAX_LOG2_ROWS}] = "
                f"[{self.log2_hashmap_size}, {MAX_LOG2_ROWS}], "
                f"got {self.log2_dense_limit}"
            )

    def level_scale(self, level: int) -> float:
        """``s_l``: vertex units per unit of input at ``level`` (float32, as tiny-cuda-nn computes it)."""
        log2_growth = torch.log2(torch.tensor(self.per_level_scale, dtype=torch.float32))
        return float(torch.exp2(level * log2_growth) * self.base_resolution - 1.0)

    def level_resolution(self, level: int) -> int:
        """Vertices per axis at ``level``."""
        return int(math.ceil(self.level_scale(level))) + 1

    def level_entries(self, level: int) -> int:
        """Table rows of ``level``: the dense grid rounded up to 8, at most ``2**log2_hashmap_size`` unless the
        grid is within ``2**log2_dense_limit``."""
        dense = min(self.level_resolution(level) ** 3, 2**31)
        rows = -(-dense // 8) * 8
        if self.log2_dense_limit is not None and dense <= 2**self.log2_dense_limit:
            return rows
        return min(rows, 2**self.log2_hashmap_size)

    @property
    def tcnn_builds(self) -> bool:
        """Whether tiny-cuda-nn's ``HashGrid`` has this layout: no level dense above ``2**log2_hashmap_size`` rows."""
        return all(self.level_entries(level) <= 2**self.log2_hashmap_size for level in range(self.num_levels))

    def level_is_dense(self, level: int) -> bool:
        """Whether ``level`` indexes its vertices directly (its whole grid fits in its rows)."""
        return self.level_resolution(level) ** 3 <= self.level_entries(level)

    @property
    def level_offsets(self) -> Tuple[int, ...]:
        """First row of each level, plus the total row count at the end (``num_levels + 1`` values)."""
        offsets = [0]
        for level in range(self.num_levels):
            offsets.append(offsets[-1] + self.level_entries(level))
        return tuple(offsets)

    @property
    def num_params(self) -> int:
        """Length of the flat table: rows x features."""
        return self.level_offsets[-1] * self.features_per_level

    @property
    def out_dim(self) -> int:
        return self.num_levels * self.features_per_level

    def level_tensors(self, device: torch.device) -> "LevelTensors":
        """Per-level constants as tensors, for the backends."""
        levels = range(self.num_levels)
        return LevelTensors(
            scales=torch.tensor([self.level_scale(level) for level in levels], dtype=torch.float32, device=device),
            resolutions=torch.tensor(
                [self.level_resolution(level) for level in levels], dtype=torch.int64, device=device
            ),
            offsets=torch.tensor(self.level_offsets, dtype=torch.int64, device=device),
            dense=torch.tensor([self.level_is_dense(level) for level in levels], dtype=torch.bool, device=device),
        )


@dataclass(frozen=True)
class LevelTensors:
    """Per-level constants: ``scales (L,)`` float32, ``resolutions (L,)``, ``offsets (L+1,)`` int64, ``dense (L,)``."""

    scales: Float[Tensor, " levels"]
    resolutions: Int[Tensor, " levels"]
    offsets: Int[Tensor, " levels_plus_1"]
    dense: Tensor
