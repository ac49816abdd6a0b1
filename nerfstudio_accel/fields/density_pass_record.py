"""DensityPassRecord: a sampler's density function over a HashGridField that keeps what the field computed.

The occupancy sampler's culling pass evaluates the field's density head on every marched candidate without a
graph and then names the survivors' rows (:meth:`DensityPassRecord.keep`); what the record holds for them is
reused in the same step, so the samples that go on are not encoded twice: the no-grad scoring forward reuses their density heads, and the graph
forward their hash encodings (:meth:`HashGridField.density_head`'s ``encodings``).

Only rows that can survive are held: the sampler first names the least density a kept sample can have
(:meth:`DensityPassRecord.drop_below`), and each call keeps the rows at or above it (a candidate in empty space
can never pass the alpha threshold), with their call-order rows as the map the kept rows are read through.
So the record grows with the chunks' survivors, not with every candidate, and lookups gather from the held
chunks without concatenating them.
"""

from __future__ import annotations

from typing import List, Optional

import torch
from jaxtyping import Float, Int
from torch import Tensor

from nerfstudio_accel.fields.hash_grid_field import HashGridField
from nerfstudio_accel.kernels.density_network import DensityNetwork
from nerfstudio_accel.sampling.base import DensityRecord


class DensityPassRecord(DensityRecord):
    """Activated density ``(n, 3) -> (n, 1)`` through ``field``, keeping, call by call, the position encodings
    (where the field reuses them) and, with ``keep_heads``, the density heads ``(n, 1 + geo)``."""

    def __init__(self, field: HashGridField, keep_heads: bool) -> None:
        self.field = field
        self.keep_heads = keep_heads
        self._least_density: Optional[Tensor] = None
        self._calls = 0
        self._seen = 0
        self._encodings: List[Tensor] = []
        self._heads: List[Tensor] = []
        self._held: List[Tensor] = []  # call-order rows of the held ones, once rows are dropped
        self._kept: Optional[Tensor] = None
        self._all_held_kept = False  # a fused pass: the held rows are the kept samples, in order

    def drop_below(self, density: Float[Tensor, ""]) -> None:
        """Hold only the rows whose density is at least ``density`` (or NaN) from the first call on."""
        assert self._calls == 0, "drop_below comes before the record's first call"
        self._least_density = density

    def __call__(self, points: Float[Tensor, "n 3"]) -> Float[Tensor, "n 1"]:
        encodings = self.field.encode(points) if self.field.reuses_encodings else None
        head = self.field.density_head(points, encodings)
        density = self.field.activate_density(head[:, :1])
        holds = encodings is not None or self.keep_heads
        if holds and self._least_density is not None:
            held = torch.nonzero(~(density.reshape(-1) < self._least_density)).reshape(-1)
            self._held.append(held + self._seen)
            encodings = None if encodings is None else encodings[held]
            head = head[held]
        if encodings is not None:
            self._encodings.append(encodings)
        if self.keep_heads:
            self._heads.append(head)
        self._calls += 1
        self._seen += points.shape[0]
        return density

    def density_network(self) -> Optional[DensityNetwork]:
        """The field's (:meth:`HashGridField.density_network`, with every head row when ``keep_heads``) until the
        record's first call."""
        return self.field.density_network(heads=self.keep_heads) if self._calls == 0 else None

    def keep_encoded(self, encodings: Float[Tensor, "n_samples enc"], heads: Float[Tensor, "n_samples heads"]) -> None:
        """Hold the kept samples' encodings and, with ``keep_heads``, their density heads (the pass's)."""
        assert self._calls == 0 and self._least_density is None, "a fused pass instead of calls, not after them"
        self._encodings = [encodings]
        if self.keep_heads:
            assert heads.shape[1] == 1 + self.field.geo_feat_dim, "a pass over density_network(), with every head row"
            self._heads = [heads]
        self._all_held_kept = True

    @property
    def held_rows(self) -> int:
        """How many rows the record holds (each ``enc`` encodings, plus ``1 + geo`` with ``keep_heads``)."""
        parts = self._encodings or self._heads
        return sum(part.shape[0] for part in parts)

    def keep(self, rows: Int[Tensor, " n_samples"]) -> None:
        self._kept = rows

    @property
    def kept(self) -> bool:
        """Whether a sampler named the rows of its samples (it ran a culling pass through this record)."""
        return self._all_held_kept or self._kept is not None

    def kept_encodings(self) -> Optional[Float[Tensor, "n_samples enc"]]:
        """The position encodings of the kept samples, in order; None where the field reuses none or nothing was
        kept."""
        if not self._encodings or not self.kept:
            return None
        return self._encodings[0] if self._all_held_kept else _gather(self._encodings, self._held_index(self._kept))

    def kept_heads(self) -> Float[Tensor, "n_samples head"]:
        """The density heads of the kept samples, in order; needs ``keep_heads`` and :attr:`kept`."""
        assert self.keep_heads and self.kept, "a record made with keep_heads, whose rows a sampler kept"
        return self._heads[0] if self._all_held_kept else _gather(self._heads, self._held_index(self._kept))

    def _held_index(self, rows: Int[Tensor, " m"]) -> Int[Tensor, " m"]:
        """Where call-order ``rows`` are among the held rows (the same rows when none were dropped)."""
        if self._least_density is None:
            return rows
        if len(self._held) > 1:
            self._held = [torch.cat(self._held)]  # sorted: calls in order, each's rows in order
        return torch.searchsorted(self._held[0], rows)


def _gather(parts: List[Tensor], index: Int[Tensor, " m"]) -> Tensor:
    """The rows at ``index`` of the parts' concatenation ``(total, k)``, without concatenating them."""
    if len(parts) == 1:
        return parts[0][index]
    sizes = torch.tensor([part.shape[0] for part in parts], device=index.device)
    part_of = torch.searchsorted(torch.cumsum(sizes, 0), index, right=True)
    by_part = torch.argsort(part_of, stable=True)
    out = parts[0].new_empty(index.shape[0], parts[0].shape[1])
    start = 0
    for part, picked in zip(parts, torch.split(by_part, torch.bincount(part_of, minlength=len(parts)).tolist())):
        out[picked] = part[index[picked] - start]
        start += part.shape[0]
    return out
