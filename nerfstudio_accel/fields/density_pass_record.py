"""DensityPassRecord: a sampler's density function over a HashGridField that keeps what the field computed.

The occupancy sampler's culling pass evaluates the field's density head on every marched candidate without a
graph; the survivors' rows (``PackedSamples.density_index``) are then reused in the same step, so the samples
that go on are not encoded twice: the no-grad scoring forward reuses their density heads, and the graph
forward their hash encodings (:meth:`HashGridField.density_head`'s ``encodings``).
"""

from __future__ import annotations

from typing import List, Optional

import torch
from jaxtyping import Float, Int
from torch import Tensor

from nerfstudio_accel.fields.hash_grid_field import HashGridField


class DensityPassRecord:
    """Activated density ``(n, 3) -> (n, 1)`` through ``field``, keeping, call by call, the position encodings
    (where the field reuses them) and, with ``keep_heads``, the density heads ``(n, 1 + geo)``."""

    def __init__(self, field: HashGridField, keep_heads: bool) -> None:
        self.field = field
        self.keep_heads = keep_heads
        self._encodings: List[Tensor] = []
        self._heads: List[Tensor] = []

    def __call__(self, points: Float[Tensor, "n 3"]) -> Float[Tensor, "n 1"]:
        encodings = None
        if self.field.reuses_encodings:
            encodings = self.field.encode(points)
            self._encodings.append(encodings)
        head = self.field.density_head(points, encodings)
        if self.keep_heads:
            self._heads.append(head)
        return self.field.activate_density(head[:, :1])

    def encodings(self, rows: Int[Tensor, " m"]) -> Optional[Float[Tensor, "m enc"]]:
        """The encodings of the points at ``rows`` (in call order), or None when none were kept."""
        return _concatenated(self._encodings)[rows] if self._encodings else None

    def heads(self, rows: Int[Tensor, " m"]) -> Float[Tensor, "m head"]:
        """The density heads of the points at ``rows`` (in call order); needs ``keep_heads``."""
        assert self.keep_heads, "this record was made without keep_heads"
        return _concatenated(self._heads)[rows]


def _concatenated(parts: List[Tensor]) -> Tensor:
    """The parts in order, without a copy when there is one."""
    return parts[0] if len(parts) == 1 else torch.cat(parts)
