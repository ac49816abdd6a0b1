"""Fused hash-encoding kernels for the CPU, JIT-compiled by numba (no C++ compiler needed).

Threads split the work by level: each level owns its slice of the table and its slice of the
outputs, so the gradient scatter needs no atomics and no torch ``index_put``, and a thread streams all
points through one level's slice of the table while it stays in cache (on random points this is ~3.5x
faster than threads over points, whose lookups jump across all levels' tables). Per point and level,
one pass computes the vertex, the 8 dense or hashed rows and the trilinear weights in float32, like the
torch reference. Outputs and incoming gradients are point-major, ``(n, levels * F)``.

Compiled on first use for each feature count and cached on disk (numba's ``cache=True``).
"""

from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple

import numba
import numpy as np

from nerfstudio_accel.numba_threads import choose_threading_layer

choose_threading_layer()

_HALF = np.float32(0.5)
_ONE = np.float32(1.0)
_PRIME_Y = np.int64(2654435761)
_PRIME_Z = np.int64(805459861)


@numba.njit(inline="always")
def _cell(point, scale):
    """Lower vertex (int64) and fraction (float32) along one axis."""
    position = point * scale + _HALF
    lower = np.float32(math.floor(position))
    return np.int64(lower), position - lower


@numba.njit(inline="always")
def _corner_row(gx, gy, gz, resolution, entries, dense):
    """Row of vertex ``(gx, gy, gz)`` within its level, modulo the level size (hashed levels hold a
    power of two rows, so the hash is masked; the uint32 products wrap under the mask)."""
    if dense:
        index = gx + gy * resolution + gz * resolution * resolution
        return index % entries if index >= entries else index
    return (gx ^ (gy * _PRIME_Y) ^ (gz * _PRIME_Z)) & (entries - 1)


@numba.njit(inline="always")
def _weight(bit, fraction):
    return fraction if bit else _ONE - fraction


class LevelKernels(NamedTuple):
    """The three kernels compiled for one feature count."""

    encode_forward: Callable[..., None]
    encode_backward_table: Callable[..., None]
    encode_backward_points: Callable[..., None]


@functools.lru_cache(maxsize=None)
def level_kernels(features: int) -> LevelKernels:
    """Kernels for ``features`` per level, a compile-time constant (a loop over a run-time feature
    count runs ~2x slower: LLVM cannot unroll it nor keep the accumulators in registers)."""

    @numba.njit(parallel=True, cache=True)
    def encode_forward(points, table, scales, resolutions, offsets, dense, out):
        """``out (n, L*F)`` = features of ``points (n, 3)`` in [0, 1]; ``table (rows, F)`` float32."""
        for level in numba.prange(scales.shape[0]):
            scale, start, resolution, is_dense = scales[level], offsets[level], resolutions[level], dense[level]
            entries = offsets[level + 1] - start
            for i in range(points.shape[0]):
                gx, fx = _cell(points[i, 0], scale)
                gy, fy = _cell(points[i, 1], scale)
                gz, fz = _cell(points[i, 2], scale)
                for f in range(features):
                    out[i, level * features + f] = 0.0
                for corner in range(8):
                    bx, by, bz = corner & 1, (corner >> 1) & 1, (corner >> 2) & 1
                    weight = _weight(bx, fx) * _weight(by, fy) * _weight(bz, fz)
                    row = start + _corner_row(gx + bx, gy + by, gz + bz, resolution, entries, is_dense)
                    for f in range(features):
                        out[i, level * features + f] += weight * table[row, f]


    @numba.njit(parallel=True, cache=True)
    def encode_backward_table(points, grad_out, scales, resolutions, offsets, dense, grad_table):
        """Accumulate ``d loss / d table (rows, F)`` from ``grad_out (n, L*F)``; ``grad_table`` starts at zero."""
        for level in numba.prange(scales.shape[0]):
            scale, start, resolution, is_dense = scales[level], offsets[level], resolutions[level], dense[level]
            entries = offsets[level + 1] - start
            for i in range(points.shape[0]):
                gx, fx = _cell(points[i, 0], scale)
                gy, fy = _cell(points[i, 1], scale)
                gz, fz = _cell(points[i, 2], scale)
                for corner in range(8):
                    bx, by, bz = corner & 1, (corner >> 1) & 1, (corner >> 2) & 1
                    weight = _weight(bx, fx) * _weight(by, fy) * _weight(bz, fz)
                    row = start + _corner_row(gx + bx, gy + by, gz + bz, resolution, entries, is_dense)
                    for f in range(features):
                        grad_table[row, f] += weight * grad_out[i, level * features + f]


    @numba.njit(parallel=True, cache=True)
    def encode_backward_points(points, table, grad_out, scales, resolutions, offsets, dense, grad_points):
        """Per-level ``d loss / d points``, ``grad_points (L, n, 3)``, from ``grad_out (n, L*F)`` (sum over L)."""
        for level in numba.prange(scales.shape[0]):
            scale, start, resolution, is_dense = scales[level], offsets[level], resolutions[level], dense[level]
            entries = offsets[level + 1] - start
            for i in range(points.shape[0]):
                gx, fx = _cell(points[i, 0], scale)
                gy, fy = _cell(points[i, 1], scale)
                gz, fz = _cell(points[i, 2], scale)
                dx, dy, dz = np.float32(0.0), np.float32(0.0), np.float32(0.0)
                for corner in range(8):
                    bx, by, bz = corner & 1, (corner >> 1) & 1, (corner >> 2) & 1
                    wx, wy, wz = _weight(bx, fx), _weight(by, fy), _weight(bz, fz)
                    row = start + _corner_row(gx + bx, gy + by, gz + bz, resolution, entries, is_dense)
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
