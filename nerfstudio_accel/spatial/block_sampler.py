"""BlockSampler: one sampler per cell of a spatially split scene, whose samples together are one ray's samples.

Each cell's sampler samples the rays inside its own cell; all of them start from the same near distance per ray
(a training jitter is drawn once, here), so occupancy marchers walk one shared step lattice and each lattice step
lands in exactly one cell (the one holding its midpoint). The blocks' samples, sorted by ray and then by
distance, are the samples one sampler over the whole box would give where every cell's grid has the same
occupancy; rendering them in that order composites each ray front to back over the cells it crosses. A density
record the caller passes hears, once, which of the points all blocks evaluated became samples.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from nerfstudio_accel.ops.backends import ResolvedSamplerBackend
from nerfstudio_accel.sampling.base import DensityFn, DensityRecord, Sampler, StateOverlay, ray_bounds
from nerfstudio_accel.sampling.packed import PackedSamples


class _BlockRecord(DensityRecord):
    """One block's view of the caller's record: points go through to it; the block's kept rows are its own
    call-order rows, moved by ``offset`` (the points earlier blocks evaluated) when the block sampler merges."""

    def __init__(self, record: DensityRecord, offset: int) -> None:
        self.record, self.offset, self.seen = record, offset, 0
        self.rows: Optional[Int[Tensor, " m"]] = None

    def __call__(self, points: Float[Tensor, "n 3"]) -> Float[Tensor, "n 1"]:
        self.seen += points.shape[0]
        return self.record(points)

    def drop_below(self, density: Float[Tensor, ""]) -> None:
        """Not passed on: the caller's record holds every row (blocks name different least densities)."""

    def keep(self, rows: Int[Tensor, " n_samples"]) -> None:
        self.rows = rows + self.offset


class BlockSampler(Sampler):
    """``samplers[k]`` samples the part of each ray inside cell ``k``; ``jitter``: the training jitter's range
    (world units, the marching step), drawn once per ray and shared by every block."""

    def __init__(
        self, samplers: Sequence[Sampler], jitter: float, near_plane: float = 0.05, far_plane: float = 1e3
    ) -> None:
        super().__init__()
        self.samplers = nn.ModuleList(samplers)
        self.jitter, self.near_plane, self.far_plane = jitter, near_plane, far_plane
        self.overlay_label = f"Show occupancy grids ({len(samplers)} blocks)"

    def sample(
        self,
        origins: Float[Tensor, "n_rays 3"],
        directions: Float[Tensor, "n_rays 3"],
        nears: Optional[Float[Tensor, " n_rays"]] = None,
        fars: Optional[Float[Tensor, " n_rays"]] = None,
        density_fn: Optional[DensityFn] = None,
        stratified: bool = False,
    ) -> PackedSamples:
        """Every block's samples of the rays, merged in ray order and, within a ray, front to back."""
        near, far = ray_bounds(origins.shape[0], self.near_plane, self.far_plane, nears, fars, origins.device)
        if stratified:
            near = near + torch.rand_like(near) * self.jitter
        records: List[_BlockRecord] = []
        parts = []
        for sampler in self.samplers:
            block_fn = density_fn
            if isinstance(density_fn, DensityRecord):
                offset = records[-1].offset + records[-1].seen if records else 0
                records.append(_BlockRecord(density_fn, offset))
                block_fn = records[-1]
            parts.append(sampler.sample(origins, directions, near, far, block_fn, stratified=False))
        ray_indices = torch.cat([part.ray_indices for part in parts])
        t_starts = torch.cat([part.t_starts for part in parts])
        order = torch.argsort(t_starts, stable=True)
        order = order[torch.argsort(ray_indices[order], stable=True)]
        if records and any(record.rows is not None for record in records):
            empty = torch.zeros(0, dtype=torch.long, device=origins.device)
            rows = torch.cat([record.rows if record.rows is not None else empty for record in records])
            density_fn.keep(rows[order])  # type: ignore[union-attr]
        t_ends = torch.cat([part.t_ends for part in parts])
        return PackedSamples(ray_indices[order], t_starts[order], t_ends[order], origins, directions)

    def update(self, step: int, density_fn: DensityFn) -> None:
        """Every block's own update (a block's grid asks ``density_fn`` only about points in its cell)."""
        for sampler in self.samplers:
            sampler.update(step, density_fn)

    def figures(self) -> Dict[str, float]:
        """The blocks' sample counts summed; fractions averaged."""
        figures: Dict[str, float] = {}
        for sampler in self.samplers:
            for name, value in sampler.figures().items():
                figures[name] = figures.get(name, 0.0) + value
        return {
            name: value / len(self.samplers) if name.endswith("fraction") else value for name, value in figures.items()
        }

    def state_version(self) -> Optional[int]:
        versions = [sampler.state_version() for sampler in self.samplers]
        return None if None in versions else sum(versions)  # type: ignore[arg-type]

    def state_overlay(self) -> StateOverlay:
        """Every block's overlay together."""
        overlays = [sampler.state_overlay() for sampler in self.samplers]
        return StateOverlay(
            torch.cat([overlay.points for overlay in overlays]), min(overlay.cell_size for overlay in overlays)
        )

    def backend_for(self, device: torch.device) -> ResolvedSamplerBackend:
        return self.samplers[0].backend_for(device)
