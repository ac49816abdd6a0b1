"""BlockSampler: one occupancy sampler per cell of a spatially split scene, whose samples together are one ray's
samples.

Each cell's sampler marches the rays inside its own cell; all of them start from the same near distance per ray
(a training jitter is drawn once, here), so they walk one shared step lattice and each lattice step lands in
exactly one cell (the one holding its midpoint). The blocks' candidates, sorted by ray and then by distance, are
the candidates one sampler over the whole box would march where every cell's grid has the same occupancy. They
are capped and culled together, as that one sampler would: a ray stops early once it is opaque, whichever cells
made it so, and each candidate's opacity threshold is its own cell's. Rendering the kept samples in that order
composites each ray front to back over the cells it crosses.

Training one block per rank, a process holds only its own cell's sampler: it marches its cell, culls with
:func:`~nerfstudio_accel.spatial.block_culling.cull_own_block` (the same samples, agreed with the other ranks) and
updates its grid alone.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from jaxtyping import Float
from torch import Tensor

from nerfstudio_accel.ops.packed_scan import first_samples_of_each_ray
from nerfstudio_accel.sampling.base import DensityFn, StateOverlay, ray_bounds
from nerfstudio_accel.sampling.culling_pass import AlphaThreshold, ThresholdPerCandidate
from nerfstudio_accel.sampling.front_to_back_culling import chosen_first_samples
from nerfstudio_accel.sampling.occupancy import OccupancySampler, visible_samples
from nerfstudio_accel.sampling.packed import PackedSamples
from nerfstudio_accel.spatial.block_culling import cull_own_block
from nerfstudio_accel.spatial.cell_samplers import CellSamplers, front_to_back
from nerfstudio_accel.step_phases import phase


class BlockSampler(CellSamplers):
    """``samplers[k]`` marches the part of each ray inside ``cells[k]`` (``(k, 2, 3)`` boxes), all with the same
    marching options; the training jitter (up to one marching step) is drawn once per ray and shared by every
    block. ``samplers`` holds every cell's sampler (a sequence, or by cell index), or one cell's by its index
    (:attr:`own_block`)."""

    def __init__(
        self,
        samplers: Union[Sequence[OccupancySampler], Mapping[int, OccupancySampler]],
        cells: Float[Tensor, "k 2 3"],
        near_plane: float = 0.05,
        far_plane: float = 1e3,
        shown_box: Optional[Float[Tensor, "2 3"]] = None,
    ) -> None:
        super().__init__(samplers, cells, shown_box)
        if self.own_block is not None:  # this rank alone holds its grid
            own = self.sampler_list()[0]
            own.grid_update = dataclasses.replace(own.grid_update, shared_by_ranks=False)
        self.marching = self.sampler_list()[0].marching
        self.near_plane, self.far_plane = near_plane, far_plane
        self.overlay_label = f"Show occupancy grids ({len(self.held)} blocks)"
        self._last_counts: Dict[str, Union[int, Tensor]] = {}
        self._thresholds: Optional[Tuple[Tuple[Tuple[float, ...], torch.device], Tensor]] = None

    def sampler_list(self) -> List[OccupancySampler]:  # type: ignore[override]
        """The occupancy samplers held, in the order of their cells."""
        return list(self.samplers.values())  # type: ignore[arg-type]

    def sample(
        self,
        origins: Float[Tensor, "n_rays 3"],
        directions: Float[Tensor, "n_rays 3"],
        nears: Optional[Float[Tensor, " n_rays"]] = None,
        fars: Optional[Float[Tensor, " n_rays"]] = None,
        density_fn: Optional[DensityFn] = None,
        stratified: bool = False,
    ) -> PackedSamples:
        """Every block's candidates of the rays, merged in ray order and, within a ray, front to back; at most
        ``max_samples_per_ray`` per ray; then, with ``density_fn``, the visible ones (one culling pass over the
        merged candidates). Holding one block: the samples of its own cell, which the other ranks' calls for the same
        rays (``density_fn`` required) agree on."""
        near, far = ray_bounds(origins.shape[0], self.near_plane, self.far_plane, nears, fars, origins.device)
        if stratified:
            near = near + torch.rand_like(near) * self.marching.render_step_size
        if self.own_block is not None:
            assert density_fn is not None, "a rank's block is culled together with the others' blocks"
            return self._sample_own_block(origins, directions, near, far, density_fn)
        with phase("marching"):
            parts = [sampler.march(origins, directions, near, far) for sampler in self.sampler_list()]
            ray_indices = torch.cat([part[0] for part in parts])
            t_starts = torch.cat([part[1] for part in parts])
            blocks = torch.cat([torch.full_like(part[0], k) for k, part in enumerate(parts)])
            order = front_to_back(ray_indices, t_starts)
            if self.marching.max_samples_per_ray is not None and order.numel() > 0:
                order = order[first_samples_of_each_ray(ray_indices[order], self.marching.max_samples_per_ray)]
            t_ends = torch.cat([part[2] for part in parts])[order]
            ray_indices, t_starts, blocks = ray_indices[order], t_starts[order], blocks[order]
        thresholds = tuple(sampler.effective_alpha_threshold() for sampler in self.sampler_list())
        alpha_threshold: AlphaThreshold = thresholds[0]
        if len(set(thresholds)) > 1:  # each candidate culled by its own cell's threshold
            alpha_threshold = ThresholdPerCandidate(
                self._cell_thresholds(thresholds, blocks.device)[blocks], min(thresholds)
            )
        samples, counts = visible_samples(
            ray_indices,
            t_starts,
            t_ends,
            origins,
            directions,
            density_fn,
            alpha_threshold,
            self.marching,
            self.backend_for(origins.device),
            chosen_first_samples(self.marching.culling_first_samples, self._last_counts, origins.device.type),
        )
        if self.training:
            self._last_kept = samples
            if counts is not None:
                self._last_counts = counts
        return samples

    def _sample_own_block(
        self,
        origins: Float[Tensor, "n_rays 3"],
        directions: Float[Tensor, "n_rays 3"],
        near: Float[Tensor, " n_rays"],
        far: Float[Tensor, " n_rays"],
        density_fn: DensityFn,
    ) -> PackedSamples:
        """The own cell's samples of the rays, capped and culled across the ranks."""
        own = self.sampler_list()[0]
        with phase("marching"):
            ray_indices, t_starts, t_ends = own.march(origins, directions, near, far)
        with phase("culling density pass"):
            keep, counts = cull_own_block(
                ray_indices,
                t_starts,
                t_ends,
                origins,
                directions,
                density_fn,
                own.effective_alpha_threshold(),
                self.marching,
            )
        samples = PackedSamples(ray_indices[keep], t_starts[keep], t_ends[keep], origins, directions)
        if self.training:
            self._last_kept, self._last_counts = samples, counts
        return samples

    def _cell_thresholds(self, thresholds: Tuple[float, ...], device: torch.device) -> Float[Tensor, " k"]:
        """The cells' thresholds on ``device``, copied there again only when they change (after grid updates)."""
        if self._thresholds is None or self._thresholds[0] != (thresholds, device):
            self._thresholds = ((thresholds, device), torch.tensor(thresholds).to(device))
        return self._thresholds[1]

    def figures(self) -> Dict[str, float]:
        """The last training sampling's counts over every block (``candidates``, ``evaluated``, ``kept``,
        ``alpha_culled``), each block's kept samples per ray of the batch (``samples_per_ray_block_<k>``) and the
        blocks' mean ``occupied_fraction``."""
        fractions = [sampler.occupied_fraction() for sampler in self.sampler_list()]
        figures = {name: float(count) for name, count in self._last_counts.items()}
        return {**figures, **self.samples_per_block(), "occupied_fraction": sum(fractions) / len(fractions)}

    def state_version(self) -> Optional[int]:
        versions = [sampler.state_version() for sampler in self.sampler_list()]
        return None if None in versions else sum(versions)  # type: ignore[arg-type]

    def state_overlay(self) -> StateOverlay:
        """Every block's overlay together."""
        overlays = [sampler.state_overlay() for sampler in self.sampler_list()]
        return StateOverlay(
            torch.cat([overlay.points for overlay in overlays]), min(overlay.cell_size for overlay in overlays)
        )
