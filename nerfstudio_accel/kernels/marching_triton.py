"""Occupancy-grid marching for CUDA, written in Triton (ships with CUDA builds of torch; no nvcc, no nerfacc build).

The Triton twin of :mod:`nerfstudio_accel.kernels.marching_numba`, with the same two passes: a count pass
walks each ray's lattice steps and counts the kept ones, ``torch.cumsum`` turns the counts into offsets on
the device, and a fill pass walks the steps again and writes the kept ones at the ray's offset. One lane
handles one ray; a program handles a block of rays and loops over the block's longest lattice (a bound it
computes itself from the loaded counts). The level boxes are read once per program; the number of levels,
the pass and whether the cone angle is positive are compile-time constants. The per-ray ranges come from the
shared :func:`~nerfstudio_accel.kernels.lattice.lattice_ranges` (on the device, no host sync); the
only device-to-host read is the total number of samples, which sizes the outputs.

Every per-step value uses the torch twin's float32 arithmetic, in the same order: the kernels are launched
without fused multiply-adds and divide with IEEE rounding (``div_rn``, always of two blocks of one shape: some
releases' ``div_rn`` neither broadcasts nor promotes; Triton's ``/`` is approximate on CUDA). A Triton that
lacks either (:func:`missing_triton_features`) is not used. The geometric (cone-angle) part keeps the power
of ``1 + cone_angle`` in float64 (one float64 product per step) and rounds it to float32: its error, about
steps * 2^-53, is far below a float32 ulp, and the tests find it bit for bit equal to the numba twin's ``powf``,
while torch's vectorised ``pow`` can be an ulp or two off. As for the numba twin, such a step can differ from the
torch twin's by an ulp and move a sample whose midpoint sits exactly on a cell or range boundary.

:func:`traverse_occupancy_grid` takes CUDA tensors (CPU ones under ``TRITON_INTERPRET=1``, set before
this module is imported).
"""

from __future__ import annotations

import re
from typing import Tuple

import torch
import triton
import triton.language as tl
from jaxtyping import Bool, Float, Int
from torch import Tensor

from nerfstudio_accel.kernels.lattice import lattice_ranges

BLOCK_RAYS = 128
"""Rays per program (one lane each); the program's loop runs to the longest lattice among them."""

LAUNCH_OPTIONS = {"enable_fp_fusion": False}
"""No fused multiply-adds: ``near + k * step`` and ``origin + direction * t`` round twice, as in torch."""


@triton.jit
def _march_kernel(
    origins_ptr, directions_ptr, near_ptr, t_min_ptr, t_max_ptr, k_first_ptr, counts_ptr,
    binaries_ptr, aabbs_ptr, res_x, res_y, res_z, num_rays,
    step_size, cone_angle, growth, t_switch,
    kept_ptr, offsets_ptr, ray_indices_ptr, t_starts_ptr, t_ends_ptr,
    NUM_LEVELS: tl.constexpr, FILL: tl.constexpr, GEOMETRIC: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Count pass (``FILL=False``: the number of kept steps of each ray into ``kept``) or fill pass
    (``FILL=True``: the kept steps of each ray from its exclusive offset ``offsets[ray]``). A step is kept
    when its midpoint lies in ``[t_min, t_max)`` and in an occupied cell of the finest level containing it.

    The step is written out in the loop rather than in ``@triton.jit`` helpers: the interpreter re-patches
    ``triton.language`` on every helper call (``tl.zeros`` included), which would double the interpreted
    parity tests' time."""
    ray = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = ray < num_rays
    ox = tl.load(origins_ptr + ray * 3 + 0, mask=mask, other=0.0)
    oy = tl.load(origins_ptr + ray * 3 + 1, mask=mask, other=0.0)
    oz = tl.load(origins_ptr + ray * 3 + 2, mask=mask, other=0.0)
    dx = tl.load(directions_ptr + ray * 3 + 0, mask=mask, other=0.0)
    dy = tl.load(directions_ptr + ray * 3 + 1, mask=mask, other=0.0)
    dz = tl.load(directions_ptr + ray * 3 + 2, mask=mask, other=0.0)
    near = tl.load(near_ptr + ray, mask=mask, other=0.0)
    t_min = tl.load(t_min_ptr + ray, mask=mask, other=0.0)
    t_max = tl.load(t_max_ptr + ray, mask=mask, other=0.0)
    k_first = tl.load(k_first_ptr + ray, mask=mask, other=0.0)
    count = tl.load(counts_ptr + ray, mask=mask, other=0)
    dt = tl.zeros((BLOCK,), dtype=tl.float32) + step_size
    last_x, last_y, last_z = res_x - 1, res_y - 1, res_z - 1
    boxes = ()  # every level's (lo_x, lo_y, lo_z, hi_x, hi_y, hi_z), loaded once
    for c in tl.static_range(6 * NUM_LEVELS):
        boxes = boxes + (tl.load(aabbs_ptr + c),)
    if NUM_LEVELS == 1:  # one box for every step; its sizes as blocks, which every release's div_rn divides by
        lo_x, lo_y, lo_z, hi_x, hi_y, hi_z = boxes[0], boxes[1], boxes[2], boxes[3], boxes[4], boxes[5]
        size_x = tl.zeros((BLOCK,), dtype=tl.float32) + (hi_x - lo_x)
        size_y = tl.zeros((BLOCK,), dtype=tl.float32) + (hi_y - lo_y)
        size_z = tl.zeros((BLOCK,), dtype=tl.float32) + (hi_z - lo_z)
    else:
        no_level = tl.zeros((BLOCK,), dtype=tl.int64)
        outside = tl.zeros((BLOCK,), dtype=tl.int1)
    if GEOMETRIC:
        # uniform steps until t exceeds step / cone (lattice.lattice_start's n_uniform), then growth by (1 + cone):
        # step k starts at t_uniform * growth^max(k - n_uniform, 0). The power is kept in float64 and rounded
        # to float32 per step: exp2(log2(growth) e) at the first step, then one product by growth per step
        # (a relative error of about steps * 2^-53, far below a float32 ulp)
        n_uniform = tl.floor(tl.math.div_rn(t_switch - near, dt)) + 1.0
        n_uniform = tl.where(near > t_switch, 0.0, n_uniform)
        growth64 = tl.zeros((BLOCK,), dtype=tl.float64) + growth  # the float32 growth, exactly
        power64 = tl.exp2(tl.log2(growth64) * tl.maximum(k_first - n_uniform, 0.0).to(tl.float64))
    if FILL:
        out = tl.load(offsets_ptr + ray, mask=mask, other=0)
    else:
        total = tl.zeros((BLOCK,), dtype=tl.int64)
    longest = tl.max(count, axis=0)  # the block's longest lattice
    local = 0
    while local < longest:  # not a for: Triton 3.6's interpreter cannot take a reduction as a range bound
        k = k_first + tl.cast(local, tl.float32)
        # kernels.lattice.lattice_start
        if GEOMETRIC:
            t_start = (near + tl.minimum(k, n_uniform) * step_size) * power64.to(tl.float32)
            dt = tl.maximum(t_start * cone_angle, step_size)
            power64 = tl.where(k >= n_uniform, power64 * growth64, power64)  # the exponent of step k + 1
        else:
            t_start = near + k * step_size
        t_mid = t_start + 0.5 * dt
        active = (local < count) & (t_mid >= t_min) & (t_mid < t_max)
        x = ox + dx * t_mid
        y = oy + dy * t_mid
        z = oz + dz * t_mid
        # the torch twin's grid_cell_of_points: the finest level containing the midpoint, then its cell
        # level * R^3 + (i * Ry + j) * Rz + k = ((level * Rx + i) * Ry + j) * Rz + k in int64
        if NUM_LEVELS == 1:
            active = active & (x >= lo_x) & (y >= lo_y) & (z >= lo_z) & (x <= hi_x) & (y <= hi_y) & (z <= hi_z)
            level = 0
        else:
            # levels from the coarsest down: the last one containing the midpoint wins
            level = no_level
            inside = outside
            for fine in tl.static_range(NUM_LEVELS - 1, -1, -1):  # unrolled; indices into boxes stay constants
                in_level = (x >= boxes[6 * fine]) & (y >= boxes[6 * fine + 1]) & (z >= boxes[6 * fine + 2])
                in_level = in_level & (x <= boxes[6 * fine + 3]) & (y <= boxes[6 * fine + 4])
                in_level = in_level & (z <= boxes[6 * fine + 5])
                level = tl.where(in_level, fine, level)
                inside = inside | in_level
            active = active & inside
            box = aabbs_ptr + level * 6  # level 0 where outside the grid: a valid address
            lo_x, lo_y, lo_z = tl.load(box), tl.load(box + 1), tl.load(box + 2)
            size_x, size_y, size_z = tl.load(box + 3) - lo_x, tl.load(box + 4) - lo_y, tl.load(box + 5) - lo_z
        # inside the box (x - lo) / (hi - lo) >= 0: only the upper clamp matters (x == hi)
        i = tl.minimum((tl.math.div_rn(x - lo_x, size_x) * res_x).to(tl.int64), last_x)
        j = tl.minimum((tl.math.div_rn(y - lo_y, size_y) * res_y).to(tl.int64), last_y)
        m = tl.minimum((tl.math.div_rn(z - lo_z, size_z) * res_z).to(tl.int64), last_z)
        cell = ((level * res_x + i) * res_y + j) * res_z + m
        kept = tl.load(binaries_ptr + cell, mask=active, other=0) != 0
        if FILL:
            tl.store(ray_indices_ptr + out, ray, mask=kept)
            tl.store(t_starts_ptr + out, t_start, mask=kept)
            tl.store(t_ends_ptr + out, t_start + dt, mask=kept)
            out += kept.to(tl.int64)
        else:
            total += kept.to(tl.int64)
        local += 1
    if not FILL:
        tl.store(kept_ptr + ray, total, mask=mask)


def missing_triton_features() -> str:
    """Empty when this Triton can follow the torch twin's rounding, else one line naming what it lacks: launches
    without fused multiply-adds (``enable_fp_fusion``, Triton 2.2 and later) or IEEE division (``tl.math.div_rn``)."""
    version = triton.__version__
    if tuple(int(part) for part in re.findall(r"\d+", version)[:2]) < (2, 2):
        return f"triton {version} cannot launch without fused multiply-adds (enable_fp_fusion: Triton 2.2 or later)"
    if "div_rn" not in dir(tl.math):
        return f"triton {version} has no IEEE division (tl.math.div_rn)"
    return ""


def _float32(value: float) -> float:
    """``value`` rounded to float32, as torch rounds a Python scalar combined with a float32 tensor."""
    return float(torch.tensor(value, dtype=torch.float32))


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
    """The torch twin's contract on CUDA tensors: packed ``ray_indices (int64), t_starts, t_ends`` (float32)
    of the lattice steps whose midpoints lie in occupied cells, sorted by ray then ``t``.

    Rays, near and far planes are read as float32; ``binaries`` as bytes, flat index
    ``level * R^3 + (i * Ry + j) * Rz + k``. Everything stays on the device except one read per call: the
    total number of kept samples, which sizes the outputs (a device-to-host sync; none without rays).
    """
    device = origins.device
    num_rays = origins.shape[0]
    empty = (
        torch.zeros(0, dtype=torch.int64, device=device),
        torch.zeros(0, dtype=torch.float32, device=device),
        torch.zeros(0, dtype=torch.float32, device=device),
    )
    if num_rays == 0:
        return empty
    origins = origins.float().contiguous()
    directions = directions.float().contiguous()
    near_planes = near_planes.float().contiguous()
    aabbs = aabbs.float().contiguous()
    t_min, t_max, k_first, counts = lattice_ranges(
        origins, directions, aabbs, near_planes, far_planes.float(), step_size, cone_angle
    )
    occupied = binaries if binaries.dtype == torch.bool else binaries != 0
    occupied = occupied.contiguous().view(torch.uint8)
    num_levels, res_x, res_y, res_z = occupied.shape
    geometric = cone_angle > 0.0
    arguments = (
        origins, directions, near_planes, t_min.float().contiguous(), t_max.float().contiguous(),
        k_first.float().contiguous(), counts.long().contiguous(), occupied, aabbs, res_x, res_y, res_z, num_rays,
        _float32(step_size), _float32(cone_angle), _float32(1.0 + cone_angle),  # growth: float32, as torch casts it
        _float32(step_size / cone_angle) if geometric else 0.0,
    )  # fmt: skip
    launch = {"NUM_LEVELS": num_levels, "GEOMETRIC": geometric, "BLOCK": BLOCK_RAYS, **LAUNCH_OPTIONS}
    grid = (triton.cdiv(num_rays, BLOCK_RAYS),)
    kept = torch.empty(num_rays, dtype=torch.int64, device=device)
    # count pass: the output pointers are placeholders (FILL=False never touches them)
    _march_kernel[grid](*arguments, kept, kept, kept, t_min, t_max, FILL=False, **launch)
    ends = torch.cumsum(kept, 0)
    total = int(ends[-1])  # the one device-to-host read
    if total == 0:
        return empty
    ray_indices = torch.empty(total, dtype=torch.int64, device=device)
    t_starts = torch.empty(total, dtype=torch.float32, device=device)
    t_ends = torch.empty(total, dtype=torch.float32, device=device)
    _march_kernel[grid](*arguments, kept, ends - kept, ray_indices, t_starts, t_ends, FILL=True, **launch)
    return ray_indices, t_starts, t_ends
