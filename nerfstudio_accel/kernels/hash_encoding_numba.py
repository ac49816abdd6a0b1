"""Fused hash-encoding kernels for the CPU, JIT-compiled by numba (no C++ compiler needed).

Threads split the work by level: each level owns its slice of the table and its slice of the
outputs, so the gradient scatter needs no atomics and no torch ``index_put``, and a thread streams all
points through one level's slice of the table while it stays in cache. Per point and level, one pass
computes the vertex, the 8 dense or hashed rows (:mod:`nerfstudio_accel.kernels.hash_layout`) and the
trilinear weights in float32, like the torch reference. Outputs and incoming gradients are
point-major, ``(n, levels * F)``.

:func:`encode_forward` and :func:`encode_backward` take CPU tensors; the kernels behind them are
compiled on first use for each feature count and cached on disk (numba's ``cache=True``).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Optional, Tuple

import numba
import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from nerfstudio_accel.kernels.hash_layout import HASH_PRIMES, LevelTensors
from nerfstudio_accel.kernels.threads import PARALLEL_KERNELS, choose_threading_layer

choose_threading_layer()

_HALF = np.float32(0.5)
_ONE = np.float32(1.0)


@numba.njit(inline="always")
def lattice_cell(point, scale):
    """Lower vertex (int64) and fraction (float32) along one axis. The floor is a truncation moved down where it
    rounded up (negative positions): exact for every float32 in int64's range, and compiled inline, where numba
    calls a library ``floorf`` for ``math.floor``."""
    position = point * scale + _HALF
    lower = np.int64(position)
    if np.float32(lower) > position:
        lower -= 1
    return lower, position - np.float32(lower)


@numba.njit(inline="always")
def corner_row(gx, gy, gz, resolution, entries, dense, prime_x, prime_y, prime_z):
    """Row of vertex ``(gx, gy, gz)`` within its level, modulo the level size (hashed levels hold a
    power of two rows, so the hash is masked; the uint32 products wrap under the mask)."""
    if dense:
        index = gx + gy * resolution + gz * resolution * resolution
        return index % entries if index >= entries else index
    return ((gx * prime_x) ^ (gy * prime_y) ^ (gz * prime_z)) & (entries - 1)


@numba.njit(inline="always")
def corner_weight(bit, fraction):
    """A corner's trilinear weight along one axis: ``fraction`` at the upper vertex (``bit`` 1), else its rest."""
    return fraction if bit else _ONE - fraction


@numba.njit(inline="always")
def corner_sums(table, start, first, features, cell, resolution, entries, dense, prime_x, prime_y, prime_z):
    """Features ``first`` and ``first + 1`` (0 past ``features``) of a level, interpolated over the 8 corners of
    ``cell = (gx, gy, gz, fx, fy, fz)`` (:func:`lattice_cell` per axis) from the level's rows ``start`` on, summed
    in registers in the reference's order (corner 0 to 7, from 0)."""
    gx, gy, gz, fx, fy, fz = cell
    low, high = np.float32(0.0), np.float32(0.0)
    for corner in range(8):
        bx, by, bz = corner & 1, (corner >> 1) & 1, (corner >> 2) & 1
        weight = corner_weight(bx, fx) * corner_weight(by, fy) * corner_weight(bz, fz)
        row = start + corner_row(gx + bx, gy + by, gz + bz, resolution, entries, dense, prime_x, prime_y, prime_z)
        low += weight * table[row, first]
        if first + 1 < features:
            high += weight * table[row, first + 1]
    return low, high


class LevelKernels(NamedTuple):
    """The three kernels compiled for one feature count."""

    encode_forward: Callable[..., None]
    encode_backward_table: Callable[..., None]
    encode_backward_points: Callable[..., None]


@functools.lru_cache(maxsize=None)
def level_kernels(features: int) -> LevelKernels:
    """Kernels for ``features`` per level, a compile-time constant (LLVM then unrolls the feature loop
    and keeps the accumulators in registers; docs/hash_encoding.md)."""
    # The primes reach the kernels as closure constants: numba's disk cache keys on closure values, not
    # on module globals imported from another file.
    prime_x, prime_y, prime_z = (np.int64(prime) for prime in HASH_PRIMES)

    @numba.njit(parallel=True, cache=True)
    def encode_forward(points, table, scales, resolutions, offsets, dense, out):
        """``out (n, L*F)`` = features of ``points (n, 3)`` in [0, 1]; ``table (rows, F)`` float32."""
        for level in numba.prange(scales.shape[0]):
            scale, start, resolution, is_dense = scales[level], offsets[level], resolutions[level], dense[level]
            entries = offsets[level + 1] - start
            for i in range(points.shape[0]):
                gx, fx = lattice_cell(points[i, 0], scale)
                gy, fy = lattice_cell(points[i, 1], scale)
                gz, fz = lattice_cell(points[i, 2], scale)
                for first in range(0, features, 2):
                    low, high = corner_sums(
                        table, start, first, features, (gx, gy, gz, fx, fy, fz), resolution, entries, is_dense,
                        prime_x, prime_y, prime_z,
                    )  # fmt: skip
                    out[i, level * features + first] = low
                    if first + 1 < features:
                        out[i, level * features + first + 1] = high

    @numba.njit(parallel=True, cache=True)
    def encode_backward_table(points, grad_out, scales, resolutions, offsets, dense, grad_table):
        """``d loss / d table (rows, F)`` of the levels' rows from ``grad_out (n, L*F)``: the thread that owns a
        level zeroes its rows (they stay in its cache for the scatter), then accumulates into them."""
        for level in numba.prange(scales.shape[0]):
            scale, start, resolution, is_dense = scales[level], offsets[level], resolutions[level], dense[level]
            entries = offsets[level + 1] - start
            grad_table[start : start + entries, :] = 0.0
            for i in range(points.shape[0]):
                gx, fx = lattice_cell(points[i, 0], scale)
                gy, fy = lattice_cell(points[i, 1], scale)
                gz, fz = lattice_cell(points[i, 2], scale)
                for corner in range(8):
                    bx, by, bz = corner & 1, (corner >> 1) & 1, (corner >> 2) & 1
                    weight = corner_weight(bx, fx) * corner_weight(by, fy) * corner_weight(bz, fz)
                    row = start + corner_row(
                        gx + bx, gy + by, gz + bz, resolution, entries, is_dense, prime_x, prime_y, prime_z
                    )
                    for f in range(features):
                        grad_table[row, f] += weight * grad_out[i, level * features + f]

    @numba.njit(parallel=True, cache=True)
    def encode_backward_points(points, table, grad_out, scales, resolutions, offsets, dense, grad_points):
        """Per-level ``d loss / d points``, ``grad_points (L, n, 3)``, from ``grad_out (n, L*F)`` (sum over L)."""
        for level in numba.prange(scales.shape[0]):
            scale, start, resolution, is_dense = scales[level], offsets[level], resolutions[level], dense[level]
            entries = offsets[level + 1] - start
            for i in range(points.shape[0]):
                gx, fx = lattice_cell(points[i, 0], scale)
                gy, fy = lattice_cell(points[i, 1], scale)
                gz, fz = lattice_cell(points[i, 2], scale)
                dx, dy, dz = np.float32(0.0), np.float32(0.0), np.float32(0.0)
                for corner in range(8):
                    bx, by, bz = corner & 1, (corner >> 1) & 1, (corner >> 2) & 1
                    wx, wy, wz = corner_weight(bx, fx), corner_weight(by, fy), corner_weight(bz, fz)
                    row = start + corner_row(
                        gx + bx, gy + by, gz + bz, resolution, entries, is_dense, prime_x, prime_y, prime_z
                    )
                    along = np.float32(0.0)
                    for f in range(features):
                        along += table[row, f] * grad_out[i, level * features + f]
                    along *= scale
                    dx += along * wy * wz if bx else -along * wy * wz
                    dy += along * wx * wz if by else -along * wx * wz
                    dz += along * wx * wy if bz else -along * wx * wy
                grad_points[level, i, 0] = dx
                grad_points[level, i, 1] = dy
                grad_points[level, i, 2] = dz

    return LevelKernels(encode_forward, encode_backward_table, encode_backward_points)


def encode_forward(
    points: Float[Tensor, "n 3"], rows: Float[Tensor, "rows F"], levels: LevelTensors,
    out_dtype: torch.dtype = torch.float32,
) -> Float[Tensor, "n out"]:  # fmt: skip
    """Features ``(n, L*F)`` of contiguous float32 CPU ``points`` in [0, 1] (threads over levels), computed in
    float32 and cast to ``out_dtype`` (numba has no half types)."""
    num_levels, features = levels.scales.shape[0], rows.shape[1]
    out = torch.empty(points.shape[0], num_levels * features, dtype=torch.float32)
    if points.shape[0]:
        with PARALLEL_KERNELS, level_scheduling():
            compiled = level_kernels(features)
            compiled.encode_forward(points.numpy(), rows.numpy(), *_numpy_levels(levels), out.numpy())
    return out.to(out_dtype)


def encode_backward(
    points: Float[Tensor, "n 3"], rows: Float[Tensor, "rows F"], grad_out: Float[Tensor, "n out"],
    levels: LevelTensors, point_grad: bool,
) -> Tuple[Float[Tensor, "rows F"], Optional[Float[Tensor, "n 3"]]]:  # fmt: skip
    """Table gradient ``(rows, F)`` and, when ``point_grad``, the points' gradient ``(n, 3)``; CPU tensors
    (``grad_out`` of any float dtype, read as float32)."""
    num_levels, features = levels.scales.shape[0], rows.shape[1]
    if not points.shape[0]:
        return torch.zeros_like(rows), torch.zeros_like(points) if point_grad else None
    grad_rows = torch.empty_like(rows)  # the table is the levels' rows (the layout's size): the kernel zeroes each
    grad_points: Optional[Tensor] = None
    compiled = level_kernels(features)
    arrays = (points.numpy(), rows.numpy(), grad_out.float().contiguous().numpy(), *_numpy_levels(levels))
    with PARALLEL_KERNELS, level_scheduling():
        compiled.encode_backward_table(arrays[0], *arrays[2:], grad_rows.numpy())
        if point_grad:
            per_level = torch.empty(num_levels, points.shape[0], 3, dtype=torch.float32)
            compiled.encode_backward_points(*arrays, per_level.numpy())
            grad_points = per_level.sum(dim=0)
    return grad_rows, grad_points


def level_scheduling() -> Any:
    """Hand levels to numba's threads one at a time: coarse dense levels cost far less than fine
    hashed ones, so equal static shares would leave threads idle."""
    return numba.parallel_chunksize(1)


def _numpy_levels(levels: LevelTensors) -> Tuple[Any, ...]:
    """``(scales, resolutions, offsets, dense)`` as numpy arrays for the kernels."""
    return levels.scales.numpy(), levels.resolutions.numpy(), levels.offsets.numpy(), levels.dense.numpy()
