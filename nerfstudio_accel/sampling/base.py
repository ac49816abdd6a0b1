"""Sampler: the interface every ray sampler implements, in the shape of nerfacc's estimators.

A model holds one sampler and never asks which: it calls :meth:`Sampler.sample` for packed samples,
:meth:`Sampler.update` once per training step, adds :meth:`Sampler.losses` to its own and shows
:meth:`Sampler.figures` in the viewer.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, Dict, Optional, Tuple

import torch
from jaxtyping import Float
from torch import Tensor, nn

from nerfstudio_accel.sampling.packed import PackedSamples

DensityFn = Callable[[Float[Tensor, "n 3"]], Float[Tensor, "n 1"]]
"""World-space points to the main field's activated densities."""


def ray_bounds(
    n_rays: int,
    near_plane: float,
    far_plane: float,
    nears: Optional[Float[Tensor, " n_rays"]],
    fars: Optional[Float[Tensor, " n_rays"]],
    device: torch.device,
) -> Tuple[Float[Tensor, " n_rays"], Float[Tensor, " n_rays"]]:
    """Each ray's near and far distance: the global planes, tightened by the per-ray ones when given."""
    near = torch.full((n_rays,), near_plane, device=device)
    far = torch.full((n_rays,), far_plane, device=device)
    if nears is not None:
        near = torch.maximum(near, nears.reshape(-1))
    if fars is not None:
        far = torch.minimum(far, fars.reshape(-1))
    return near, far


class Sampler(nn.Module, ABC):
    """Places samples along rays for a radiance field."""

    @abstractmethod
    def sample(
        self,
        origins: Float[Tensor, "n_rays 3"],
        directions: Float[Tensor, "n_rays 3"],
        nears: Optional[Float[Tensor, " n_rays"]],
        fars: Optional[Float[Tensor, " n_rays"]],
        density_fn: DensityFn,
        stratified: bool,
    ) -> PackedSamples:
        """Packed samples of the rays (unit ``directions``), between per-ray ``nears``/``fars`` when given.

        ``density_fn`` may be called on candidate points (no graph); a sampler that calls it at most once per
        candidate (every kept sample's point among them) sets ``PackedSamples.density_index`` to their rows in
        call order, so a caller can reuse what it computed there. ``stratified`` jitters the samples
        (training); without it the result is deterministic. The returned samples hold ``origins`` and
        ``directions`` as given.
        """

    @abstractmethod
    def update(self, step: int, density_fn: DensityFn) -> None:
        """Advance the sampler's state before training step ``step`` (grid updates, annealing)."""

    def losses(self, samples: PackedSamples, weights: Float[Tensor, " n_samples"]) -> Dict[str, Tensor]:
        """Unweighted losses the sampler trains by, from the main field's compositing ``weights`` of
        ``samples`` (training only); none by default."""
        return {}

    def figures(self) -> Dict[str, float]:
        """Figures of the last training sampling for the viewer (reading them waits for the device)."""
        return {}

    def composites_with_nerfacc(self, device: torch.device) -> bool:
        """Whether samples on ``device`` are composited with nerfacc's CUDA scan (else the torch twin)."""
        return False
