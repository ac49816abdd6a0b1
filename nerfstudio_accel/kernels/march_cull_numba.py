"""Marching and the culling density pass fused into one CPU kernel (numba): a ray marches only as far as it can be
seen.

Marched apart (:mod:`~nerfstudio_accel.kernels.marching_numba`), each ray walks its whole lattice twice (a count
pass, a fill pass) and hands every occupied step, also those behind the surface, to the culling kernel
(:mod:`~nerfstudio_accel.kernels.culling_numba`), which stops reading at the first candidate the ray can no longer
show. Here one thread walks a ray once: each occupied step is evaluated (encoded, through the density MLP,
composited front to back) as it is marched, and the walk ends where the ray becomes opaque. Only kept samples are
written. The steps are the marcher's (the same float32 arithmetic), the kept rule and densities the culling
kernel's, so the result is the marcher followed by the culling pass.

Each step's table rows are planned (hashed and prefetched, :func:`~nerfstudio_accel.kernels.culling_numba.plan_point`)
before the previous step's MLP runs, so their memory latency overlaps that arithmetic: the next step of an occupied
run, or, at a run's last step, the next run's first step, found then.

Kept samples are written per chunk of :data:`CHUNK_RAYS` rays into scratch rows sized from an expected count; a
chunk that keeps more is marched again straight into the packed output, whose offsets the first pass counted.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Dict, Optional, Tuple

import numba
import numpy as np
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from nerfstudio_accel.kernels.culling_numba import (
    code_density,
    composite,
    encode_planned,
    kept_rule,
    midpoint,
    network_arrays,
    plan_point,
    write_head,
)
from nerfstudio_accel.kernels.density_network import DensityNetwork
from nerfstudio_accel.kernels.hash_layout import HASH_PRIMES
from nerfstudio_accel.kernels.marching_numba import _run_from, _step_start, _uniform_steps, marching_arrays
from nerfstudio_accel.kernels.threads import PARALLEL_KERNELS, choose_threading_layer

choose_threading_layer()

CHUNK_RAYS = 16
"""Rays per chunk: a chunk's kept samples are contiguous, in ray order, in its scratch rows."""

KeptSamples = Tuple[
    Int[Tensor, " k"], Float[Tensor, " k"], Float[Tensor, " k"], Float[Tensor, "k enc"], Float[Tensor, "k heads"],
    Dict[str, int],
]  # fmt: skip
"""What :func:`march_and_cull` returns: ``ray_indices, t_starts, t_ends, encodings, heads`` and the counts."""


@numba.njit(inline="always")
def _next_occupied(ray, local, walk):
    """``(local, last, t_start, dt)`` of ``ray``'s first occupied run at step ``local`` or after (steps ``local`` to
    ``last``, the first one's start and length; :func:`~nerfstudio_accel.kernels.marching_numba._run_from`);
    ``local`` is the ray's step count when there is none. ``walk``: :func:`marching_arrays`' items."""
    origins, directions, near, t_min, t_max, k_first, counts, binaries, aabbs, resolution, cubes, scalars = walk
    while local < counts[ray]:
        last, occupied, t_start, dt = _run_from(
            ray, local, origins, directions, near, t_min, t_max, k_first, counts, binaries, aabbs, resolution,
            cubes, scalars,
        )  # fmt: skip
        if occupied:
            return local, last, t_start, dt
        local = last + 1
    return local, local, np.float32(0.0), np.float32(0.0)


@functools.lru_cache(maxsize=None)
def march_cull_kernel(features: int, prefetch: bool = True) -> Callable[..., None]:
    """The fused marching and culling kernel for ``features`` per level (a compile-time constant), with or without
    the software prefetch of each ray's next step."""
    primes = tuple(np.int64(prime) for prime in HASH_PRIMES)

    @numba.njit(parallel=True, cache=True)
    def march_and_cull(
        chunks, row_starts, capacities, marching, cap, network, rule, depth_cap,
        ray_indices, t_starts, t_ends, encodings, heads, kept, evaluated, alpha_culled,
    ):  # fmt: skip
        """For each chunk ``chunks[c]`` (rays ``CHUNK_RAYS * chunks[c]`` on): its kept samples' ``ray_indices``,
        ``t_starts``, ``t_ends``, unweighted ``encodings`` and density ``heads`` in rows ``row_starts[c]`` on, at
        most ``capacities[c]`` of them; per ray, the samples ``kept`` (also those past the capacity), the candidates
        ``evaluated`` (marched: the walk stops at the early stop) and ``alpha_culled`` (of those)."""
        origins, directions, near, t_min, t_max, k_first, counts, binaries, aabbs, resolution = marching[:10]
        cubes, scalars = marching[10:]
        step, cone, growth, t_switch = scalars[0], scalars[1], scalars[2], scalars[3]
        n_rays = origins.shape[0]
        width = encodings.shape[1]
        for c in numba.prange(chunks.shape[0]):
            code = np.empty(width, dtype=np.float32)
            units = np.empty(network[11].shape[0], dtype=np.float32)
            rows = np.empty(8 * network[5].shape[0], dtype=np.int64)
            fractions = np.empty(3 * network[5].shape[0], dtype=np.float32)
            row, end = row_starts[c], row_starts[c] + capacities[c]
            # ``marching`` again, rebuilt here: numba passes no tuple holding a tuple of arrays into a parallel loop
            walk = (
                origins, directions, near, t_min, t_max, k_first, counts, binaries, aabbs, resolution, cubes, scalars
            )  # fmt: skip
            for ray in range(CHUNK_RAYS * chunks[c], min(CHUNK_RAYS * (chunks[c] + 1), n_rays)):
                n_uniform = _uniform_steps(near[ray], step, cone, t_switch)
                depth = np.float64(0.0)
                marched, n_kept, culled = 0, 0, 0
                local, last, t_start, dt = _next_occupied(ray, 0, walk)
                planned = False  # whether rows and fractions hold the next step's plan
                while local < counts[ray] and marched < cap and depth <= rule[0]:
                    stop = last + 1 if last - local < cap - marched else local + (cap - marched)
                    found = False  # the next occupied run, found at this run's last step
                    next_run = (counts[ray], counts[ray], np.float32(0.0), np.float32(0.0))
                    for run in range(local, stop):
                        if not depth <= rule[0]:
                            break
                        if run > local:
                            t_start, dt = _step_start(
                                k_first[ray] + np.float32(run), near[ray], step, cone, growth, n_uniform
                            )
                        t_end = t_start + dt
                        if not planned:
                            plan_point(
                                midpoint(ray, t_start, t_end, origins, directions, network), network, primes, rows,
                                fractions,
                            )  # fmt: skip
                        encode_planned(rows, fractions, network, features, code)
                        planned = False
                        if prefetch and run + 1 < stop:  # the next step's rows arrive while this one's MLP runs
                            t_next, dt_next = _step_start(
                                k_first[ray] + np.float32(run + 1), near[ray], step, cone, growth, n_uniform
                            )
                            planned = True
                        elif prefetch and run == last:  # the next run's first step's, found now
                            next_run = _next_occupied(ray, last + 1, walk)
                            found = True
                            t_next, dt_next = next_run[2], next_run[3]
                            planned = next_run[0] < counts[ray]
                        if planned:
                            plan_point(
                                midpoint(ray, t_next, t_next + dt_next, origins, directions, network), network, primes,
                                rows, fractions,
                            )  # fmt: skip
                        sigma, raw = code_density(code, network, units)
                        keep, alpha_culled_here, depth = composite(sigma, t_start, t_end, depth, rule, depth_cap)
                        marched += 1
                        culled += alpha_culled_here
                        if keep:
                            if row < end:
                                ray_indices[row] = ray
                                t_starts[row] = t_start
                                t_ends[row] = t_end
                                for k in range(width):
                                    encodings[row, k] = code[k]
                                write_head(heads, row, raw, units, network)
                            row += 1
                            n_kept += 1
                    if not found:
                        if not (marched < cap and depth <= rule[0]):
                            break
                        next_run = _next_occupied(ray, last + 1, walk)
                    local, last, t_start, dt = next_run
                kept[ray] = n_kept
                evaluated[ray] = marched
                alpha_culled[ray] = culled

    return march_and_cull


@numba.njit(parallel=True, cache=True)
def _pack_chunks(sources, counts, targets, ray_indices, t_starts, t_ends, encodings, heads, out):
    """Copy chunk ``c``'s ``counts[c]`` rows from ``sources[c]`` to ``targets[c]`` of ``out`` (the five outputs);
    a negative source skips the chunk (its rows are already in place)."""
    out_rays, out_starts, out_ends, out_encodings, out_heads = out
    for c in numba.prange(sources.shape[0]):
        if sources[c] < 0:
            continue
        for i in range(counts[c]):
            source, target = sources[c] + i, targets[c] + i
            out_rays[target] = ray_indices[source]
            out_starts[target] = t_starts[source]
            out_ends[target] = t_ends[source]
            for k in range(encodings.shape[1]):
                out_encodings[target, k] = encodings[source, k]
            for k in range(heads.shape[1]):
                out_heads[target, k] = heads[source, k]


def march_and_cull(
    network: DensityNetwork,
    origins: Float[Tensor, "n_rays 3"],
    directions: Float[Tensor, "n_rays 3"],
    binaries: Bool[Tensor, "n_levels rx ry rz"],
    aabbs: Float[Tensor, "n_levels 6"],
    near_planes: Float[Tensor, " n_rays"],
    far_planes: Float[Tensor, " n_rays"],
    step_size: float,
    cone_angle: float,
    max_samples_per_ray: Optional[int],
    alpha_threshold: float,
    early_stop_eps: float,
    optical_depth_cap: float,
    expected_kept_per_ray: float = 16.0,
    prefetch: bool = True,
) -> KeptSamples:
    """The samples the culling pass keeps of the rays marched through the grid (as
    :func:`~nerfstudio_accel.kernels.marching_numba.traverse_occupancy_grid` marches them, at most
    ``max_samples_per_ray`` candidates per ray, then
    :func:`~nerfstudio_accel.kernels.culling_numba.cull_fused` culls them): packed ``ray_indices (int64), t_starts,
    t_ends``, their unweighted ``encodings`` and density ``heads`` (the rows of ``network.head_weight``), and the
    counts ``evaluated`` (every candidate marched; none behind a ray's early stop) and ``alpha_culled``. CPU tensors.
    ``expected_kept_per_ray`` (at most the cap) sizes the scratch rows (a chunk that keeps more is marched again);
    ``prefetch`` (:mod:`~nerfstudio_accel.kernels.prefetch`) changes the speed only, never a value."""
    n_rays = origins.shape[0]
    features = network.table.shape[1]
    widths = (network.levels.scales.shape[0] * features, network.head_weight.shape[0])
    if n_rays == 0:
        return (*_packed(0, widths), {"evaluated": 0, "alpha_culled": 0})  # type: ignore[return-value]
    marching = marching_arrays(origins, directions, binaries, aabbs, near_planes, far_planes, step_size, cone_angle)
    cap = np.iinfo(np.int64).max if max_samples_per_ray is None else max(max_samples_per_ray, 0)
    scalars = (network_arrays(network), kept_rule(early_stop_eps, alpha_threshold))
    kernel = march_cull_kernel(features, prefetch)
    n_chunks = -(-n_rays // CHUNK_RAYS)
    chunks = np.arange(n_chunks, dtype=np.int64)
    capacity = CHUNK_RAYS * max(1, math.ceil(min(expected_kept_per_ray, cap)))  # no ray keeps more than its cap
    scratch = _packed(n_chunks * capacity, widths)
    kept, evaluated, alpha_culled = (np.zeros(n_rays, dtype=np.int64) for _ in range(3))
    with PARALLEL_KERNELS:
        kernel(
            chunks, chunks * capacity, np.full(n_chunks, capacity, dtype=np.int64), marching, cap, *scalars,
            np.float64(optical_depth_cap), *(part.numpy() for part in scratch), kept, evaluated, alpha_culled,
        )  # fmt: skip
        per_chunk = np.add.reduceat(kept, chunks * CHUNK_RAYS)
        targets = np.concatenate([[0], np.cumsum(per_chunk)[:-1]]).astype(np.int64)
        packed = _packed(int(per_chunk.sum()), widths)
        overflow = per_chunk > capacity
        if overflow.any():  # marched again into place: the same walk keeps the same samples
            kernel(
                chunks[overflow], targets[overflow], per_chunk[overflow], marching, cap, *scalars,
                np.float64(optical_depth_cap), *(part.numpy() for part in packed), kept, evaluated, alpha_culled,
            )  # fmt: skip
        sources = np.where(overflow, -1, chunks * capacity)
        _pack_chunks(
            sources, per_chunk, targets, *(part.numpy() for part in scratch), tuple(part.numpy() for part in packed)
        )
    counts = {"evaluated": int(evaluated.sum()), "alpha_culled": int(alpha_culled.sum())}
    return (*packed, counts)  # type: ignore[return-value]


def _packed(rows: int, widths: Tuple[int, int]) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Uninitialised ``ray_indices (int64), t_starts, t_ends (float32)`` of ``rows``, ``encodings`` and ``heads``
    ``(rows, widths[0 or 1])``."""
    return (
        torch.empty(rows, dtype=torch.int64),
        torch.empty(rows, dtype=torch.float32),
        torch.empty(rows, dtype=torch.float32),
        torch.empty(rows, widths[0], dtype=torch.float32),
        torch.empty(rows, widths[1], dtype=torch.float32),
    )
