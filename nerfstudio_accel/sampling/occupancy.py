"""OccupancySampler: empty-space skipping with an occupancy grid, on nerfacc CUDA ops, fused kernels or pure PyTorch.

One grid state for every backend: a nerfacc ``OccGridEstimator`` holds the multi-level binary grid
(plain torch, any device) and this sampler its EMA update. The backend, resolved per device
(:mod:`nerfstudio_accel.ops.backends`), is handed to the ops that march rays through the grid
(:func:`~nerfstudio_accel.ops.marching.traverse_occupancy_grid`) and scan the packed visibility
(:func:`~nerfstudio_accel.ops.volume_rendering.render_visibility_from_density`), and to the model that
composites the samples (:meth:`OccupancySampler.backend_for`): ``nerfacc`` (CUDA tensors only), ``kernel``
(the fused marcher, numba on CPU and Triton on CUDA, with the torch scans) or ``torch`` (the reference).

An explicit backend that cannot run on a device is refused before training but falls back to ``auto``'s
pick, with one warning, when a trained model opens there (:meth:`OccupancySampler.backend_for`).
:class:`OccupancySamplerConfig` holds the options a model nests as ``--pipeline.model.occupancy.*``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple, Union

import torch
from jaxtyping import Float, Int
from nerfacc.estimators.occ_grid import OccGridEstimator
from torch import Tensor

from nerfstudio_accel.distributed import evaluate_across_ranks
from nerfstudio_accel.kernels.density_network import DensityNetwork
from nerfstudio_accel.ops.backends import (
    ResolvedSamplerBackend,
    SamplerBackend,
    check_backend_name,
    check_sampler_backend,
    resolve_sampler_backend,
    runnable_sampler_backend,
)
from nerfstudio_accel.ops.marching import march_and_cull_with_density_network, traverse_occupancy_grid
from nerfstudio_accel.sampling.base import (
    DensityFn,
    DensityRecord,
    Sampler,
    SamplerConfig,
    SamplerScene,
    StateOverlay,
    ray_bounds,
)
from nerfstudio_accel.sampling.culling_pass import (
    AlphaThreshold,
    cull_marched,
    evaluate_in_chunks,
)
from nerfstudio_accel.sampling.front_to_back_culling import chosen_first_samples
from nerfstudio_accel.sampling.packed import PackedSamples
from nerfstudio_accel.step_phases import phase

logger = logging.getLogger(__name__)


@dataclass
class MarchingOptions:
    """How rays are marched and culled (units: scene units along unit-length directions)."""

    render_step_size: float
    """Minimum step between samples."""
    cone_angle: float = 0.0
    """Step grows as ``t * cone_angle`` far from the camera; 0 for bounded scenes."""
    near_plane: float = 0.05
    far_plane: float = 1e3
    alpha_threshold: float = 1e-2
    """Skip samples with opacity below this (capped by the grid's mean occupancy, as nerfacc does)."""
    early_stop_eps: float = 1e-4
    """Stop a ray once its transmittance falls below this."""
    max_samples_per_ray: Optional[int] = None
    """Keep at most this many marched samples per ray, front to back (None: no cap)."""
    culling_first_samples: Optional[int] = 0
    """The culling density pass reads each ray's candidates in rounds of this many, as many, then doubling, each
    round only for rays whose transmittance is still at least ``early_stop_eps``
    (:mod:`~nerfstudio_accel.sampling.front_to_back_culling`; the same samples are kept); 0: one pass; None: chosen
    per batch (:func:`~nerfstudio_accel.sampling.front_to_back_culling.chosen_first_samples`)."""

    @property
    def culls(self) -> bool:
        """Whether any culling is asked for."""
        return self.alpha_threshold > 0.0 or self.early_stop_eps > 0.0


def visible_samples(
    ray_indices: Int[Tensor, " n"],
    t_starts: Float[Tensor, " n"],
    t_ends: Float[Tensor, " n"],
    origins: Float[Tensor, "n_rays 3"],
    directions: Float[Tensor, "n_rays 3"],
    density_fn: Optional[DensityFn],
    alpha_threshold: AlphaThreshold,
    marching: MarchingOptions,
    backend: str,
    first_samples: int,
) -> Tuple[PackedSamples, Optional[Dict[str, Union[int, Tensor]]]]:
    """The ray-sorted candidates the culling pass keeps (:func:`~nerfstudio_accel.sampling.culling_pass.cull_marched`,
    its rounds from ``first_samples``) and its counts; every candidate and no counts without ``density_fn``,
    candidates or culling asked for."""
    if density_fn is None or t_starts.numel() == 0 or not marching.culls:
        return PackedSamples(ray_indices, t_starts, t_ends, origins, directions), None
    with phase("culling density pass"):
        keep, counts = cull_marched(
            ray_indices,
            t_starts,
            t_ends,
            origins,
            directions,
            density_fn,
            alpha_threshold,
            marching.early_stop_eps,
            first_samples,
            backend,
        )
    return PackedSamples(ray_indices[keep], t_starts[keep], t_ends[keep], origins, directions), counts


@dataclass
class GridUpdateOptions:
    """When and how the occupancy grid is updated."""

    every_n_steps: int = 16
    """Update the grid every this many training steps."""
    warmup_steps: int = 256
    """Evaluate every cell until this step, then a random quarter of each level plus occupied cells."""
    ema_decay: float = 0.95
    occupancy_threshold: float = 1e-2
    """A cell is occupied when density * step exceeds min(this, mean occupancy)."""
    shared_by_ranks: bool = True
    """Under torch.distributed, each rank evaluates a share of an update's points (data-parallel ranks hold the same
    field); False: this rank evaluates them all (it alone holds this grid's block of a split scene)."""


class OccupancySampler(Sampler):
    """Owns the occupancy grid, its update schedule, and packed sampling through it.

    Args:
        aabb: base region of interest ``(6,)``; level ``i`` covers it enlarged ``2**i`` times.
        resolution: cells per axis in each level.
        levels: 1 for bounded scenes, more for contracted unbounded ones.
        backend: ``auto``, ``nerfacc``, ``kernel`` or ``torch`` (resolved on first use, per device).
        marching: how rays are marched and culled (:attr:`marching`).
        grid_update: the grid's update schedule.
    """

    def __init__(
        self,
        aabb: Float[Tensor, "6"],
        resolution: int = 128,
        levels: int = 1,
        backend: SamplerBackend = "auto",
        marching: Optional[MarchingOptions] = None,
        grid_update: Optional[GridUpdateOptions] = None,
    ):
        super().__init__()
        check_backend_name(backend)
        self.grid = OccGridEstimator(roi_aabb=aabb, resolution=resolution, levels=levels)
        diagonal = float(torch.linalg.norm(aabb[3:] - aabb[:3]))
        self.marching = marching if marching is not None else MarchingOptions(render_step_size=diagonal / 1000)
        self.grid_update = grid_update if grid_update is not None else GridUpdateOptions()
        # Alpha culling waits for the warm-up: a fresh field's densities are nearly uniform and
        # their opacities sit just under the threshold's cap, which would cull every sample.
        self.register_buffer("warmed_up", torch.tensor(False))
        self.requested_backend: SamplerBackend = backend
        self._resolved: Dict[str, ResolvedSamplerBackend] = {}
        self.updates = 0
        """Grid updates made so far in this process (the viewer redraws the grid only when it changes)."""
        self._last_counts: Dict[str, Union[int, Tensor]] = {}
        self._kept_per_ray = 6.0
        """Samples kept per ray by the last fused marching and culling pass (sizes the next one's scratch)."""
        self._culling: Optional[Tuple[bool, float]] = None
        """Host copy of ``(warmed_up, effective alpha threshold)``, read from the device once after each
        grid update, warm-up switch or state load rather than at every sampling."""
        self.register_load_state_dict_post_hook(lambda module, _: setattr(module, "_culling", None))

    def backend_for(self, device: torch.device) -> ResolvedSamplerBackend:
        """The ops' backend for rays on ``device``: marching, culling and the model's compositing
        (:func:`~nerfstudio_accel.ops.backends.runnable_sampler_backend`)."""
        if device.type not in self._resolved:
            self._resolved[device.type] = runnable_sampler_backend(self.requested_backend, device.type)
            logger.info("occupancy sampler backend on %s: %s", device.type, self._resolved[device.type])
        return self._resolved[device.type]

    @torch.no_grad()
    def update(self, step: int, density_fn: DensityFn) -> None:
        """EMA update of the grid every ``grid_update.every_n_steps``: ``occ = max(decay * occ, density(x) * step)``
        at a jittered point ``x`` of each chosen cell (all cells during warm-up, then a random quarter of
        each level plus up to as many occupied cells); a cell is occupied when ``occ`` exceeds
        ``min(occupancy_threshold, mean occ)``. nerfacc's ``OccGridEstimator`` update, made a collective:
        the cells and jitter come from a CPU generator seeded by ``step`` (the same on every rank, whatever
        its GPU), each rank evaluates a share of the points
        (:func:`~nerfstudio_accel.distributed.evaluate_across_ranks`), and every rank applies the same EMA,
        so all ranks march through bit-identical grids."""
        schedule = self.grid_update
        if step >= schedule.warmup_steps and not (self._culling is not None and self._culling[0]):
            self.warmed_up.fill_(True)
            self._culling = None
        if step % schedule.every_n_steps != 0:
            return
        with phase("grid update"):
            generator = torch.Generator().manual_seed(
                step
            )  # on the CPU: a CUDA generator's draws depend on the GPU model
            cell_ids, points = self._update_points(step < schedule.warmup_steps, generator)
            if schedule.shared_by_ranks:
                densities = evaluate_across_ranks(lambda x: evaluate_in_chunks(density_fn, x), points).reshape(-1)
            else:
                densities = evaluate_in_chunks(density_fn, points).reshape(-1)
            occupancy = densities * self.marching.render_step_size
            occs = self.grid.occs
            occs[torch.unique(cell_ids)] *= schedule.ema_decay
            occs.scatter_reduce_(
                0, cell_ids, occupancy.to(occs.dtype), reduce="amax"
            )  # a cell drawn twice keeps its larger value
            threshold = torch.clamp(occs.mean(), max=schedule.occupancy_threshold)
            self.grid.binaries = (occs > threshold).view(self.grid.binaries.shape)
            self._culling = None  # after the grid changed, so no sampling in between reads the old one back
            self.updates += 1

    def _update_points(
        self, all_cells: bool, generator: torch.Generator
    ) -> Tuple[Int[Tensor, " n"], Float[Tensor, "n 3"]]:
        """The cells one update evaluates, as flat ids over all levels ``(n,)``, and a uniformly jittered
        point inside each, in world coordinates ``(n, 3)``."""
        grid = self.grid
        cells = grid.cells_per_lvl
        device = grid.occs.device
        if all_cells:
            cell_ids = torch.arange(grid.levels * cells, device=device)
        else:
            per_level = []
            for level in range(grid.levels):
                uniform = torch.randint(cells, (cells // 4,), generator=generator).to(device)
                occupied = torch.nonzero(grid.binaries[level].reshape(-1))[:, 0]
                if occupied.numel() > cells // 4:
                    occupied = occupied[torch.randint(occupied.numel(), (cells // 4,), generator=generator).to(device)]
                per_level.append(level * cells + torch.cat([uniform, occupied]))
            cell_ids = torch.cat(per_level)
        levels, local_ids = cell_ids // cells, cell_ids % cells
        coords = grid.grid_coords[local_ids].float()
        unit = (coords + torch.rand(coords.shape, generator=generator).to(device)) / grid.resolution
        low, high = grid.aabbs[levels, :3], grid.aabbs[levels, 3:]
        return cell_ids, low + unit * (high - low)

    @torch.no_grad()
    def march(
        self,
        origins: Float[Tensor, "n_rays 3"],
        directions: Float[Tensor, "n_rays 3"],
        nears: Optional[Float[Tensor, " n_rays"]] = None,
        fars: Optional[Float[Tensor, " n_rays"]] = None,
        stratified: bool = False,
    ) -> Tuple[Int[Tensor, " n_samples"], Float[Tensor, " n_samples"], Float[Tensor, " n_samples"]]:
        """Packed candidate samples: every step of the lattice whose midpoint lies in an occupied cell,
        between the near and far planes (per-ray planes tighten the global ones), at most
        ``marching.max_samples_per_ray`` per ray (the nearest).

        ``stratified`` starts each ray's lattice a uniform random fraction of ``render_step_size`` after
        its near plane (as nerfacc's ``sampling(stratified=True)``), so training sees new points every step.

        Returns ``ray_indices (int64), t_starts, t_ends``. Not differentiable.
        """
        return self._traverse(*self._lattice_rays(origins, directions, nears, fars, stratified))

    def _traverse(
        self,
        origins: Float[Tensor, "n_rays 3"],
        directions: Float[Tensor, "n_rays 3"],
        near: Float[Tensor, " n_rays"],
        far: Float[Tensor, " n_rays"],
    ) -> Tuple[Int[Tensor, " n_samples"], Float[Tensor, " n_samples"], Float[Tensor, " n_samples"]]:
        """:meth:`march` of rays as :meth:`_lattice_rays` gives them."""
        return traverse_occupancy_grid(
            origins,
            directions,
            self.grid.binaries,
            self.grid.aabbs,
            near,
            far,
            self.marching.render_step_size,
            self.marching.cone_angle,
            backend=self.backend_for(origins.device),
            max_samples_per_ray=self.marching.max_samples_per_ray,
        )

    def _lattice_rays(
        self,
        origins: Float[Tensor, "n_rays 3"],
        directions: Float[Tensor, "n_rays 3"],
        nears: Optional[Float[Tensor, " n_rays"]],
        fars: Optional[Float[Tensor, " n_rays"]],
        stratified: bool,
    ) -> Tuple[
        Float[Tensor, "n_rays 3"], Float[Tensor, "n_rays 3"], Float[Tensor, " n_rays"], Float[Tensor, " n_rays"]
    ]:
        """The rays as the marchers take them (float32, contiguous) and each one's near and far distance (see
        :meth:`march`)."""
        options = self.marching
        near, far = ray_bounds(origins.shape[0], options.near_plane, options.far_plane, nears, fars, origins.device)
        if stratified:
            near = near + torch.rand_like(near) * options.render_step_size
        return origins.float().contiguous(), directions.float().contiguous(), near, far

    def effective_alpha_threshold(self) -> float:
        """The opacity threshold sampling culls by: 0 before the grid warm-up, then
        ``marching.alpha_threshold`` capped by the grid's mean occupancy (as nerfacc does). Read from the
        device only after the grid changed (:meth:`update`, a state load)."""
        if self._culling is None:
            warm = bool(self.warmed_up)
            self._culling = (warm, min(self.marching.alpha_threshold, float(self.grid.occs.mean())) if warm else 0.0)
        return self._culling[1]

    def occupied_fraction(self) -> float:
        """Fraction of occupied cells over every level of the grid."""
        return float(self.grid.binaries.float().mean())

    overlay_label = "Show occupancy grid"

    def state_version(self) -> int:
        """The grid updates so far: the occupied cells change only there."""
        return self.updates

    @torch.no_grad()
    def state_overlay(self) -> StateOverlay:
        """The centres of the occupied cells of the grid's finest level (level 0, the scene box) and the edge of
        its smallest cell."""
        binaries = self.grid.binaries[0].cpu()  # (R, R, R)
        aabb = self.grid.aabbs[0].cpu().float()
        cell = (aabb[3:] - aabb[:3]) / torch.tensor(binaries.shape, dtype=torch.float32)
        centres = aabb[:3] + (torch.nonzero(binaries).float() + 0.5) * cell
        return StateOverlay(centres, float(cell.min()))

    @torch.no_grad()
    def sample(
        self,
        origins: Float[Tensor, "n_rays 3"],
        directions: Float[Tensor, "n_rays 3"],
        nears: Optional[Float[Tensor, " n_rays"]] = None,
        fars: Optional[Float[Tensor, " n_rays"]] = None,
        density_fn: Optional[DensityFn] = None,
        stratified: bool = False,
    ) -> PackedSamples:
        """:meth:`march` (``stratified`` as there), then, when ``density_fn`` is given, keep the candidates the
        culling pass finds visible (:func:`~nerfstudio_accel.sampling.culling_pass.cull_marched`, with
        :meth:`effective_alpha_threshold`); both in one pass where ``density_fn`` has a density network and the
        backend a fused marcher (:meth:`_march_and_cull`). In training, counts the candidates, the evaluated (those
        ``density_fn`` saw), the kept and the alpha-culled (of the evaluated) samples for :meth:`figures` (no
        device read here)."""
        rays = self._lattice_rays(origins, directions, nears, fars, stratified)
        network = density_fn.density_network() if isinstance(density_fn, DensityRecord) else None
        if network is not None and self.marching.culls:
            with phase("culling density pass"):
                fused = self._march_and_cull(network, *rays)
                if fused is not None:
                    return self._fused_samples(fused, density_fn, origins, directions)  # type: ignore[arg-type]
        with phase("marching"):
            ray_indices, t_starts, t_ends = self._traverse(*rays)
        samples, counts = visible_samples(
            ray_indices,
            t_starts,
            t_ends,
            origins,
            directions,
            density_fn,
            self.effective_alpha_threshold(),
            self.marching,
            self.backend_for(origins.device),
            chosen_first_samples(self.marching.culling_first_samples, self._last_counts, origins.device.type),
        )
        if self.training and counts is not None:
            self._last_counts = counts
        return samples

    def _march_and_cull(
        self,
        network: DensityNetwork,
        origins: Float[Tensor, "n_rays 3"],
        directions: Float[Tensor, "n_rays 3"],
        near: Float[Tensor, " n_rays"],
        far: Float[Tensor, " n_rays"],
    ) -> Optional[Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Dict[str, int]]]:
        """:meth:`_traverse` and the culling pass in one where the backend has it
        (:func:`~nerfstudio_accel.ops.marching.march_and_cull_with_density_network`), its scratch sized from the
        last fused call's kept samples per ray; None elsewhere."""
        fused = march_and_cull_with_density_network(
            network,
            origins,
            directions,
            self.grid.binaries,
            self.grid.aabbs,
            near,
            far,
            self.marching.render_step_size,
            self.marching.cone_angle,
            self.marching.max_samples_per_ray,
            self.effective_alpha_threshold(),
            self.marching.early_stop_eps,
            self.backend_for(origins.device),
            2.0 * self._kept_per_ray + 4.0,
        )
        if fused is not None and origins.shape[0]:
            self._kept_per_ray = fused[0].shape[0] / origins.shape[0]
        return fused

    def _fused_samples(
        self,
        fused: Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Dict[str, int]],
        record: DensityRecord,
        origins: Float[Tensor, "n_rays 3"],
        directions: Float[Tensor, "n_rays 3"],
    ) -> PackedSamples:
        """The fused pass's samples, the record handed their encodings and density heads; in training, its counts
        kept for :meth:`figures` (every candidate marched is evaluated: the walk ends at the early stop)."""
        ray_indices, t_starts, t_ends, encodings, heads, counts = fused
        record.keep_encoded(encodings, heads)
        if self.training:
            self._last_counts = {"candidates": counts["evaluated"], "kept": ray_indices.numel(), **counts}
        return PackedSamples(ray_indices, t_starts, t_ends, origins, directions)

    def figures(self) -> Dict[str, float]:
        """The last training sampling's ``candidates`` (marched), ``evaluated``, ``kept`` (after culling) and
        ``alpha_culled`` sample counts, and the grid's ``occupied_fraction``."""
        return {
            **{name: float(count) for name, count in self._last_counts.items()},
            "occupied_fraction": self.occupied_fraction(),
        }


@dataclass
class OccupancySamplerConfig(SamplerConfig):
    """The occupancy-grid sampler's options (``--pipeline.model.occupancy.*``)."""

    backend: SamplerBackend = "auto"
    """Ray marching: nerfacc CUDA ops (nerfacc), the fused numba marcher on CPU (kernel), the pure-PyTorch
    reference (torch); auto: nerfacc on CUDA when it loads, kernel on CPU, torch elsewhere, written into
    config.yml as the backend chosen (ns-eval elsewhere says in one line when it marches with another)."""
    resolution: Optional[int] = None
    """Grid cells per axis (per level); default 128 on CUDA, 64 elsewhere (cheaper updates)."""
    levels: Optional[int] = None
    """Grid levels (each twice the extent of the last); default 1 bounded, 4 contracted."""
    render_step_size: Optional[float] = None
    """Minimum marching step in world units; default: scene-box diagonal / 1000."""
    cone_angle: Optional[float] = None
    """Steps grow as distance * cone_angle; default 0 bounded, 1/256 contracted."""
    alpha_threshold: float = 1e-2
    """Skip samples whose opacity is below this."""
    early_stop_eps: float = 1e-4
    """Stop marching a ray once its transmittance is below this."""
    max_samples_per_ray: Optional[int] = None
    """A ray keeps at most this many samples in occupied cells, front to back (bounds the cost of a young, foggy
    field); default 1024 bounded, 256 contracted; 0: no cap."""
    culling_first_samples: Optional[int] = None
    """The culling density pass reads each ray's candidates in rounds of N, N, 2N, 4N, ..., each only for the
    rays not yet opaque (the same samples are kept, fewer densities are read); 0: every candidate in one pass;
    None (auto): on the CPU rounds of 32 while the last training batch marched more than 4 candidates per kept
    sample (lego 400x400), one pass otherwise; one pass on other devices, where the rounds are not yet measured
    (docs/occupancy_sampler.md). Where the pass runs fused (the ``kernel`` backends on the CPU:
    :mod:`~nerfstudio_accel.kernels.culling_numba`), each ray stops at its first hidden candidate and rounds do not
    apply."""
    update_every: int = 16
    """Update the grid every this many steps."""
    warmup_steps: int = 256
    """Evaluate every cell on updates until this step, then a random quarter plus occupied cells."""
    ema_decay: float = 0.95
    threshold: float = 1e-2
    """A cell is occupied when density * step exceeds min(this, mean occupancy)."""

    def resolve(self, device_type: str, contract: bool) -> None:
        """The grid's size and the per-ray cap from the device and the scene, the culling rounds (automatic on the
        CPU, where they were measured; one pass elsewhere), and the marching backend for the device (written
        down: another machine's ``auto`` could march another lattice)."""
        if self.resolution is None:
            self.resolution = 128 if device_type == "cuda" else 64
        if self.culling_first_samples is None and device_type != "cpu":
            self.culling_first_samples = 0
        if self.max_samples_per_ray is None:
            self.max_samples_per_ray = 256 if contract else 1024
        if self.backend == "auto":
            self.backend = resolve_sampler_backend(self.backend, device_type)
            logger.info(
                "accel-ngp: sampler backend %s on %s (--pipeline.model.occupancy.backend)", self.backend, device_type
            )
        check_sampler_backend(self.backend, device_type)

    def builds_blocks(self, contract: bool) -> bool:
        """Blocks of object scenes (a contracted scene's grid levels are not cut per cell)."""
        return not contract

    def setup(self, scene: SamplerScene) -> OccupancySampler:
        """The sampler over ``scene``'s box (enlarged per level for a contracted scene); its backend resolved
        for the scene's device (a fallback warned about) as the model opens."""
        return self._sampler(scene.aabb.float(), scene, self._marching(scene))

    def setup_cells(
        self, scene: SamplerScene, cells: Float[Tensor, "k 2 3"], held: Optional[Sequence[int]] = None
    ) -> Dict[int, Sampler]:
        """A grid per cell held (every cell by default), each as fine as the whole box's would be per cell, all with
        the same marching options (the step from the whole box)."""
        marching = self._marching(scene)
        boxes = cells.to(scene.aabb)
        return {k: self._sampler(boxes[k], scene, marching) for k in (range(len(boxes)) if held is None else held)}

    def _marching(self, scene: SamplerScene) -> MarchingOptions:
        assert self.resolution is not None, "resolve() first"
        aabb = scene.aabb.float()
        diagonal = float(torch.linalg.norm(aabb[1] - aabb[0]))
        return MarchingOptions(
            render_step_size=self.render_step_size if self.render_step_size is not None else diagonal / 1000,
            cone_angle=self.cone_angle if self.cone_angle is not None else (1 / 256 if scene.contract else 0.0),
            near_plane=scene.near_plane,
            far_plane=scene.far_plane,
            alpha_threshold=self.alpha_threshold,
            early_stop_eps=self.early_stop_eps,
            max_samples_per_ray=self.max_samples_per_ray or None,
            culling_first_samples=self.culling_first_samples,
        )

    def _sampler(self, box: Float[Tensor, "2 3"], scene: SamplerScene, marching: MarchingOptions) -> OccupancySampler:
        grid_update = GridUpdateOptions(
            every_n_steps=self.update_every,
            warmup_steps=self.warmup_steps,
            ema_decay=self.ema_decay,
            occupancy_threshold=self.threshold,
        )
        sampler = OccupancySampler(
            box.flatten(),
            resolution=self.resolution,
            levels=self.levels if self.levels is not None else (4 if scene.contract else 1),
            backend=self.backend,
            marching=marching,
            grid_update=grid_update,
        )
        sampler.backend_for(scene.device)
        return sampler
