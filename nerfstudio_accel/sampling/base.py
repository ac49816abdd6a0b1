"""Sampler: the interface every ray sampler implements, in the shape of nerfacc's estimators, and
:class:`SamplerConfig`, the interface of its options.

A model holds one sampler and never asks which: its config resolves and builds it
(:meth:`SamplerConfig.resolve`, :meth:`SamplerConfig.setup`); the model calls :meth:`Sampler.sample` for packed
samples, :meth:`Sampler.update` once per training step, adds :meth:`Sampler.losses` to its own; the viewer shows
:meth:`Sampler.figures` and the sampler's own overlay (:attr:`Sampler.overlay_label`, :meth:`Sampler.state_overlay`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Tuple

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from nerfstudio_accel.kernels.density_network import DensityNetwork
from nerfstudio_accel.ops.backends import ResolvedSamplerBackend
from nerfstudio_accel.sampling.packed import PackedSamples

DensityFn = Callable[[Float[Tensor, "n 3"]], Float[Tensor, "n 1"]]
"""World-space points to the main field's activated densities."""


@dataclass
class StateOverlay:
    """What a sampler shows of its own state in the viewer's 3D scene: ``points (n, 3)``, world units, on the
    CPU, each standing for a cell ``cell_size`` across."""

    points: Float[Tensor, "n 3"]
    cell_size: float


class DensityRecord(ABC):
    """A density function (:data:`DensityFn`) that keeps something of each point it is called on (e.g. the
    field's encodings, :class:`~nerfstudio_accel.fields.density_pass_record.DensityPassRecord`), so its owner can
    reuse it for the samples a sampler returns. A sampler that evaluates each candidate at most once names the
    least density a kept sample can have before its first call (:meth:`drop_below`: rows under it need not be
    held) and, after it, which of the points it saw became its samples (:meth:`keep`)."""

    @abstractmethod
    def __call__(self, points: Float[Tensor, "n 3"]) -> Float[Tensor, "n 1"]:
        """Activated densities of world-space ``points``."""

    @abstractmethod
    def drop_below(self, density: Float[Tensor, ""]) -> None:
        """From the first call on, rows whose density is under ``density`` belong to culled samples."""

    @abstractmethod
    def keep(self, rows: Int[Tensor, " n_samples"]) -> None:
        """The returned samples, in order, are the points at these rows of all calls' points in call order."""

    def density_network(self) -> Optional[DensityNetwork]:
        """This record's density in the form a fused culling kernel computes it, before the record's first call
        (the sampler may then cull without calling it, handing it the kept samples by :meth:`keep_encoded`);
        None: only through calls."""
        return None

    def keep_encoded(self, encodings: Float[Tensor, "n_samples enc"], heads: Float[Tensor, "n_samples heads"]) -> None:
        """Instead of calls and :meth:`keep`: a fused culling pass over :meth:`density_network` kept samples (in
        order) whose encodings and density heads (the network's head rows) it computed."""
        raise NotImplementedError(f"{type(self).__name__} has no density network")


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
        candidate (every kept sample's point among them) tells a :class:`DensityRecord` which rows became its
        samples, so the caller can reuse what it computed there. ``stratified`` jitters the samples
        (training); without it the result is deterministic. The returned samples hold ``origins`` and
        ``directions`` as given.
        """

    @abstractmethod
    def update(self, step: int, density_fn: DensityFn) -> None:
        """Advance the sampler's state before training step ``step`` (grid updates, annealing)."""

    loss_names: Tuple[str, ...] = ()
    """The names of the losses :meth:`losses` may return (a model adds those it finds to its loss dict)."""

    def losses(self, samples: PackedSamples, weights: Float[Tensor, " n_samples"]) -> Dict[str, Tensor]:
        """The losses the sampler trains by, weighted by its options, from the main field's compositing
        ``weights`` of ``samples``, the full set its last training :meth:`sample` returned (what it computed on
        the way stays with the sampler); none by default."""
        return {}

    def figures(self) -> Dict[str, float]:
        """Figures of the last training sampling for the viewer (reading them waits for the device)."""
        return {}

    def cell_boxes(self) -> Optional[Float[Tensor, "k 2 3"]]:
        """The cells of a spatially split scene, ``(min corner, max corner)`` boxes on the CPU, which the viewer
        outlines; None for a sampler over one box."""
        return None

    overlay_label = "Show samples (centre ray)"
    """The viewer's toggle for this sampler's overlay: its state (:meth:`state_overlay`) where it has one, else
    its samples on the centre ray of the page's view."""

    def state_version(self) -> Optional[int]:
        """A number that changes whenever :meth:`state_overlay` would (the viewer sends it again only then);
        None: the sampler has no state to show."""
        return None

    def state_overlay(self) -> StateOverlay:
        """Its own state as points for the viewer; only for a sampler whose :meth:`state_version` is not None."""
        raise NotImplementedError(f"{type(self).__name__} has no state overlay")

    def backend_for(self, device: torch.device) -> ResolvedSamplerBackend:
        """The ops' backend for this sampler's samples on ``device``, which the model composites them with
        (:func:`~nerfstudio_accel.rendering.render_packed`); ``torch`` unless the sampler resolved another."""
        return "torch"


@dataclass(frozen=True)
class SamplerScene:
    """What a sampler is built for: the scene box ``aabb (2, 3)``, whether space beyond it is contracted, every
    ray's near and far planes, the device it opens on, and the kernels of the fields a sampler may own
    (resolved names, as the model's field uses)."""

    aabb: Float[Tensor, "2 3"]
    contract: bool
    near_plane: float
    far_plane: float
    device: torch.device
    implementation: str
    hash_backend: str


class SamplerConfig(ABC):
    """A sampler's own options, nested in a model config (``--pipeline.model.<sampler>.*``)."""

    @abstractmethod
    def resolve(self, device_type: str, contract: bool) -> None:
        """Fill, in place, the options whose default depends on the device (``cuda``, ``cpu``, ``mps``) or on
        whether the scene is contracted, and refuse explicit choices that cannot run there (raises
        :class:`~nerfstudio_accel.errors.AccelError`); they are written into config.yml. Idempotent."""

    @abstractmethod
    def setup(self, scene: SamplerScene) -> "Sampler":
        """The sampler these options describe, for ``scene``."""

    def builds_blocks(self, contract: bool) -> bool:
        """Whether :meth:`setup_cells` is built for a scene that is (or is not) contracted."""
        return False

    def setup_cells(
        self, scene: SamplerScene, cells: Float[Tensor, "k 2 3"], held: Optional[Sequence[int]] = None
    ) -> Dict[int, "Sampler"]:
        """The samplers of a spatially split ``scene`` (``cells``: ``(k, 2, 3)`` boxes tiling it) by cell index, for
        the cells ``held`` (None: every cell), which a block sampler of :mod:`nerfstudio_accel.spatial` merges."""
        raise NotImplementedError(f"{type(self).__name__} builds no samplers per cell")
