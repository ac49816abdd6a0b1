"""The culling density pass fused into one CPU kernel (numba): each ray's marched candidates are placed, hash-encoded,
run through the density MLP and composited front to back, and the ray stops at the first candidate its
transmittance can no longer show.

The unfused pass (:func:`~nerfstudio_accel.sampling.culling_pass.cull_marched` through a density function) writes
every candidate's position, encoding and hidden activations to memory and reads them back, op by op, and reads
candidates behind a surface in rounds. Here one thread walks a ray at a time with the point's 32 features and 64
hidden units in its own buffers, and reads no candidate after the ray is opaque. A point's 128 table rows are
hashed and prefetched first, then read (:func:`plan_point`, :func:`encode_planned`), and the next candidate's are
planned before this one's MLP, so their memory latency overlaps it. The kept rule is the reference's:
transmittance before a candidate at least ``early_stop_eps`` (a float64 running sum of capped optical depths) and
opacity at least ``alpha_threshold``. Positions, unit coordinates and encodings are computed in the reference's
float32 order, so they match it bit for bit; the MLP's sums run in another order than a BLAS matmul, so densities
agree to float32 rounding (a candidate on a threshold's edge can fall the other way).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Dict, Tuple

import numba
import numpy as np
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from nerfstudio_accel.kernels.density_network import DensityNetwork
from nerfstudio_accel.kernels.hash_encoding_numba import corner_row, corner_weight, lattice_cell
from nerfstudio_accel.kernels.hash_layout import HASH_PRIMES
from nerfstudio_accel.kernels.packed_rays import ray_starts
from nerfstudio_accel.kernels.prefetch import prefetch_row
from nerfstudio_accel.kernels.threads import PARALLEL_KERNELS, choose_threading_layer

choose_threading_layer()

_ZERO = np.float32(0.0)
_HALF = np.float32(0.5)
_ONE = np.float32(1.0)
_TWO = np.float32(2.0)
_FOUR = np.float32(4.0)


@numba.njit(inline="always")
def _unit_coordinate(value):
    """NaN reads as 0 and the rest is clamped to [0, 1], as the hash encoding takes its points."""
    if value != value:
        return _ZERO
    return min(max(value, _ZERO), _ONE)


@numba.njit(inline="always")
def _contracted(p0, p1, p2, lower, upper, region, use_region):
    """Inf-norm scene contraction of a world point to [0, 1]^3 (the box in the central half), then stretched from
    ``region`` when ``use_region``, in the reference's float32 order."""
    c0 = (p0 - _HALF * (lower[0] + upper[0])) / (_HALF * (upper[0] - lower[0]))
    c1 = (p1 - _HALF * (lower[1] + upper[1])) / (_HALF * (upper[1] - lower[1]))
    c2 = (p2 - _HALF * (lower[2] + upper[2])) / (_HALF * (upper[2] - lower[2]))
    if c0 != c0 or c1 != c1 or c2 != c2:  # the reference's max norm is NaN then, and so is every coordinate
        nan = np.float32(math.nan)
        return nan, nan, nan
    magnitude = max(abs(c0), abs(c1), abs(c2), np.float32(1e-6))
    if magnitude >= _ONE:
        shrink = _TWO - _ONE / magnitude
        c0, c1, c2 = shrink * (c0 / magnitude), shrink * (c1 / magnitude), shrink * (c2 / magnitude)
    u0, u1, u2 = (c0 + _TWO) / _FOUR, (c1 + _TWO) / _FOUR, (c2 + _TWO) / _FOUR
    if use_region:
        u0 = (u0 - region[0, 0]) / (region[1, 0] - region[0, 0])
        u1 = (u1 - region[0, 1]) / (region[1, 1] - region[0, 1])
        u2 = (u2 - region[0, 2]) / (region[1, 2] - region[0, 2])
    return u0, u1, u2


@numba.njit(fastmath={"reassoc", "contract"}, cache=True)
def _hidden_units(code, level_weights, hidden_weight, hidden_bias, units):
    """The density MLP's ReLU hidden layer ``units (hidden,)`` of one point's ``code (enc,)`` (the sums reassociate,
    as a BLAS matmul's do; NaN and infinite weights still propagate)."""
    hidden = hidden_weight.shape[1]
    for j in range(hidden):
        units[j] = hidden_bias[j]
    for k in range(code.shape[0]):
        x = code[k] * level_weights[k]
        for j in range(hidden):
            units[j] += hidden_weight[k, j] * x
    for j in range(hidden):
        units[j] = max(units[j], _ZERO)


@numba.njit(fastmath={"reassoc", "contract"}, cache=True)
def _head_output(units, head_weight, head_bias, o):
    """Output ``o`` of the density MLP's last layer: ``head_bias[o] + head_weight[o] . units`` (indexed, not
    sliced: a slice would count a reference to the shared weights, an atomic update per call)."""
    out = head_bias[o]
    for j in range(units.shape[0]):
        out += head_weight[o, j] * units[j]
    return out


@numba.njit(inline="always")
def unit_point(p0, p1, p2, network):
    """The world point ``(p0, p1, p2)`` in the encoding's unit cube (:func:`network_arrays`' box, contraction and
    region), as the hash encoding takes it."""
    aabb, contract, region, use_region = network[:4]
    lower, upper = aabb[0], aabb[1]
    if contract:
        u0, u1, u2 = _contracted(p0, p1, p2, lower, upper, region, use_region)
    else:
        u0 = (p0 - lower[0]) / (upper[0] - lower[0])
        u1 = (p1 - lower[1]) / (upper[1] - lower[1])
        u2 = (p2 - lower[2]) / (upper[2] - lower[2])
    return _unit_coordinate(u0), _unit_coordinate(u1), _unit_coordinate(u2)


@numba.njit(inline="always")
def plan_point(unit, network, primes, rows, fractions):
    """The table ``rows (levels * 8,)`` that :func:`encode_planned` reads for the ``unit`` point (:func:`unit_point`;
    each level's 8 corners) and its ``fractions (levels * 3,)`` in its cells; each row is prefetched
    (:mod:`~nerfstudio_accel.kernels.prefetch`), so a kernel that plans its next point before its current point's MLP
    finds the rows in cache."""
    table, scales, resolutions, offsets, dense = network[4:9]
    u0, u1, u2 = unit
    for level in range(scales.shape[0]):
        scale, start = scales[level], offsets[level]
        entries = offsets[level + 1] - start
        gx, fractions[3 * level] = lattice_cell(u0, scale)
        gy, fractions[3 * level + 1] = lattice_cell(u1, scale)
        gz, fractions[3 * level + 2] = lattice_cell(u2, scale)
        for corner in range(8):
            row = start + corner_row(
                gx + (corner & 1), gy + ((corner >> 1) & 1), gz + ((corner >> 2) & 1), resolutions[level], entries,
                dense[level], primes[0], primes[1], primes[2],
            )  # fmt: skip
            rows[8 * level + corner] = row
            prefetch_row(table, row)


@numba.njit(inline="always")
def encode_planned(rows, fractions, network, features, code):
    """The unweighted hash encoding ``code (enc,)`` of a point planned by :func:`plan_point`: per level, the 8
    corners' features weighted trilinearly, summed in the reference's order (corner 0 to 7, from 0)."""
    table = network[4]
    for level in range(network[5].shape[0]):
        fx, fy, fz = fractions[3 * level], fractions[3 * level + 1], fractions[3 * level + 2]
        for first in range(0, features, 2):
            low, high = _ZERO, _ZERO
            for corner in range(8):
                bx, by, bz = corner & 1, (corner >> 1) & 1, (corner >> 2) & 1
                weight = corner_weight(bx, fx) * corner_weight(by, fy) * corner_weight(bz, fz)
                row = rows[8 * level + corner]
                low += weight * table[row, first]
                if first + 1 < features:
                    high += weight * table[row, first + 1]
            code[level * features + first] = low
            if first + 1 < features:
                code[level * features + first + 1] = high


@numba.njit(inline="always")
def code_density(code, network, units):
    """Density (float32) and raw density of an encoded point ``code (enc,)`` through ``network``'s MLP, its hidden
    layer written to ``units (hidden,)`` (for :func:`write_head`)."""
    level_weights, hidden_weight, hidden_bias, head_weight, head_bias, max_log_density = network[9:]
    _hidden_units(code, level_weights, hidden_weight, hidden_bias, units)
    raw = _head_output(units, head_weight, head_bias, 0)
    return np.float32(math.exp(min(raw - _ONE, max_log_density))), raw


@numba.njit(inline="always")
def midpoint(ray, t_start, t_end, origins, directions, network):
    """The unit-cube point (:func:`unit_point`) of ``ray``'s step ``[t_start, t_end]``'s midpoint."""
    t_mid = _HALF * (t_start + t_end)
    p0 = origins[ray, 0] + directions[ray, 0] * t_mid
    p1 = origins[ray, 1] + directions[ray, 1] * t_mid
    p2 = origins[ray, 2] + directions[ray, 2] * t_mid
    return unit_point(p0, p1, p2, network)


@numba.njit(inline="always")
def write_head(heads, row, raw, units, network):
    """A kept sample's density head in ``heads[row]``: its ``raw`` density, then the network's further head rows
    from its hidden ``units``."""
    heads[row, 0] = raw
    for o in range(1, heads.shape[1]):
        heads[row, o] = _head_output(units, network[12], network[13], o)


@numba.njit(cache=True)
def _sees_past(depth, early_stop_eps):
    """The reference's early stop: transmittance ``exp(-depth)`` (float64) still at least ``early_stop_eps``."""
    return math.exp(-depth) >= early_stop_eps


@numba.njit(cache=True)
def _opaque_enough(sigma_dt, alpha_threshold):
    """The reference's kept rule: opacity ``1 - exp(-sigma_dt)`` (float32) at least ``alpha_threshold``."""
    return _ONE - np.float32(math.exp(-sigma_dt)) >= alpha_threshold


@functools.lru_cache(maxsize=64)
def kept_rule(early_stop_eps: float, alpha_threshold: float) -> Tuple[np.float64, np.float32, np.float32]:
    """The culling pass's thresholds as the kernels take them, ``(depth_limit, alpha_threshold, least_kept)``: a
    ray sees past optical depth ``d`` exactly when ``d <= depth_limit``, and a candidate of optical depth ``s``
    (float32) is opaque enough exactly when ``s >= least_kept`` (NaN: none is). Found from ``exp``'s own values at
    the edges (it is monotone), so the kernels take no exponential but the density's per candidate."""
    eps, threshold = np.float64(early_stop_eps), np.float32(alpha_threshold)
    depth_limit = _last_true(lambda d: _sees_past(d, eps), np.float64)
    last_culled = _last_true(lambda s: not _opaque_enough(s, threshold), np.float32)
    least_kept = np.float32(np.nan) if last_culled == np.inf else np.nextafter(last_culled, np.float32(np.inf))
    return depth_limit, threshold, least_kept


def _last_true(predicate: Callable[[Any], bool], dtype: Any) -> Any:
    """The largest non-negative ``dtype`` value where ``predicate`` (true up to some value, false after) holds; -1
    when it holds at none, inf when at every one. Bisects the values' bit patterns, ordered as the values are."""
    bits = np.int64 if dtype == np.float64 else np.int32
    low, high = 0, int(np.array(np.inf, dtype=dtype).view(bits))
    if not predicate(dtype(0.0)):
        return dtype(-1.0)
    if predicate(dtype(np.inf)):
        return dtype(np.inf)
    while high - low > 1:  # predicate(low) holds, predicate(high) does not
        middle = (low + high) // 2
        if predicate(np.array(middle, dtype=bits).view(dtype)[()]):
            low = middle
        else:
            high = middle
    return np.array(low, dtype=bits).view(dtype)[()]


@numba.njit(inline="always")
def composite(sigma, t_start, t_end, depth, rule, depth_cap):
    """``(kept, culled, depth)`` of a candidate of density ``sigma`` over ``[t_start, t_end]`` behind optical
    ``depth`` (float64), by :func:`kept_rule`'s ``rule``: kept at opacity ``alpha_threshold`` or more (0 keeps
    all), culled below it (a NaN opacity is neither), and the depth behind it (each candidate adds at most
    ``depth_cap``; NaN counts as it)."""
    alpha_threshold, least_kept = rule[1], rule[2]
    sigma_dt = sigma * (t_end - t_start)
    kept = alpha_threshold <= 0.0 or sigma_dt >= least_kept
    culled = not kept and sigma_dt == sigma_dt
    optical_depth = np.float64(sigma_dt)
    return kept, culled, depth + (depth_cap if not optical_depth <= depth_cap else optical_depth)


@functools.lru_cache(maxsize=None)
def culling_kernel(features: int, prefetch: bool = True) -> Callable[..., None]:
    """The fused culling kernel for ``features`` per level (a compile-time constant, as the encoding kernels'), with
    or without the software prefetch of each ray's next candidate."""
    primes = tuple(np.int64(prime) for prime in HASH_PRIMES)

    @numba.njit(parallel=True, cache=True)
    def cull_rays(
        ray_starts, origins, directions, t_starts, t_ends, network, rule, depth_cap, keep, encodings, heads,
        evaluated, alpha_culled,
    ):  # fmt: skip
        """Per ray ``r`` (candidates ``ray_starts[r]:ray_starts[r + 1]``): ``keep``, the kept candidates'
        ``encodings`` and ``heads`` rows, and the candidates ``evaluated`` and ``alpha_culled`` (of those) per
        ray."""
        width = encodings.shape[1]
        hidden = network[11].shape[0]
        for ray in numba.prange(ray_starts.shape[0] - 1):
            code = np.empty(width, dtype=np.float32)
            units = np.empty(hidden, dtype=np.float32)
            rows = np.empty(8 * network[5].shape[0], dtype=np.int64)
            fractions = np.empty(3 * network[5].shape[0], dtype=np.float32)
            depth = np.float64(0.0)
            count, culled = 0, 0
            planned = False  # whether rows and fractions hold candidate i's plan
            for i in range(ray_starts[ray], ray_starts[ray + 1]):
                if not depth <= rule[0]:
                    break
                if not planned:
                    plan_point(
                        midpoint(ray, t_starts[i], t_ends[i], origins, directions, network), network, primes, rows,
                        fractions,
                    )  # fmt: skip
                encode_planned(rows, fractions, network, features, code)
                planned = prefetch and i + 1 < ray_starts[ray + 1]
                if planned:  # the next candidate's rows arrive while this one's MLP runs
                    plan_point(
                        midpoint(ray, t_starts[i + 1], t_ends[i + 1], origins, directions, network), network, primes,
                        rows, fractions,
                    )  # fmt: skip
                sigma, raw = code_density(code, network, units)
                kept, alpha_culled_here, depth = composite(sigma, t_starts[i], t_ends[i], depth, rule, depth_cap)
                count += 1
                culled += alpha_culled_here
                if kept:
                    keep[i] = True
                    for k in range(width):
                        encodings[i, k] = code[k]
                    write_head(heads, i, raw, units, network)
            evaluated[ray] = count
            alpha_culled[ray] = culled

    return cull_rays


def network_arrays(network: DensityNetwork) -> Tuple[Any, ...]:
    """``network`` as the kernels take it: one tuple of numpy arrays and scalars, in the order
    :func:`unit_point`, :func:`plan_point`, :func:`encode_planned` and :func:`code_density` read it."""
    region = network.region if network.region is not None else torch.zeros(2, 3)
    return (
        _floats(network.aabb),
        network.contract,
        _floats(region),
        network.region is not None,
        _floats(network.table),
        network.levels.scales.numpy(),
        network.levels.resolutions.numpy(),
        network.levels.offsets.numpy(),
        network.levels.dense.numpy(),
        _floats(network.level_weights),
        _floats(network.hidden_weight),
        _floats(network.hidden_bias),
        _floats(network.head_weight),
        _floats(network.head_bias),
        np.float32(network.max_log_density),
    )


def cull_fused(
    network: DensityNetwork,
    ray_indices: Int[Tensor, " n"],
    t_starts: Float[Tensor, " n"],
    t_ends: Float[Tensor, " n"],
    origins: Float[Tensor, "n_rays 3"],
    directions: Float[Tensor, "n_rays 3"],
    alpha_threshold: float,
    early_stop_eps: float,
    optical_depth_cap: float,
    prefetch: bool = True,
) -> Tuple[Bool[Tensor, " n"], Float[Tensor, "n enc"], Float[Tensor, "n heads"], Dict[str, int]]:
    """Which ray-sorted packed candidates the culling pass keeps, ``(n, enc)`` and ``(n, heads)`` buffers whose kept
    rows hold their (unweighted) encodings and density heads (the rows of ``network.head_weight``; the other rows
    are not written), and the counts ``evaluated`` and ``alpha_culled``. CPU tensors; a candidate's optical depth
    adds at most ``optical_depth_cap`` (NaN counts as it). ``prefetch`` (:mod:`~nerfstudio_accel.kernels.prefetch`)
    changes the speed only, never a value."""
    n_rays, n = origins.shape[0], ray_indices.shape[0]
    features = network.table.shape[1]
    keep = torch.zeros(n, dtype=torch.bool)
    encodings = torch.empty(n, network.levels.scales.shape[0] * features, dtype=torch.float32)
    heads = torch.empty(n, network.head_weight.shape[0], dtype=torch.float32)
    evaluated = torch.zeros(n_rays, dtype=torch.int64)
    alpha_culled = torch.zeros(n_rays, dtype=torch.int64)
    if n:
        with PARALLEL_KERNELS:
            culling_kernel(features, prefetch)(
                ray_starts(ray_indices, n_rays).numpy(), _floats(origins), _floats(directions), _floats(t_starts),
                _floats(t_ends), network_arrays(network), kept_rule(early_stop_eps, alpha_threshold),
                np.float64(optical_depth_cap), keep.numpy(), encodings.numpy(), heads.numpy(), evaluated.numpy(),
                alpha_culled.numpy(),
            )  # fmt: skip
    counts = {"evaluated": int(evaluated.sum()), "alpha_culled": int(alpha_culled.sum())}
    return keep, encodings, heads, counts


def _floats(tensor: Tensor) -> Any:
    """A float32, contiguous numpy view (a copy where it must convert) of a CPU tensor."""
    return tensor.detach().float().contiguous().numpy()
