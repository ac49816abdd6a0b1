"""Pure-PyTorch twins of the nerfacc ops that accel methods use.

These run on any device torch supports (CPU, MPS, CUDA) and need no compiler. They are the
reference implementation: the nerfacc CUDA path is tested against them.

Samples are *packed*: a flat list of ``n_samples`` intervals sorted by ray, described by
``ray_indices: (n_samples,)`` and ``t_starts, t_ends: (n_samples,)`` (distances along the ray).

Marching follows nerfacc's ``traverse_grids``: a step lattice starts at the near plane and
advances by ``dt = max(t * cone_angle, step_size)``; the interval ``[t_k, t_k + dt_k]`` is a
sample when its midpoint lies inside the outermost grid, inside ``[near, far)``, and in an
occupied cell of the finest grid level that contains it.
"""

from __future__ import annotations

import math
from typing import Tuple

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

# Bound on marching candidates held in memory at once (each costs ~60 bytes).
MAX_CANDIDATES_PER_CHUNK = 1 << 22


def ray_aabb_intersect(
    origins: Float[Tensor, "n_rays 3"],
    directions: Float[Tensor, "n_rays 3"],
    aabb: Float[Tensor, "6"],
) -> Tuple[Float[Tensor, " n_rays"], Float[Tensor, " n_rays"], Bool[Tensor, " n_rays"]]:
    """Slab test of rays against one box ``(xmin, ymin, zmin, xmax, ymax, zmax)``.

    Returns ``t_enter, t_exit, hit``; ``t_enter`` may be negative when the origin is inside.
    """
    inv_dir = 1.0 / torch.where(directions.abs() < 1e-10, torch.full_like(directions, 1e-10), directions)
    t_lo = (aabb[:3] - origins) * inv_dir
    t_hi = (aabb[3:] - origins) * inv_dir
    t_enter = torch.minimum(t_lo, t_hi).amax(dim=-1)
    t_exit = torch.maximum(t_lo, t_hi).amin(dim=-1)
    return t_enter, t_exit, t_exit > torch.clamp(t_enter, min=0.0)


def _lattice_start(
    k: Float[Tensor, " n"], near: Float[Tensor, " n"], step_size: float, cone_angle: float
) -> Tuple[Float[Tensor, " n"], Float[Tensor, " n"]]:
    """Start ``t_k`` and length ``dt_k`` of lattice step ``k`` (closed form of the marching loop).

    The loop ``t += max(t * cone_angle, step_size)`` takes uniform steps until ``t`` exceeds
    ``step_size / cone_angle``, then grows geometrically by ``(1 + cone_angle)`` per step.
    """
    if cone_angle <= 0.0:
        return near + k * step_size, torch.full_like(near, step_size)
    t_switch = step_size / cone_angle
    n_uniform = torch.where(near > t_switch, torch.zeros_like(near), torch.floor((t_switch - near) / step_size) + 1)
    t_uniform = near + torch.minimum(k, n_uniform) * step_size
    t = t_uniform * torch.pow(1.0 + cone_angle, torch.clamp(k - n_uniform, min=0.0))
    return t, torch.clamp(t * cone_angle, min=step_size)


def _first_step_with_midpoint_after(
    t_min: Float[Tensor, " n"], near: Float[Tensor, " n"], step_size: float, cone_angle: float
) -> Float[Tensor, " n"]:
    """Smallest lattice index whose interval midpoint is ``>= t_min`` (``t_min >= near``)."""
    k = torch.ceil((t_min - near) / step_size - 0.5)
    if cone_angle > 0.0:
        t_switch = step_size / cone_angle
        n_uniform = torch.where(near > t_switch, torch.zeros_like(near), torch.floor((t_switch - near) / step_size) + 1)
        t_at_switch = near + n_uniform * step_size
        # geometric part: midpoint t_K (1 + c)^(k - K) (1 + c / 2) >= t_min
        ratio = torch.clamp(t_min / (t_at_switch * (1.0 + 0.5 * cone_angle)), min=1e-30)
        k_geometric = n_uniform + torch.ceil(torch.log(ratio) / math.log1p(cone_angle))
        k = torch.where(k < n_uniform, k, torch.maximum(k_geometric, n_uniform))
    k = torch.clamp(k, min=0.0)
    # The closed forms can be one step off at float boundaries: settle on the exact index.
    t, dt = _lattice_start(k, near, step_size, cone_angle)
    k = torch.where(t + 0.5 * dt < t_min, k + 1, k)
    t_prev, dt_prev = _lattice_start(torch.clamp(k - 1, min=0.0), near, step_size, cone_angle)
    return torch.where((k > 0) & (t_prev + 0.5 * dt_prev >= t_min), k - 1, k)


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


def lattice_ranges(
    origins: Float[Tensor, "n_rays 3"],
    directions: Float[Tensor, "n_rays 3"],
    aabbs: Float[Tensor, "n_levels 6"],
    near_planes: Float[Tensor, " n_rays"],
    far_planes: Float[Tensor, " n_rays"],
    step_size: float,
    cone_angle: float = 0.0,
) -> Tuple[Float[Tensor, " n_rays"], Float[Tensor, " n_rays"], Float[Tensor, " n_rays"], Int[Tensor, " n_rays"]]:
    """Per ray, the marching range inside the outermost grid and its lattice steps:
    ``t_min, t_max``, the first step index ``k_first`` (float) and the number of candidate steps."""
    t_enter, t_exit, _ = ray_aabb_intersect(origins, directions, aabbs[-1])
    t_min = torch.maximum(near_planes, t_enter)
    t_max = torch.minimum(far_planes, t_exit)
    k_first = _first_step_with_midpoint_after(t_min, near_planes, step_size, cone_angle)
    k_end = _first_step_with_midpoint_after(torch.maximum(t_max, t_min), near_planes, step_size, cone_angle)
    counts = torch.where(t_max > t_min, k_end - k_first, torch.zeros_like(k_first)).long()
    return t_min, t_max, k_first, counts


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
        t_start, dt = _lattice_start(k, near_planes[ray_ids], step_size, cone_angle)
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


def exclusive_cumsum(values: Float[Tensor, "*batch k"]) -> Float[Tensor, "*batch k"]:
    """Sum of the values before each one along the last dim (``[1, 2, 3] -> [0, 1, 3]``), by shifting then
    summing: never ``inclusive - own``, which gives ``inf - inf = nan`` after an infinite value."""
    return torch.cumsum(torch.cat([torch.zeros_like(values[..., :1]), values[..., :-1]], dim=-1), dim=-1)


def supports_float64(device: torch.device) -> bool:
    """Whether ``device`` computes in float64 (MPS does not)."""
    return device.type != "mps"


OPTICAL_DEPTH_CAP = 1e4
"""Largest per-sample ``sigma * dt`` the transmittance scan adds up (NaN counts as it): ``exp(-1e4)`` is already
0 in float32, so the cap changes no transmittance, and an overflowed density cannot spoil other rays' sums."""


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
    if not supports_float64(values.device):
        return packed_exclusive_sum_in_rows(values, ray_indices)
    running = exclusive_cumsum(values.double())
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
    return exclusive_cumsum(rows)[ray_indices, position]


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
    depth = torch.nan_to_num(sigmas_dt, nan=OPTICAL_DEPTH_CAP, posinf=OPTICAL_DEPTH_CAP).clamp(max=OPTICAL_DEPTH_CAP)
    transmittance = torch.exp(-packed_exclusive_sum(depth, ray_indices))  # a NaN hides its own ray's rest only
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


def first_samples_of_each_ray(ray_indices: Int[Tensor, " n_samples"], cap: int) -> Bool[Tensor, " n_samples"]:
    """Mask of the first ``cap`` samples of each ray in a packed, ray-sorted batch."""
    start_of_ray = torch.searchsorted(ray_indices, ray_indices, right=False)
    return torch.arange(ray_indices.numel(), device=ray_indices.device) - start_of_ray < cap
