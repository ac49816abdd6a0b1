"""CellSamplers: what every sampler of a spatially split scene shares, one sampler per cell behind one
:class:`~nerfstudio_accel.sampling.base.Sampler`.

The samplers are held by their cell's index (every cell's in one process, one cell's on a rank that trains one
block), so their state-dict names (``samplers.<k>.``) say which block they belong to. How the cells' samples are
drawn and merged along a ray is each subclass's own (:class:`~.block_sampler.BlockSampler` for occupancy grids,
:class:`~.block_proposal_sampler.BlockProposalSampler` for proposal fields).
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Union

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from nerfstudio_accel.ops.backends import ResolvedSamplerBackend
from nerfstudio_accel.sampling.base import DensityFn, Sampler
from nerfstudio_accel.sampling.packed import PackedSamples
from nerfstudio_accel.spatial.block_ranks import held_blocks
from nerfstudio_accel.spatial.cells import cell_of

SAMPLES_PER_RAY_OF_BLOCK = "samples_per_ray_block_"
"""The prefix of the per-block samples per ray in :meth:`CellSamplers.figures`; the block's index follows."""


def front_to_back(ray_indices: Int[Tensor, " n"], t_starts: Float[Tensor, " n"]) -> Int[Tensor, " n"]:
    """The order ``(n,)`` that sorts the cells' samples, concatenated, by ray and then by distance."""
    order = torch.argsort(t_starts, stable=True)
    return order[torch.argsort(ray_indices[order], stable=True)]


class CellSamplers(Sampler):
    """``samplers[k]`` samples the part of each ray inside ``cells[k]`` (``(k, 2, 3)`` boxes); ``samplers`` holds
    every cell's sampler (a sequence, or by cell index), or one cell's by its index (:attr:`own_block`).
    ``shown_box`` ``(2, 3)``: the box the viewer outlines the cells within (a capture's outer cells reach far
    beyond its scene box); None: the cells whole."""

    def __init__(
        self,
        samplers: Union[Sequence[Sampler], Mapping[int, Sampler]],
        cells: Float[Tensor, "k 2 3"],
        shown_box: Optional[Float[Tensor, "2 3"]] = None,
    ):
        super().__init__()
        samplers = held_blocks(samplers, cells.shape[0], "sampler")
        self.held = sorted(samplers)
        self.samplers = nn.ModuleDict({str(k): samplers[k] for k in self.held})
        self.cells = cells.detach().float().cpu()
        self.shown_cells = self.cells
        if shown_box is not None:
            box = shown_box.detach().float().cpu()
            self.shown_cells = torch.minimum(torch.maximum(self.cells, box[0]), box[1])
        self._last_kept: Optional[PackedSamples] = None
        """The last training sampling's samples (for :meth:`figures`)."""

    @property
    def own_block(self) -> Optional[int]:
        """The one cell whose sampler this process holds (one block per rank); None when it holds every cell's."""
        return self.held[0] if len(self.held) < self.cells.shape[0] else None

    def sampler_list(self) -> List[Sampler]:
        """The samplers held, in the order of their cells."""
        return list(self.samplers.values())  # type: ignore[arg-type]

    def update(self, step: int, density_fn: DensityFn) -> None:
        """Every block's own update."""
        for sampler in self.sampler_list():
            sampler.update(step, density_fn)

    def samples_per_block(self) -> Dict[str, float]:
        """Each block's kept samples per ray of the last training batch (``samples_per_ray_block_<k>``)."""
        kept = self._last_kept
        if kept is None or kept.n_rays == 0:
            return {}
        per_block = torch.bincount(cell_of(kept.positions.detach(), self.cells), minlength=self.cells.shape[0])
        return {f"{SAMPLES_PER_RAY_OF_BLOCK}{k}": count / kept.n_rays for k, count in enumerate(per_block.tolist())}

    def cell_boxes(self) -> Float[Tensor, "k 2 3"]:
        return self.shown_cells

    def backend_for(self, device: torch.device) -> ResolvedSamplerBackend:
        return self.sampler_list()[0].backend_for(device)
