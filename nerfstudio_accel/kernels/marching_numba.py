"""Occupancy-grid marching as a fused CPU kernel, JIT-compiled by numba (no C++ compiler needed).

The torch twin (:func:`nerfstudio_accel.ops._torch_impl.traverse_occupancy_grid`) materialises
every lattice step of every ray as tensors (ray ids, ``t``, points, cell ids) before it filters them.
Here each thread walks its rays in registers and writes only the samples kept, in two passes (count, then fill
at each ray's offset). On a uniform lattice, each cell of the finest level, and each empty aligned cube of its cells
(:func:`empty_cube_pyramid`), is crossed in one go: the steps in it are all kept or all skipped
(:func:`_last_step_in_cell` proves which steps share a cell or cube). The per-ray ranges come from the same torch code and
every per-step value uses the same float32 arithmetic: uniform steps are bit-identical to the torch
twin's; geometric (cone-angle) steps may differ by an ulp of ``pow``, which can move a sample whose
midpoint sits exactly on a cell or range boundary (the parity tests compare them).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple

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
MAX_CUBE_SHIFT = 5
"""``log2`` of the edge, in level-0 cells, of the largest empty cubes a uniform lattice crosses in one go."""


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
def _step_cell(ray, k, origins, directions, near, t_min, t_max, aabbs, resolution, scalars):
    """``(t_start, dt, level, i, j, m)`` of step ``k`` of ``ray``: the first level whose box holds its midpoint
    and the cell there; level -1 when the midpoint is out of range or outside every box."""
    step, cone, growth, t_switch = scalars[0], scalars[1], scalars[2], scalars[3]
    n_uniform = _uniform_steps(near[ray], step, cone, t_switch)
    t_start, dt = _step_start(k, near[ray], step, cone, growth, n_uniform)
    t_mid = t_start + _HALF * dt
    if not (t_mid >= t_min[ray] and t_mid < t_max[ray]):
        return t_start, dt, -1, 0, 0, 0
    x = origins[ray, 0] + directions[ray, 0] * t_mid
    y = origins[ray, 1] + directions[ray, 1] * t_mid
    z = origins[ray, 2] + directions[ray, 2] * t_mid
    rx, ry, rz = resolution[0], resolution[1], resolution[2]
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
            i = min(max(int((x - lo_x) / (hi_x - lo_x) * np.float32(rx)), 0), rx - 1)
            j = min(max(int((y - lo_y) / (hi_y - lo_y) * np.float32(ry)), 0), ry - 1)
            m = min(max(int((z - lo_z) / (hi_z - lo_z) * np.float32(rz)), 0), rz - 1)
            return t_start, dt, level, i, j, m
    return t_start, dt, -1, 0, 0, 0


@numba.njit(inline="always")
def _time_to_face(origin, direction, low, high, index, cells):
    """When a ray along one axis reaches the face of cell ``index`` (of ``cells`` over ``[low, high]``) that it
    moves towards; infinity when it does not move along this axis."""
    if direction == _ZERO:
        return math.inf
    face = index + 1 if direction > _ZERO else index
    return (low + (high - low) * face / cells - origin) / direction


@numba.njit(inline="always")
def _last_step_in_cell(
    ray, local, count, k_first, cell, shift, origins, directions, near, t_min, t_max, aabbs, resolution, scalars
):
    """The last step (local index, at least ``local``) of ``ray`` proven to lie in the level-0 cell
    ``cell = (i, j, m)`` of the grid coarsened ``2**shift`` times per axis that holds step ``local``'s midpoint,
    on a uniform lattice.

    The estimate from where the ray leaves the cell is checked with the marcher's own arithmetic. Every float
    operation from ``k`` to the range test and the cell index is monotonic along a ray, and level 0's box is
    convex, so when two steps are in that cell and in range, every step between them is too. ``local`` itself
    where unproven."""
    i, j, m = cell
    t_exit = min(
        _time_to_face(origins[ray, 0], directions[ray, 0], aabbs[0, 0], aabbs[0, 3], i, resolution[0] >> shift),
        _time_to_face(origins[ray, 1], directions[ray, 1], aabbs[0, 1], aabbs[0, 4], j, resolution[1] >> shift),
        _time_to_face(origins[ray, 2], directions[ray, 2], aabbs[0, 2], aabbs[0, 5], m, resolution[2] >> shift),
    )
    estimate = (t_exit - near[ray]) / scalars[0] - 0.5 - k_first[ray]
    if not estimate > local:  # also NaN; and no float below -2**63 reaches the floor
        return local
    last = math.floor(estimate) if estimate < count - 1.0 else count - 1  # also where it is infinite
    for candidate in (last, last - 1):
        if candidate <= local:
            break
        _, _, level, ci, cj, cm = _step_cell(
            ray,
            k_first[ray] + np.float32(candidate),
            origins,
            directions,
            near,
            t_min,
            t_max,
            aabbs,
            resolution,
            scalars,
        )
        if level == 0 and ci >> shift == i and cj >> shift == j and cm >> shift == m:
            return candidate
    return local


@numba.njit(inline="always")
def _empty_cube_shift(i, j, m, cubes):
    """``log2`` of the edge of the largest aligned cube of level-0 cells that holds cell ``(i, j, m)`` and no
    occupied cell (:func:`empty_cube_pyramid`'s ``cubes``); 0 where there is none (the cell on its own)."""
    occupied, starts, sides = cubes
    for shift in range(sides.shape[0] - 1, 0, -1):
        if not occupied[_cube_index(i, j, m, shift, starts, sides)]:
            return shift
    return 0


@numba.njit(inline="always")
def _cube_index(i, j, m, shift, starts, sides):
    """Where the cube of edge ``2**shift`` cells that holds level-0 cell ``(i, j, m)`` sits in
    :func:`empty_cube_pyramid`'s ``occupied``."""
    return starts[shift] + ((i >> shift) * sides[shift, 1] + (j >> shift)) * sides[shift, 2] + (m >> shift)


@numba.njit(inline="always")
def _run_from(
    ray,
    local,
    origins,
    directions,
    near,
    t_min,
    t_max,
    k_first,
    counts,
    binaries,
    aabbs,
    resolution,
    cubes,
    scalars,
):
    """``(last, kept, t_start, dt)``: steps ``local`` to ``last`` of ``ray`` share step ``local``'s cell, ``kept``
    whether they are kept (midpoints in range and in an occupied cell), and step ``local``'s start and length.
    On a uniform lattice a run crosses the largest empty cube of level 0 around that cell (``cubes``:
    :func:`empty_cube_pyramid`), else the level-0 cell; otherwise it is one step."""
    t_start, dt, level, i, j, m = _step_cell(
        ray, k_first[ray] + np.float32(local), origins, directions, near, t_min, t_max, aabbs, resolution, scalars
    )
    kept = level >= 0 and binaries[level, i, j, m]
    last = local
    if level == 0 and scalars[1] <= _ZERO:
        coarse = _empty_cube_shift(i, j, m, cubes)
        last = _last_step_in_cell(
            ray, local, counts[ray], k_first, (i >> coarse, j >> coarse, m >> coarse), coarse,
            origins, directions, near, t_min, t_max, aabbs, resolution, scalars,
        )  # fmt: skip
    return last, kept, t_start, dt


@numba.njit(parallel=True, cache=True)
def _count_kept(
    origins,
    directions,
    near,
    t_min,
    t_max,
    k_first,
    counts,
    binaries,
    aabbs,
    resolution,
    cubes,
    scalars,
    cap,
    kept,
):
    for ray in numba.prange(origins.shape[0]):
        total = 0
        local = 0
        while local < counts[ray] and total < cap:
            last, keep, _, _ = _run_from(
                ray, local, origins, directions, near, t_min, t_max, k_first, counts, binaries, aabbs, resolution,
                cubes, scalars,
            )  # fmt: skip
            if keep:
                total += last - local + 1
            local = last + 1
        kept[ray] = min(total, cap)


@numba.njit(parallel=True, cache=True)
def _fill_kept(
    origins, directions, near, t_min, t_max, k_first, counts, binaries, aabbs, resolution, cubes, scalars,
    offsets, ray_indices, t_starts, t_ends,
):  # fmt: skip
    step, cone, growth, t_switch = scalars[0], scalars[1], scalars[2], scalars[3]
    for ray in numba.prange(origins.shape[0]):
        out, end = offsets[ray], offsets[ray + 1]
        n_uniform = _uniform_steps(near[ray], step, cone, t_switch)
        local = 0
        while local < counts[ray] and out < end:
            last, keep, t_start, dt = _run_from(
                ray, local, origins, directions, near, t_min, t_max, k_first, counts, binaries, aabbs, resolution,
                cubes, scalars,
            )  # fmt: skip
            if keep:
                for run in range(local, min(last + 1, local + end - out)):
                    if run > local:
                        t_start, dt = _step_start(
                            k_first[ray] + np.float32(run), near[ray], step, cone, growth, n_uniform
                        )
                    ray_indices[out] = ray
                    t_starts[out] = t_start
                    t_ends[out] = t_start + dt
                    out += 1
            local = last + 1


def empty_cube_pyramid(binaries: Bool[Tensor, "n_levels rx ry rz"]) -> Tuple[Any, Any, Any]:
    """Which aligned cubes of ``2**s`` level-0 cells per axis hold an occupied cell, for ``s`` from 1 to the largest
    at most :data:`MAX_CUBE_SHIFT` that divides every side (none where a side is odd): numpy ``occupied`` (bool,
    the cubes of each ``s`` flattened one after another), ``starts (top + 1,)`` of each ``s`` in it and the cube
    grid's ``sides (top + 1, 3)`` (row 0, the cells themselves, holds no cubes)."""
    sides = [list(binaries.shape[1:])]
    while len(sides) <= MAX_CUBE_SHIFT and all(side % 2 == 0 for side in sides[-1]):
        sides.append([side // 2 for side in sides[-1]])
    cubes = [0] + [int(np.prod(side)) for side in sides[1:]]
    starts = np.cumsum([0] + cubes[:-1]).astype(np.int64)
    occupied = np.empty(sum(cubes), dtype=np.bool_)
    finer = binaries[0].contiguous().numpy()
    for shift in range(1, len(sides)):
        coarser = occupied[starts[shift] : starts[shift] + cubes[shift]].reshape(sides[shift])
        _halve(finer, coarser)
        finer = coarser
    return occupied, starts, np.array(sides, dtype=np.int64)


@numba.njit(cache=True)
def _halve(finer, coarser):
    """``coarser[i, j, m]``: whether any of the 8 cells ``finer[2i:2i+2, 2j:2j+2, 2m:2m+2]`` is set."""
    for i in range(coarser.shape[0]):
        for j in range(coarser.shape[1]):
            for m in range(coarser.shape[2]):
                block = finer[2 * i : 2 * i + 2, 2 * j : 2 * j + 2, 2 * m : 2 * m + 2]
                coarser[i, j, m] = (
                    block[0, 0, 0] | block[0, 0, 1] | block[0, 1, 0] | block[0, 1, 1]
                    | block[1, 0, 0] | block[1, 0, 1] | block[1, 1, 0] | block[1, 1, 1]
                )  # fmt: skip


def marching_arrays(
    origins: Float[Tensor, "n_rays 3"],
    directions: Float[Tensor, "n_rays 3"],
    binaries: Bool[Tensor, "n_levels rx ry rz"],
    aabbs: Float[Tensor, "n_levels 6"],
    near_planes: Float[Tensor, " n_rays"],
    far_planes: Float[Tensor, " n_rays"],
    step_size: float,
    cone_angle: float,
) -> Tuple[Any, ...]:
    """The marching kernels' leading arguments (CPU tensors as numpy arrays): rays, their lattice ranges
    (:func:`~nerfstudio_accel.kernels.lattice.lattice_ranges`), the grid, its empty cubes (:func:`empty_cube_pyramid`) and the lattice's
    scalars, in :func:`_run_from`'s order."""
    t_min, t_max, k_first, counts = lattice_ranges(
        origins, directions, aabbs, near_planes, far_planes, step_size, cone_angle
    )
    growth_scalar = torch.tensor(1.0 + cone_angle, dtype=torch.float32)  # float32, as torch casts the scalar
    scalars = np.array(
        [step_size, cone_angle, float(growth_scalar), step_size / cone_angle if cone_angle > 0 else 0.0],
        dtype=np.float32,
    )
    return (
        origins.float().contiguous().numpy(), directions.float().contiguous().numpy(), near_planes.float().contiguous().numpy(),
        t_min.contiguous().numpy(), t_max.contiguous().numpy(), k_first.float().contiguous().numpy(),
        counts.contiguous().numpy(), binaries.contiguous().numpy(), aabbs.float().contiguous().numpy(),
        np.array(binaries.shape[1:], dtype=np.int64), empty_cube_pyramid(binaries.contiguous()), scalars,
    )  # fmt: skip


def traverse_occupancy_grid(
    origins: Float[Tensor, "n_rays 3"],
    directions: Float[Tensor, "n_rays 3"],
    binaries: Bool[Tensor, "n_levels rx ry rz"],
    aabbs: Float[Tensor, "n_levels 6"],
    near_planes: Float[Tensor, " n_rays"],
    far_planes: Float[Tensor, " n_rays"],
    step_size: float,
    cone_angle: float = 0.0,
    max_samples_per_ray: Optional[int] = None,
) -> Tuple[Int[Tensor, " n_samples"], Float[Tensor, " n_samples"], Float[Tensor, " n_samples"]]:
    """The torch twin's contract on CPU tensors: packed ``ray_indices (int64), t_starts, t_ends`` of the
    lattice steps whose midpoints lie in occupied cells, sorted by ray then ``t``, at most
    ``max_samples_per_ray`` per ray (the nearest; None: all)."""
    arrays = marching_arrays(origins, directions, binaries, aabbs, near_planes, far_planes, step_size, cone_angle)
    cap = np.iinfo(np.int64).max if max_samples_per_ray is None else max(max_samples_per_ray, 0)
    kept = np.zeros(origins.shape[0], dtype=np.int64)
    with PARALLEL_KERNELS:
        _count_kept(*arrays, cap, kept)
    offsets = np.concatenate([[0], np.cumsum(kept)]).astype(np.int64)
    total = int(offsets[-1])
    ray_indices = torch.empty(total, dtype=torch.int64)
    t_starts = torch.empty(total, dtype=torch.float32)
    t_ends = torch.empty(total, dtype=torch.float32)
    if total:
        with PARALLEL_KERNELS:
            _fill_kept(*arrays, offsets, ray_indices.numpy(), t_starts.numpy(), t_ends.numpy())
    return ray_indices, t_starts, t_ends
