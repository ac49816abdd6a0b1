"""Pure-PyTorch twins of the ops (:mod:`nerfstudio_accel.ops`): the reference every backend is tested against.

These run on any device torch supports (CPU, MPS, CUDA) and need no compiler; an op whose backend has no
implementation of its own runs its twin here. Callers go through the ops, never through this module.

Samples are *packed*: a flat list of ``n_samples`` intervals sorted by ray, described by
``ray_indices: (n_samples,)`` and ``t_starts, t_ends: (n_samples,)`` (distances along the ray).

Marching walks the step lattice of :mod:`nerfstudio_accel.kernels.lattice`; the interval ``[t_k, t_k + dt_k]``
is a sample when its midpoint lies inside the outermost grid, inside ``[near, far)``, and in an occupied cell
of the finest grid level that contains it.
"""

from __future__ import annotations

from typing import Tuple

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from nerfstudio_accel.kernels.lattice import lattice_ranges, lattice_start
from nerfstudio_accel.ops import precision

# Bound on marching candidates held in memory at once (each costs ~60 bytes).
MAX_CANDIDATES_PER_CHUNK = 1 << 22


def grid_cell_of_points(
    points: Float[Tensor, "n 3"], aabbs: Float[Tensor, "n_levels 6"], resolution: Int[Tensor, "3"]
) -> Tuple[Int[Tensor, " n"], Bool[Tensor, " n"]]:
    """Flat cell index ``level * R^3 + (ix * Ry + iy) * Rz + iz`` of each point in a multi-level grid.

    A point is looked up in the finest level whose box contains it (nerfacc's convention,
    levels being boxes of 1x, 2x, 4x ... the base extent around the same centre).
    Returns ``cell_ids`` and ``inside`` (False for points outside the coarsest level).
    """
    lower, upper = aabbs[:, :3], aabbs[:, 3:]
    inside_level = ((points[:, None, :] >= lower) & (points[:, None, :] <= upper)).all(dim=-1)  # (n, L)
    inside = inside_level.any(dim=-1)
    level = torch.argmax(inside_level.to(torch.uint8), dim=-1)  # first (finest) level containing the point
    res = resolution.to(points.device)
    unit = (points - lower[level]) / (upper[level] - lower[level])
    ijk = torch.minimum(torch.clamp((unit * res).long(), min=0), res - 1)
    cells_per_level = int(res.prod())
    cell_ids = level * cells_per_level + (ijk[:, 0] * res[1] + ijk[:, 1]) * res[2] + ijk[:, 2]
    return cell_ids, inside


def traverse_occupancy_grid(
    origins: Float[Tensor, "n_rays 3"],
    directions: Float[Tensor, "n_rays 3"],
    binaries: Bool[Tensor, "n_levels rx ry rz"],
    aabbs: Float[Tensor, "n_levels 6"],
    near_planes: Float[Tensor, " n_rays"],
    far_planes: Float[Tensor, " n_rays"],
    step_size: float,
    cone_angle: float = 0.0,
) -> Tuple[Int[Tensor, " n_samples"], Float[Tensor, " n_samples"], Float[Tensor, " n_samples"]]:
    """March rays through an occupancy grid; keep steps whose midpoint is in an occupied cell.

    Args:
        origins, directions: rays in world units; directions need not be unit length
            (``t`` is then measured in multiples of the direction).
        binaries: occupancy of each level (level ``i`` covers ``aabbs[i]``).
        near_planes, far_planes: per-ray marching range.
        step_size: minimum step ``dt`` (world units for unit directions).
        cone_angle: ``dt = max(t * cone_angle, step_size)``; 0 gives uniform steps.

    Returns:
        Packed samples ``ray_indices (int64), t_starts, t_ends``, sorted by ray then by ``t``.
    """
    device = origins.device
    t_min, t_max, k_first, counts = lattice_ranges(
        origins, directions, aabbs, near_planes, far_planes, step_size, cone_angle
    )

    flat_binaries = binaries.reshape(-1)
    resolution = torch.tensor(binaries.shape[1:], device=device)
    out_rays, out_starts, out_ends = [], [], []
    for ray_lo, ray_hi in _ray_chunks(counts, MAX_CANDIDATES_PER_CHUNK):
        chunk_counts = counts[ray_lo:ray_hi]
        total = int(chunk_counts.sum())
        if total == 0:
            continue
        ray_ids = torch.repeat_interleave(torch.arange(ray_lo, ray_hi, device=device), chunk_counts)
        offsets = torch.cumsum(chunk_counts, 0) - chunk_counts
        local = torch.arange(total, device=device) - torch.repeat_interleave(offsets, chunk_counts)
        k = k_first[ray_ids] + local.to(k_first.dtype)
        t_start, dt = lattice_start(k, near_planes[ray_ids], step_size, cone_angle)
        t_mid = t_start + 0.5 * dt
        points = origins[ray_ids] + directions[ray_ids] * t_mid[:, None]
        cell_ids, inside = grid_cell_of_points(points, aabbs, resolution)
        keep = inside & flat_binaries[cell_ids] & (t_mid >= t_min[ray_ids]) & (t_mid < t_max[ray_ids])
        out_rays.append(ray_ids[keep])
        out_starts.append(t_start[keep])
        out_ends.append((t_start + dt)[keep])
    if not out_rays:
        empty = torch.zeros(0, device=device)
        return torch.zeros(0, dtype=torch.long, device=device), empty, empty.clone()
    return torch.cat(out_rays), torch.cat(out_starts), torch.cat(out_ends)


def _ray_chunks(counts: Int[Tensor, " n_rays"], max_total: int) -> list[Tuple[int, int]]:
    """Consecutive ray ranges ``[lo, hi)`` whose summed counts stay within ``max_total`` (at least one ray each)."""
    cumulative = torch.cumsum(counts, 0).tolist()
    chunks, lo, base = [], 0, 0
    for i, total in enumerate(cumulative):
        if total - base > max_total and i > lo:
            chunks.append((lo, i))
            lo, base = i, cumulative[i - 1]
    if lo < len(cumulative):
        chunks.append((lo, len(cumulative)))
    return chunks


def packed_exclusive_sum(
    values: Float[Tensor, " n_samples"], ray_indices: Int[Tensor, " n_samples"]
) -> Float[Tensor, " n_samples"]:
    """Per-ray exclusive prefix sum of packed, ray-sorted, finite values (differentiable), with no host sync.

    A float64 running sum over the whole batch minus its value at each ray's first sample (found by
    ``searchsorted``: no buffer sized by the longest ray, whose length only the host could read). Devices
    without float64 (MPS) take :func:`packed_exclusive_sum_in_rows`.
    Example: values ``[1, 2, 3, 4]``, rays ``[0, 0, 1, 1]`` -> ``[0, 1, 0, 3]``.
    """
    if values.numel() == 0:
        return values.clone()
    if not precision.supports_float64(values.device):
        return packed_exclusive_sum_in_rows(values, ray_indices)
    running = precision.exclusive_cumsum(values.double())
    first_of_ray = torch.searchsorted(ray_indices, ray_indices)
    return (running - running[first_of_ray]).to(values.dtype)


def packed_exclusive_sum_in_rows(
    values: Float[Tensor, " n_samples"], ray_indices: Int[Tensor, " n_samples"]
) -> Float[Tensor, " n_samples"]:
    """:func:`packed_exclusive_sum` in the values' own precision: each ray's samples are scattered into a row
    of an ``(n_rays, longest ray)`` buffer and summed within it (one host read: the longest ray)."""
    n_rays = int(ray_indices[-1]) + 1
    counts = torch.bincount(ray_indices, minlength=n_rays)
    position = torch.arange(values.shape[0], device=values.device) - (torch.cumsum(counts, 0) - counts)[ray_indices]
    rows = values.new_zeros(n_rays, int(counts.max())).index_put((ray_indices, position), values)
    return precision.exclusive_cumsum(rows)[ray_indices, position]


def render_transmittance_from_density(
    t_starts: Float[Tensor, " n_samples"],
    t_ends: Float[Tensor, " n_samples"],
    sigmas: Float[Tensor, " n_samples"],
    ray_indices: Int[Tensor, " n_samples"],
    n_rays: int,
) -> Tuple[Float[Tensor, " n_samples"], Float[Tensor, " n_samples"]]:
    """Transmittance before each sample ``T_i = exp(-sum_{j<i} sigma_j dt_j)`` and opacity ``alpha_i``.
    ``n_rays`` is in nerfacc's signature, kept by the three ``render_*`` twins; the scan needs no per-ray buffer."""
    sigmas_dt = sigmas * (t_ends - t_starts)
    transmittance = torch.exp(
        -packed_exclusive_sum(precision.capped_optical_depth(sigmas_dt), ray_indices)
    )  # a NaN hides its own ray's rest only
    alphas = 1.0 - torch.exp(-sigmas_dt)
    return transmittance, alphas


def render_weight_from_density(
    t_starts: Float[Tensor, " n_samples"],
    t_ends: Float[Tensor, " n_samples"],
    sigmas: Float[Tensor, " n_samples"],
    ray_indices: Int[Tensor, " n_samples"],
    n_rays: int,
) -> Float[Tensor, " n_samples"]:
    """Volume-rendering weights ``w_i = T_i * alpha_i`` of packed samples."""
    transmittance, alphas = render_transmittance_from_density(t_starts, t_ends, sigmas, ray_indices, n_rays)
    return transmittance * alphas


def render_visibility_from_density(
    t_starts: Float[Tensor, " n_samples"],
    t_ends: Float[Tensor, " n_samples"],
    sigmas: Float[Tensor, " n_samples"],
    ray_indices: Int[Tensor, " n_samples"],
    n_rays: int,
    early_stop_eps: float = 1e-4,
    alpha_threshold: float = 0.0,
) -> Bool[Tensor, " n_samples"]:
    """Samples worth shading: transmittance ``>= early_stop_eps`` and opacity ``>= alpha_threshold``."""
    transmittance, alphas = render_transmittance_from_density(t_starts, t_ends, sigmas, ray_indices, n_rays)
    visible = transmittance >= early_stop_eps
    if alpha_threshold > 0.0:
        visible = visible & (alphas >= alpha_threshold)
    return visible


def composite_along_rays(
    t_starts: Float[Tensor, " n_samples"],
    t_ends: Float[Tensor, " n_samples"],
    sigmas: Float[Tensor, " n_samples"],
    colors: Float[Tensor, "n_samples 3"],
    ray_indices: Int[Tensor, " n_samples"],
    n_rays: int,
) -> Tuple[
    Float[Tensor, " n_samples"], Float[Tensor, "n_rays 1"], Float[Tensor, "n_rays 3"], Float[Tensor, "n_rays 1"]
]:
    """Weights (:func:`render_weight_from_density`) and their :func:`ray_sums`."""
    weights = render_weight_from_density(t_starts, t_ends, sigmas, ray_indices, n_rays)
    return (weights, *ray_sums(weights, colors, t_starts, t_ends, ray_indices, n_rays))


def ray_sums(
    weights: Float[Tensor, " n_samples"],
    colors: Float[Tensor, "n_samples 3"],
    t_starts: Float[Tensor, " n_samples"],
    t_ends: Float[Tensor, " n_samples"],
    ray_indices: Int[Tensor, " n_samples"],
    n_rays: int,
) -> Tuple[Float[Tensor, "n_rays 1"], Float[Tensor, "n_rays 3"], Float[Tensor, "n_rays 1"]]:
    """Per ray ``sum w`` (opacity), ``sum w c`` and ``sum w t_mid`` (the depth before dividing by opacity)."""
    t_mids = 0.5 * (t_starts + t_ends)
    return (
        accumulate_along_rays(weights, None, ray_indices, n_rays),
        accumulate_along_rays(weights, colors, ray_indices, n_rays),
        accumulate_along_rays(weights, t_mids[:, None], ray_indices, n_rays),
    )


def accumulate_along_rays(
    weights: Float[Tensor, " n_samples"],
    values: Float[Tensor, "n_samples channels"] | None,
    ray_indices: Int[Tensor, " n_samples"],
    n_rays: int,
) -> Float[Tensor, "n_rays channels"]:
    """``sum_i w_i v_i`` per ray (``values=None`` accumulates the weights: opacity)."""
    src = weights[:, None] if values is None else weights[:, None] * values
    out = src.new_zeros(n_rays, src.shape[-1])
    return out.index_add(0, ray_indices, src)
