"""Fused hash-encoding kernels for CUDA, written in Triton (ships with CUDA builds of torch; no nvcc).

One program handles a block of points over all levels: vertex coordinates, dense or hashed rows,
trilinear weights, float32 accumulation. The backward pass scatters into the table with atomic adds
and, when asked, sums the input gradient in the same pass. Point offsets are int64 (as the marcher's): with
int32, ``point * levels * features`` wraps past 2^31 / 32 = 67M points per call. The indexing is the one in
:mod:`nerfstudio_accel.kernels.hash_layout`, checked against the torch reference; under
``TRITON_INTERPRET=1`` (set before this module is imported) the same kernels run on CPU tensors.

:func:`encode_forward` and :func:`encode_backward` take CUDA tensors (CPU ones under the interpreter).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from jaxtyping import Float
from torch import Tensor

from nerfstudio_accel.kernels.hash_layout import HASH_PRIMES, LevelTensors

BLOCK_POINTS = 128
_PRIME_X = tl.constexpr(HASH_PRIMES[0])
_PRIME_Y = tl.constexpr(HASH_PRIMES[1])
_PRIME_Z = tl.constexpr(HASH_PRIMES[2])


@triton.jit
def _level_cell(x, y, z, scale):
    """Lower vertex (int64) and fraction per axis of points at a level's scale."""
    px = x * scale + 0.5
    py = y * scale + 0.5
    pz = z * scale + 0.5
    lx = tl.floor(px)
    ly = tl.floor(py)
    lz = tl.floor(pz)
    return lx.to(tl.int64), ly.to(tl.int64), lz.to(tl.int64), px - lx, py - ly, pz - lz


@triton.jit
def _corner_row(cx, cy, cz, resolution, entries, dense):
    """Row within the level of vertex ``(cx, cy, cz)``: dense index modulo the size, or the spatial hash
    masked to the size (hashed levels hold a power of two rows; the mask also wraps the uint32 products)."""
    dense_index = (cx + cy * resolution + cz * resolution * resolution) % entries
    hashed = ((cx * _PRIME_X) ^ (cy * _PRIME_Y) ^ (cz * _PRIME_Z)) & (entries - 1)
    return tl.where(dense != 0, dense_index, hashed)


@triton.jit
def _forward_kernel(
    points_ptr, table_ptr, out_ptr, num_points,
    scales_ptr, resolutions_ptr, offsets_ptr, dense_ptr,
    NUM_LEVELS: tl.constexpr, FEATURES: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    point = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # int64 offsets: n * L * F > 2^31
    mask = point < num_points
    feature = tl.arange(0, FEATURES)
    x = tl.load(points_ptr + point * 3 + 0, mask=mask, other=0.0)
    y = tl.load(points_ptr + point * 3 + 1, mask=mask, other=0.0)
    z = tl.load(points_ptr + point * 3 + 2, mask=mask, other=0.0)
    for level in range(NUM_LEVELS):
        scale = tl.load(scales_ptr + level)
        start = tl.load(offsets_ptr + level)
        entries = tl.load(offsets_ptr + level + 1) - start
        resolution = tl.load(resolutions_ptr + level)
        dense = tl.load(dense_ptr + level)
        gx, gy, gz, fx, fy, fz = _level_cell(x, y, z, scale)
        acc = tl.zeros((BLOCK, FEATURES), dtype=tl.float32)
        for corner in tl.static_range(8):  # corner bits are compile-time constants: x = bit 0, y = bit 1, z = bit 2
            wx = fx if corner & 1 else 1.0 - fx
            wy = fy if corner & 2 else 1.0 - fy
            wz = fz if corner & 4 else 1.0 - fz
            row = start + _corner_row(
                gx + (corner & 1), gy + ((corner >> 1) & 1), gz + (corner >> 2), resolution, entries, dense
            )
            values = tl.load(table_ptr + row[:, None] * FEATURES + feature[None, :], mask=mask[:, None], other=0.0)
            acc += (wx * wy * wz)[:, None] * values
        column = level * FEATURES + feature
        tl.store(  # rounded to the output's dtype (half under autocast) as it is written
            out_ptr + point[:, None] * (NUM_LEVELS * FEATURES) + column[None, :],
            acc.to(out_ptr.dtype.element_ty),
            mask=mask[:, None],
        )


@triton.jit
def _backward_kernel(
    points_ptr, table_ptr, grad_out_ptr, grad_table_ptr, grad_points_ptr, num_points,
    scales_ptr, resolutions_ptr, offsets_ptr, dense_ptr,
    NUM_LEVELS: tl.constexpr, FEATURES: tl.constexpr, BLOCK: tl.constexpr, POINT_GRAD: tl.constexpr,
):  # fmt: skip
    point = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # int64 offsets: n * L * F > 2^31
    mask = point < num_points
    feature = tl.arange(0, FEATURES)
    x = tl.load(points_ptr + point * 3 + 0, mask=mask, other=0.0)
    y = tl.load(points_ptr + point * 3 + 1, mask=mask, other=0.0)
    z = tl.load(points_ptr + point * 3 + 2, mask=mask, other=0.0)
    dx = tl.zeros((BLOCK,), dtype=tl.float32)
    dy = tl.zeros((BLOCK,), dtype=tl.float32)
    dz = tl.zeros((BLOCK,), dtype=tl.float32)
    for level in range(NUM_LEVELS):
        scale = tl.load(scales_ptr + level)
        start = tl.load(offsets_ptr + level)
        entries = tl.load(offsets_ptr + level + 1) - start
        resolution = tl.load(resolutions_ptr + level)
        dense = tl.load(dense_ptr + level)
        gx, gy, gz, fx, fy, fz = _level_cell(x, y, z, scale)
        column = level * FEATURES + feature
        upstream = tl.load(
            grad_out_ptr + point[:, None] * (NUM_LEVELS * FEATURES) + column[None, :], mask=mask[:, None], other=0.0
        ).to(tl.float32)  # half gradients from autocast are widened in registers, not in a cast pass
        for corner in tl.static_range(8):
            wx = fx if corner & 1 else 1.0 - fx
            wy = fy if corner & 2 else 1.0 - fy
            wz = fz if corner & 4 else 1.0 - fz
            row = start + _corner_row(
                gx + (corner & 1), gy + ((corner >> 1) & 1), gz + (corner >> 2), resolution, entries, dense
            )
            address = row[:, None] * FEATURES + feature[None, :]
            tl.atomic_add(
                grad_table_ptr + address, (wx * wy * wz)[:, None] * upstream, mask=mask[:, None], sem="relaxed"
            )
            if POINT_GRAD:
                values = tl.load(table_ptr + address, mask=mask[:, None], other=0.0)
                along = tl.sum(values * upstream, axis=1) * scale
                dx += along * (wy * wz if corner & 1 else -(wy * wz))
                dy += along * (wx * wz if corner & 2 else -(wx * wz))
                dz += along * (wx * wy if corner & 4 else -(wx * wy))
    if POINT_GRAD:
        tl.store(grad_points_ptr + point * 3 + 0, dx, mask=mask)
        tl.store(grad_points_ptr + point * 3 + 1, dy, mask=mask)
        tl.store(grad_points_ptr + point * 3 + 2, dz, mask=mask)


def _grid(num_points: int) -> Tuple[int]:
    return (triton.cdiv(num_points, BLOCK_POINTS),)


def encode_forward(
    points: Float[Tensor, "n 3"], rows: Float[Tensor, "rows F"], levels: LevelTensors,
    out_dtype: torch.dtype = torch.float32,
) -> Float[Tensor, "n out"]:  # fmt: skip
    """Features ``(n, L*F)`` of contiguous float32 ``points (n, 3)`` in [0, 1]; ``rows (rows, F)``; summed in
    float32 and written as ``out_dtype`` (fp16/bf16 under autocast: no separate cast pass)."""
    num_levels, features = levels.scales.shape[0], rows.shape[1]
    out = torch.empty(points.shape[0], num_levels * features, dtype=out_dtype, device=points.device)
    if points.shape[0]:
        _forward_kernel[_grid(points.shape[0])](
            points, rows, out, points.shape[0], levels.scales, levels.resolutions, levels.offsets,
            levels.dense.to(torch.int32), NUM_LEVELS=num_levels, FEATURES=features, BLOCK=BLOCK_POINTS,
        )  # fmt: skip
    return out


def encode_backward(
    points: Float[Tensor, "n 3"], rows: Float[Tensor, "rows F"], grad_out: Float[Tensor, "n out"],
    levels: LevelTensors, point_grad: bool,
) -> Tuple[Float[Tensor, "rows F"], Optional[Float[Tensor, "n 3"]]]:  # fmt: skip
    """Table gradient ``(rows, F)`` and, when ``point_grad``, the points' gradient ``(n, 3)``; ``grad_out`` of
    any float dtype (read as float32)."""
    num_levels, features = levels.scales.shape[0], rows.shape[1]
    grad_table = torch.zeros_like(rows)
    grad_points = torch.zeros_like(points) if point_grad else None
    if points.shape[0]:
        _backward_kernel[_grid(points.shape[0])](
            points, rows, grad_out.contiguous(), grad_table, grad_points if point_grad else points, points.shape[0],
            levels.scales, levels.resolutions, levels.offsets, levels.dense.to(torch.int32),
            NUM_LEVELS=num_levels, FEATURES=features, BLOCK=BLOCK_POINTS, POINT_GRAD=point_grad,
        )  # fmt: skip
    return grad_table, grad_points
