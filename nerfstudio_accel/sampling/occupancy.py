"""OccupancySampler: empty-space skipping with an occupancy grid, on nerfacc CUDA ops or pure PyTorch.

One grid state for both backends: a nerfacc ``OccGridEstimator`` holds the multi-level binary
grid and its EMA update (plain torch, any device). The backend only decides how rays are
marched through it and how the packed visibility scan runs:

- ``nerfacc``: nerfacc's compiled ``traverse_grids`` and packed scans (CUDA tensors only);
- ``kernel``: the fused numba marcher (:mod:`nerfstudio_accel.sampling.marching_numba`, CPU tensors)
  with the torch scans;
- ``torch``: :mod:`nerfstudio_accel.sampling.torch_ops`, the reference (CPU, MPS, CUDA without a compiler);
- ``auto``: ``nerfacc`` on CUDA when its ops load (else ``torch`` with one warning), ``kernel`` on CPU
  where numba imports, ``torch`` elsewhere.

A backend chosen explicitly that cannot run on a device is refused before training
(:func:`check_sampler_backend`) but falls back to ``auto``'s pick, with one warning, when a trained model
opens there (:meth:`OccupancySampler.backend_for`).
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from typing import Callable, Literal, Optional, Tuple

import torch
from jaxtyping import Bool, Float, Int
from nerfacc.estimators.occ_grid import OccGridEstimator
from torch import Tensor, nn

from nerfstudio_accel.distributed import evaluate_across_ranks
from nerfstudio_accel.sampling import torch_ops

logger = logging.getLogger(__name__)

SamplerBackend = Literal["auto", "nerfacc", "kernel", "torch"]
ResolvedSamplerBackend = Literal["nerfacc", "kernel", "torch"]
DensityFn = Callable[[Float[Tensor, "n 3"]], Float[Tensor, "n 1"]]

DENSITY_CHUNK = 1 << 16
"""Points per no-grad density evaluation (grid updates and culling), bounding peak memory."""

_NERFACC_OPS_STATUS: Optional[str] = None  # None: not probed yet; "" ok; otherwise why not


def nerfacc_ops_unavailable_reason() -> str:
    """Empty string when nerfacc's compiled CUDA ops load here, else one line saying why not.

    Probed once per process (the first call may JIT-compile nerfacc's extension: minutes).
    """
    global _NERFACC_OPS_STATUS
    if _NERFACC_OPS_STATUS is None:
        if not torch.cuda.is_available():
            _NERFACC_OPS_STATUS = "no CUDA device"
        else:
            try:
                from nerfacc.cuda._backend import _C  # loading builds or loads the extension

                if _C is None:
                    raise RuntimeError("nerfacc's CUDA extension did not build")
                _NERFACC_OPS_STATUS = ""
            except Exception as error:  # a failed compile raises many kinds of errors
                _NERFACC_OPS_STATUS = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    return _NERFACC_OPS_STATUS


def evaluate_in_chunks(fn: Callable[[Float[Tensor, "n 3"]], Tensor], points: Float[Tensor, "n 3"], chunk: int = DENSITY_CHUNK) -> Tensor:
    """``fn`` (e.g. a density function, ``(n, 3) -> (n, k)``) over ``points`` in slices of ``chunk``
    (no-grad callers: memory stays bounded)."""
    if points.shape[0] <= chunk:
        return fn(points)
    return torch.cat([fn(points[i : i + chunk]) for i in range(0, points.shape[0], chunk)])


def check_backend_name(name: str) -> None:
    """Raise ``ValueError`` naming the valid choices for an unknown backend."""
    if name not in ("auto", "nerfacc", "kernel", "torch"):
        raise ValueError(f"unknown sampler backend {name!r}; choose one of auto, nerfacc, kernel, torch")


def sampler_backend_unavailable_reason(backend: SamplerBackend, device_type: str) -> str:
    """Why ``backend`` cannot march rays on ``device_type`` here; empty when it can (``auto`` always can)."""
    check_backend_name(backend)
    if backend == "kernel":
        if device_type != "cpu":
            return f"it marches CPU tensors only (these are on {device_type})"
        return "" if importlib.util.find_spec("numba") is not None else "numba is not installed (pip install numba)"
    if backend == "nerfacc":
        return nerfacc_ops_unavailable_reason() if device_type == "cuda" else f"tensors are on {device_type}"
    return ""


def check_sampler_backend(backend: SamplerBackend, device_type: str) -> None:
    """Raise ``ValueError`` (one line with the fix) when ``backend`` cannot run on ``device_type`` here:
    training refuses to start rather than save a config that names one backend and train with another."""
    reason = sampler_backend_unavailable_reason(backend, device_type)
    if reason:
        raise ValueError(f"sampler backend '{backend}' cannot run here ({reason}); use --pipeline.model.sampler-backend torch")


def resolve_backend(requested: SamplerBackend, device: torch.device) -> ResolvedSamplerBackend:
    """The marching backend for ``device``; ``auto``: nerfacc on CUDA when its ops load, kernel on CPU when
    numba imports, torch otherwise. Raises like :func:`check_sampler_backend`."""
    check_sampler_backend(requested, device.type)
    if requested != "auto":
        return requested  # type: ignore[return-value]
    preferred: ResolvedSamplerBackend = "nerfacc" if device.type == "cuda" else "kernel"
    reason = sampler_backend_unavailable_reason(preferred, device.type)
    if not reason:
        return preferred
    if device.type == "cuda":
        logger.warning("nerfacc CUDA ops unavailable (%s); using the pure-PyTorch sampler", reason)
    return "torch"


def runnable_backend(requested: SamplerBackend, device: torch.device) -> ResolvedSamplerBackend:
    """``requested`` when it runs on ``device``, else what ``auto`` picks there, with a warning: every backend
    marches the same grid, so a model trained with one opens with another (ns-eval, ns-viewer elsewhere)."""
    reason = sampler_backend_unavailable_reason(requested, device.type)
    if not reason:
        return resolve_backend(requested, device)
    fallback = resolve_backend("auto", device)
    logger.warning("sampler backend %s cannot run on %s here (%s); marching with %s instead", requested, device.type, reason, fallback)
    return fallback


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

    @property
    def culls(self) -> bool:
        """Whether any culling is asked for."""
        return self.alpha_threshold > 0.0 or self.early_stop_eps > 0.0


class OccupancySampler(nn.Module):
    """Owns the occupancy grid, its update schedule, and packed sampling through it.

    Args:
        aabb: base region of interest ``(6,)``; level ``i`` covers it enlarged ``2**i`` times.
        resolution: cells per axis in each level.
        levels: 1 for bounded scenes, more for contracted unbounded ones.
        backend: ``auto``, ``nerfacc``, ``kernel`` or ``torch`` (resolved on first use, per device).
    """

    def __init__(self, aabb: Float[Tensor, "6"], resolution: int = 128, levels: int = 1, backend: SamplerBackend = "auto"):
        super().__init__()
        check_backend_name(backend)
        self.grid = OccGridEstimator(roi_aabb=aabb, resolution=resolution, levels=levels)
        # Alpha culling waits for the warm-up: a fresh field's densities are nearly uniform and
        # their opacities sit just under the threshold's cap, which would cull every sample.
        self.register_buffer("warmed_up", torch.tensor(False))
        self.requested_backend: SamplerBackend = backend
        self._resolved: dict[str, ResolvedSamplerBackend] = {}
        self.updates = 0
        """Grid updates made so far in this process (the viewer redraws the grid only when it changes)."""

    def backend_for(self, device: torch.device) -> ResolvedSamplerBackend:
        """The marching backend used for rays on ``device`` (:func:`runnable_backend`)."""
        if device.type not in self._resolved:
            self._resolved[device.type] = runnable_backend(self.requested_backend, device)
            logger.info("occupancy sampler backend on %s: %s", device.type, self._resolved[device.type])
        return self._resolved[device.type]

    @torch.no_grad()
    def update(
        self,
        step: int,
        density_fn: DensityFn,
        render_step_size: float,
        occupancy_threshold: float = 1e-2,
        ema_decay: float = 0.95,
        warmup_steps: int = 256,
        every_n_steps: int = 16,
    ) -> None:
        """EMA update of the grid every ``every_n_steps``: ``occ = max(decay * occ, density(x) * step)`` at a
        jittered point ``x`` of each chosen cell (all cells during warm-up, then a random quarter of each
        level plus up to as many occupied cells); a cell is occupied when ``occ`` exceeds
        ``min(occupancy_threshold, mean occ)``. nerfacc's ``OccGridEstimator`` update, made a collective:
        the cells and jitter come from a CPU generator seeded by ``step`` (the same on every rank, whatever
        its GPU), each rank
        evaluates a share of the points (:func:`~nerfstudio_accel.distributed.evaluate_across_ranks`), and
        every rank applies the same EMA, so all ranks march through bit-identical grids."""
        if step >= warmup_steps:
            self.warmed_up.fill_(True)
        if step % every_n_steps != 0:
            return
        generator = torch.Generator().manual_seed(step)  # on the CPU: a CUDA generator's draws depend on the GPU model
        cell_ids, points = self._update_points(step < warmup_steps, generator)
        occupancy = evaluate_across_ranks(lambda x: evaluate_in_chunks(density_fn, x), points).reshape(-1) * render_step_size
        occs = self.grid.occs
        occs[torch.unique(cell_ids)] *= ema_decay
        occs.scatter_reduce_(0, cell_ids, occupancy.to(occs.dtype), reduce="amax")  # a cell drawn twice keeps its larger value
        threshold = torch.clamp(occs.mean(), max=occupancy_threshold)
        self.grid.binaries = (occs > threshold).view(self.grid.binaries.shape)
        self.updates += 1

    def _update_points(self, all_cells: bool, generator: torch.Generator) -> Tuple[Int[Tensor, "n"], Float[Tensor, "n 3"]]:
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
        options: MarchingOptions,
        near_planes: Optional[Float[Tensor, "n_rays"]] = None,
        far_planes: Optional[Float[Tensor, "n_rays"]] = None,
        stratified: bool = False,
    ) -> Tuple[Int[Tensor, "n_samples"], Float[Tensor, "n_samples"], Float[Tensor, "n_samples"]]:
        """Packed candidate samples: every step of the lattice whose midpoint lies in an occupied cell,
        between the near and far planes (per-ray planes tighten the global ones), at most
        ``options.max_samples_per_ray`` per ray (the nearest).

        ``stratified`` starts each ray's lattice a uniform random fraction of ``render_step_size`` after
        its near plane (as nerfacc's ``sampling(stratified=True)``), so training sees new points every step.

        Returns ``ray_indices (int64), t_starts, t_ends``. Not differentiable.
        """
        n_rays = origins.shape[0]
        near = torch.full((n_rays,), options.near_plane, device=origins.device)
        far = torch.full((n_rays,), options.far_plane, device=origins.device)
        if near_planes is not None:
            near = torch.maximum(near, near_planes.reshape(-1))
        if far_planes is not None:
            far = torch.minimum(far, far_planes.reshape(-1))
        if stratified:
            near = near + torch.rand_like(near) * options.render_step_size
        origins, directions = origins.float().contiguous(), directions.float().contiguous()
        ray_indices, t_starts, t_ends = self._traverse(origins, directions, near, far, options)
        if options.max_samples_per_ray is not None and t_starts.numel() > 0:
            keep = torch_ops.first_samples_of_each_ray(ray_indices, options.max_samples_per_ray)
            ray_indices, t_starts, t_ends = ray_indices[keep], t_starts[keep], t_ends[keep]
        return ray_indices, t_starts, t_ends

    def _traverse(self, origins, directions, near, far, options: MarchingOptions):
        """The backend's grid traversal: ``ray_indices (int64), t_starts, t_ends``."""
        if self.backend_for(origins.device) == "nerfacc":
            from nerfacc.grid import traverse_grids

            intervals, samples = traverse_grids(
                origins, directions, self.grid.binaries, self.grid.aabbs,
                near_planes=near, far_planes=far,
                step_size=options.render_step_size, cone_angle=options.cone_angle,
            )
            return samples.ray_indices.long(), intervals.vals[intervals.is_left], intervals.vals[intervals.is_right]
        traverse = torch_ops.traverse_occupancy_grid
        if self.backend_for(origins.device) == "kernel":
            from nerfstudio_accel.sampling import marching_numba

            traverse = marching_numba.traverse_occupancy_grid
        return traverse(
            origins, directions, self.grid.binaries, self.grid.aabbs, near, far,
            options.render_step_size, options.cone_angle,
        )

    def effective_alpha_threshold(self, options: MarchingOptions) -> float:
        """The opacity threshold :meth:`visible` applies: 0 before the grid warm-up, then
        ``options.alpha_threshold`` capped by the grid's mean occupancy (as nerfacc does)."""
        return min(options.alpha_threshold, float(self.grid.occs.mean())) if bool(self.warmed_up) else 0.0

    def occupied_fraction(self) -> float:
        """Fraction of occupied cells over every level of the grid."""
        return float(self.grid.binaries.float().mean())

    @torch.no_grad()
    def visible(
        self,
        ray_indices: Int[Tensor, "n_samples"],
        t_starts: Float[Tensor, "n_samples"],
        t_ends: Float[Tensor, "n_samples"],
        densities: Float[Tensor, "n_samples"],
        n_rays: int,
        options: MarchingOptions,
    ) -> Bool[Tensor, "n_samples"]:
        """Boolean mask of the samples kept: opacity above the alpha threshold (once the grid is warmed
        up; capped by the grid's mean occupancy as nerfacc does) and transmittance above ``early_stop_eps``."""
        alpha_threshold = self.effective_alpha_threshold(options)
        if self.backend_for(densities.device) == "nerfacc":
            from nerfacc.volrend import render_visibility_from_density

            return render_visibility_from_density(
                t_starts, t_ends, densities, ray_indices=ray_indices, n_rays=n_rays,
                early_stop_eps=options.early_stop_eps, alpha_thre=alpha_threshold,
            )
        return torch_ops.render_visibility_from_density(
            t_starts, t_ends, densities, ray_indices, n_rays,
            early_stop_eps=options.early_stop_eps, alpha_threshold=alpha_threshold,
        )

    @torch.no_grad()
    def sample(
        self,
        origins: Float[Tensor, "n_rays 3"],
        directions: Float[Tensor, "n_rays 3"],
        options: MarchingOptions,
        density_fn: Optional[DensityFn] = None,
        near_planes: Optional[Float[Tensor, "n_rays"]] = None,
        far_planes: Optional[Float[Tensor, "n_rays"]] = None,
        stratified: bool = False,
    ) -> Tuple[Int[Tensor, "n_samples"], Float[Tensor, "n_samples"], Float[Tensor, "n_samples"]]:
        """:meth:`march` (``stratified`` as there), then, when ``density_fn`` (points ``(n, 3)`` to densities
        ``(n, 1)``) is given, keep the :meth:`visible` samples. Returns ``ray_indices (int64), t_starts, t_ends``."""
        ray_indices, t_starts, t_ends = self.march(origins, directions, options, near_planes, far_planes, stratified)
        if density_fn is None or t_starts.numel() == 0 or not options.culls:
            return ray_indices, t_starts, t_ends
        origins, directions = origins.float(), directions.float()
        t_mid = 0.5 * (t_starts + t_ends)
        points = origins[ray_indices] + directions[ray_indices] * t_mid[:, None]
        densities = evaluate_in_chunks(density_fn, points).reshape(-1).float()
        keep = self.visible(ray_indices, t_starts, t_ends, densities, origins.shape[0], options)
        return ray_indices[keep], t_starts[keep], t_ends[keep]
