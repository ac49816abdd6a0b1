"""Occupancy-grid marching as a fused CPU kernel, JIT-compiled by numba (no C++ compiler needed).

The torch twin (:func:`nerfstudio_accel.ops._torch_impl.traverse_occupancy_grid`) materialises
every lattice step of every ray as tensors (ray ids, ``t``, points, cell ids) before it filters them.
Here each thread walks its rays step by step in registers and writes only the samples kept, in two
passes (count, then fill at each ray's offset). The per-ray ranges come from the same torch code and
every per-step value uses the same float32 arithmetic: uniform steps are bit-identical to the torch
twin's; geometric (cone-angle) steps may differ by an ulp of ``pow``, which can move a sample whose
midpoint sits exactly on a cell or range boundary (the parity tests compare them).
"""

from __future__ import annotations

import math
from typing import Tuple

import numba
import numpy as np
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from nerfstudio_accel.kernels.lattice import lattice_ranges
from nerfstudio_accel.kernels.threads import PARALLEL_KERNELS, choose_threading_layer

choose_threading_layer()

_HALF = np.float32(0.5)
_ZERO = np.float32(0.0)


@numba.njit(inline="always")
def _uniform_steps(near, step, cone, t_switch):
    """Lattice steps before the geometric part starts (float32; ``n_uniform`` of
    :func:`~nerfstudio_accel.kernels.lattice.lattice_start`)."""
    if cone <= _ZERO or near > t_switch:
        return _ZERO
    return np.float32(math.floor((t_switch - near) / step)) + np.float32(1.0)


@numba.njit(inline="always")
def _step_start(k, near, step, cone, growth, n_uniform):
    """Start and length of lattice step ``k`` (:func:`~nerfstudio_accel.kernels.lattice.lattice_start`)."""
    if cone <= _ZERO:
        return near + k * step, step
    t = (near + min(k, n_uniform) * step) * growth ** max(k - n_uniform, _ZERO)
    return t, max(t * cone, step)


@numba.njit(inline="always")
def _kept_step(ray, k, origins, directions, near, t_min, t_max, binaries, aabbs, scalars):
    """``(t_start, dt, kept)`` of step ``k`` of ``ray``: midpoint in range and in an occupied cell."""
    step, cone, growth, t_switch = scalars[0], scalars[1], scalars[2], scalars[3]
    n_uniform = _uniform_steps(near[ray], step, cone, t_switch)
    t_start, dt = _step_start(k, near[ray], step, cone, growth, n_uniform)
    t_mid = t_start + _HALF * dt
    if not (t_mid >= t_min[ray] and t_mid < t_max[ray]):
        return t_start, dt, False
    x = origins[ray, 0] + directions[ray, 0] * t_mid
    y = origins[ray, 1] + directions[ray, 1] * t_mid
    z = origins[ray, 2] + directions[ray, 2] * t_mid
    for level in range(aabbs.shape[0]):
        lo_x, lo_y, lo_z, hi_x, hi_y, hi_z = (
            aabbs[level, 0],
            aabbs[level, 1],
            aabbs[level, 2],
            aabbs[level, 3],
            aabbs[level, 4],
            aabbs[level, 5],
        )
        if lo_x <= x <= hi_x and lo_y <= y <= hi_y and lo_z <= z <= hi_z:
            rx, ry, rz = binaries.shape[1], binaries.shape[2], binaries.shape[3]
            i = min(max(int((x - lo_x) / (hi_x - lo_x) * np.float32(rx)), 0), rx - 1)
            j = min(max(int((y - lo_y) / (hi_y - lo_y) * np.float32(ry)), 0), ry - 1)
            m = min(max(int((z - lo_z) / (hi_z - lo_z) * np.float32(rz)), 0), rz - 1)
            return t_start, dt, binaries[level, i, j, m]
    return t_start, dt, False


@numba.njit(parallel=True, cache=True)
def _count_kept(origins, directions, near, t_min, t_max, k_first, counts, binaries, aabbs, scalars, kept):
    for ray in numba.prange(origins.shape[0]):
        total = 0
        for local in range(counts[ray]):
            _, _, keep = _kept_step(
                ray, k_first[ray] + np.float32(local), origins, directions, near, t_min, t_max, binaries, aabbs, scalars
            )
            total += keep
        kept[ray] = total


@numba.njit(parallel=True, cache=True)
def _fill_kept(
    origins,
    directions,
    near,
    t_min,
    t_max,
    k_first,
    counts,
    binaries,
    aabbs,
    scalars,
    offsets,
    ray_indices,
    t_starts,
    t_ends,
):
    for ray in numba.prange(origins.shape[0]):
        out = offsets[ray]
        for local in range(counts[ray]):
            t_start, dt, keep = _kept_step(
                ray, k_first[ray] + np.float32(local), origins, directions, near, t_min, t_max, binaries, aabbs, scalars
            )
            if keep:
                ray_indices[out] = ray
                t_starts[out] = t_start
                t_ends[out] = t_start + dt
                out += 1


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
    """The torch twin's contract on CPU tensors: packed ``ray_indices (int64), t_starts, t_ends`` of the
    lattice steps whose midpoints lie in occupied cells, sorted by ray then ``t``."""
    t_min, t_max, k_first, counts = lattice_ranges(
        origins, directions, aabbs, near_planes, far_planes, step_size, cone_angle
    )
    growth_scalar = torch.tensor(1.0 + cone_angle, dtype=torch.float32)  # float32, as torch casts the scalar
    scalars = np.array(
        [step_size, cone_angle, float(growth_scalar), step_size / cone_angle if cone_angle > 0 else 0.0],
        dtype=np.float32,
    )
    arrays = (
        origins.float().contiguous().numpy(), directions.float().contiguous().numpy(), near_planes.float().contiguous().numpy(),
        t_min.contiguous().numpy(), t_max.contiguous().numpy(), k_first.float().contiguous().numpy(),
        counts.contiguous().numpy(), binaries.contiguous().numpy(), aabbs.float().contiguous().numpy(), scalars,
    )  # fmt: skip
    kept = np.zeros(origins.shape[0], dtype=np.int64)
    with PARALLEL_KERNELS:
        _count_kept(*arrays, kept)
    offsets = np.concatenate([[0], np.cumsum(kept)]).astype(np.int64)
    total = int(offsets[-1])
    ray_indices = torch.empty(total, dtype=torch.int64)
    t_starts = torch.empty(total, dtype=torch.float32)
    t_ends = torch.empty(total, dtype=torch.float32)
    if total:
        with PARALLEL_KERNELS:
            _fill_kept(*arrays, offsets[:-1], ray_indices.numpy(), t_starts.numpy(), t_ends.numpy())
    return ray_indices, t_starts, t_ends
