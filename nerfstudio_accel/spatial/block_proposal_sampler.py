"""BlockProposalSampler: one proposal sampler per cell of a spatially split scene (a capture's blocks), whose
samples together are one ray's samples.

Each cell's sampler has its own proposal fields and places its ``num_samples`` only on the part of a ray inside its
cell (the ray clipped to the cell's box, from where it enters to where it leaves); a ray that misses a cell gets no
sample from it. The blocks' samples, sorted by ray and then by distance, composite each ray front to back over the
cells it crosses. Each block's proposal fields learn from the interlevel loss against the main field's weights of
the block's own samples (the weights as the ray sees them, after the blocks in front), summed over the blocks.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from jaxtyping import Float, Int
from torch import Tensor

from nerfstudio_accel.ops.ray_aabb import ray_aabb_intersect
from nerfstudio_accel.sampling.base import DensityFn, ray_bounds
from nerfstudio_accel.sampling.packed import PackedSamples
from nerfstudio_accel.sampling.proposal import ProposalSampler
from nerfstudio_accel.spatial.cell_samplers import CellSamplers, front_to_back
from nerfstudio_accel.step_phases import phase


class BlockProposalSampler(CellSamplers):
    """``samplers[k]`` (a :class:`~nerfstudio_accel.sampling.proposal.ProposalSampler` whose fields span
    ``cells[k]``) samples the part of each ray inside ``cells[k]`` (``(k, 2, 3)`` boxes)."""

    overlay_label = "Show proposal samples (centre ray)"
    loss_names = ProposalSampler.loss_names

    def __init__(
        self,
        samplers: Union[Sequence[ProposalSampler], Mapping[int, ProposalSampler]],
        cells: Float[Tensor, "k 2 3"],
        near_plane: float = 0.05,
        far_plane: float = 1e3,
        shown_box: Optional[Float[Tensor, "2 3"]] = None,
    ) -> None:
        super().__init__(samplers, cells, shown_box)
        self.near_plane, self.far_plane = near_plane, far_plane
        self._last_parts: Optional[Tuple[Tensor, List[PackedSamples], Int[Tensor, " n"]]] = None
        """The last training sampling's merged ``t_starts``, each block's own samples (whose proposal rounds its
        sampler keeps) and, per merged sample, its row in the blocks' samples concatenated."""

    def sampler_list(self) -> List[ProposalSampler]:  # type: ignore[override]
        """The proposal samplers held, in the order of their cells."""
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
        """Every block's ``num_samples`` on each ray that crosses its cell, merged in ray order and, within a ray,
        front to back. ``density_fn`` is not called. The training jitter of block ``k`` comes from its own generator,
        seeded by one draw from the default one plus ``k``, so a rank that holds block ``k`` draws what one process
        draws for it."""
        n_rays, device = origins.shape[0], origins.device
        near, far = ray_bounds(n_rays, self.near_plane, self.far_plane, nears, fars, device)
        parts: List[PackedSamples] = []
        block_rays: List[Int[Tensor, " m"]] = []
        seed = int(torch.randint(0, 2**62, (1,))) if stratified else 0  # one draw, then one generator per block
        cells = self.cells.to(origins).flatten(1)  # one copy to the rays' device per call
        with phase("proposal rounds"):
            for k, sampler in zip(self.held, self.sampler_list()):
                enter, exit_, _ = ray_aabb_intersect(origins, directions, cells[k])
                block_near, block_far = torch.maximum(near, enter), torch.minimum(far, exit_)
                rays = torch.nonzero(block_far > block_near).reshape(-1)
                generator = torch.Generator(device=device).manual_seed(seed + k) if stratified else None
                parts.append(
                    sampler.sample(
                        origins[rays], directions[rays], block_near[rays], block_far[rays], None, stratified, generator
                    )
                )
                block_rays.append(rays)
        ray_indices = torch.cat([rays[part.ray_indices] for part, rays in zip(parts, block_rays)])
        t_starts = torch.cat([part.t_starts for part in parts])
        order = front_to_back(ray_indices, t_starts)
        t_ends = torch.cat([part.t_ends for part in parts])
        samples = PackedSamples(ray_indices[order], t_starts[order], t_ends[order], origins, directions)
        if self.training:
            self._last_kept = samples
            self._last_parts = (samples.t_starts, parts, order)
        return samples

    def losses(self, samples: PackedSamples, weights: Float[Tensor, " n_samples"]) -> Dict[str, Tensor]:
        """Every block's proposal losses (:meth:`ProposalSampler.losses`) from the weights of its own samples,
        summed; none for other samples than the last training :meth:`sample` returned."""
        last, self._last_parts = self._last_parts, None
        if last is None or last[0] is not samples.t_starts:
            return {}
        _, parts, order = last
        by_block = torch.empty_like(weights).scatter(0, order, weights)  # the blocks' samples concatenated
        totals: Dict[str, Tensor] = {}
        for sampler, part, part_weights in zip(
            self.sampler_list(), parts, torch.split(by_block, [part.n_samples for part in parts])
        ):
            for name, loss in sampler.losses(part, part_weights).items():
                totals[name] = totals[name] + loss if name in totals else loss
        return totals

    def figures(self) -> Dict[str, float]:
        """Each block's samples per ray of the last training batch (``samples_per_ray_block_<k>``)."""
        return self.samples_per_block()
