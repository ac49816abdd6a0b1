"""Pure-PyTorch multiresolution hash encoding: the reference every other backend is tested against.

Written for clarity, not speed: per level, the 8 corner indices of every point (dense or hashed, see
:mod:`nerfstudio_accel.kernels.hash_layout`), a gather from the flat table and trilinear weights.
Autograd provides the gradients for the table and for the input points.
"""

from __future__ import annotations

import itertools

import torch
from jaxtyping import Float, Int
from torch import Tensor

from nerfstudio_accel.kernels.hash_layout import HASH_PRIMES, HashGridLayout

CORNER_BITS = torch.tensor(list(itertools.product((0, 1), repeat=3)), dtype=torch.int64)[:, [2, 1, 0]]
"""``(8, 3)``: per corner, 0 or 1 along x, y, z (corner ``c`` has x = bit 0 of ``c``, y = bit 1, z = bit 2)."""


def corner_rows(vertex: Int[Tensor, "n 8 3"], layout: HashGridLayout, level: int) -> Int[Tensor, "n 8"]:
    """Table rows (within ``level``) of integer vertex coordinates: dense or hashed, modulo the level size."""
    entries = layout.level_entries(level)
    if layout.level_is_dense(level):
        resolution = layout.level_resolution(level)
        index = vertex[..., 0] + vertex[..., 1] * resolution + vertex[..., 2] * resolution**2
    else:
        scrambled = [(vertex[..., axis] * prime) & 0xFFFFFFFF for axis, prime in enumerate(HASH_PRIMES)]
        index = scrambled[0] ^ scrambled[1] ^ scrambled[2]
    return index % entries


def encode_torch(
    points: Float[Tensor, "n 3"], table: Float[Tensor, " params"], layout: HashGridLayout
) -> Float[Tensor, "n out"]:
    """Features ``(n, levels * features_per_level)`` (level-major) of ``points`` in ``[0, 1]^3``."""
    features = layout.features_per_level
    rows = table.view(-1, features)
    offsets = layout.level_offsets
    bits = CORNER_BITS.to(points.device)
    per_level = []
    for level in range(layout.num_levels):
        position = points.float() * layout.level_scale(level) + 0.5
        base = torch.floor(position)
        fraction = position - base
        vertex = base.long()[:, None, :] + bits[None]  # (n, 8, 3)
        weights = torch.where(bits[None].bool(), fraction[:, None, :], 1.0 - fraction[:, None, :]).prod(dim=-1)
        corner_features = rows[offsets[level] + corner_rows(vertex, layout, level)]  # (n, 8, F)
        per_level.append((weights[..., None] * corner_features).sum(dim=1))
    return torch.cat(per_level, dim=-1)
