"""The step lattice of occupancy-grid marching, in closed form: pure torch math every marcher shares.

Marching follows nerfacc's ``traverse_grids``: a step lattice starts at the near plane and advances by
``dt = max(t * cone_angle, step_size)``. The torch twin
(:func:`nerfstudio_accel.ops._torch_impl.traverse_occupancy_grid`) and the fused marchers
(:mod:`~nerfstudio_accel.kernels.marching_numba`, :mod:`~nerfstudio_accel.kernels.marching_triton`) all take each
ray's range and first step from :func:`lattice_ranges`, so they walk the same steps.
"""

from __future__ import annotations

import math
from typing import Tuple

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor


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


def lattice_start(
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
    t, dt = lattice_start(k, near, step_size, cone_angle)
    k = torch.where(t + 0.5 * dt < t_min, k + 1, k)
    t_prev, dt_prev = lattice_start(torch.clamp(k - 1, min=0.0), near, step_size, cone_angle)
    return torch.where((k > 0) & (t_prev + 0.5 * dt_prev >= t_min), k - 1, k)


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
