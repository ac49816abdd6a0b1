"""The culling density pass: which marched candidates a ray can show, from the field's densities at them.

A candidate is kept when the transmittance before it is at least ``early_stop_eps`` and its opacity at least an
alpha threshold. The threshold may differ per candidate: the cells of a split scene each cap it by their own
grid's occupancy, while early stopping runs over a whole ray, across every cell it crosses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple, Union

import torch
from jaxtyping import Float, Int
from torch import Tensor

from nerfstudio_accel.ops.volume_rendering import render_visibility_from_density, visibility_with_density_network
from nerfstudio_accel.sampling.base import DensityFn, DensityRecord
from nerfstudio_accel.sampling.front_to_back_culling import densities_front_to_back, rows_in_call_order

DENSITY_CHUNK = {"cpu": 1 << 16}
"""Points per no-grad density evaluation (grid updates and culling) by device type, bounding peak memory;
other devices take :data:`DENSITY_CHUNK_ACCELERATOR` (~0.5 GB of activations for accel-ngp's field):
each chunk is a few hundred kernel launches."""
DENSITY_CHUNK_ACCELERATOR = 1 << 20


@dataclass
class ThresholdPerCandidate:
    """An opacity threshold per candidate (a split scene's cells each cap their own)."""

    values: Float[Tensor, " n_samples"]
    """On the candidates' device; 0 culls nothing by opacity."""
    least: float
    """The least of them, held on the host (a lower bound will do: the record then holds a few more rows)."""


AlphaThreshold = Union[float, ThresholdPerCandidate]
"""One opacity threshold for every candidate, or one per candidate."""


def least_visible_density(
    alpha_threshold: float, t_starts: Float[Tensor, " n"], t_ends: Float[Tensor, " n"]
) -> Float[Tensor, ""]:
    """Half the least density with which any of these intervals reaches ``alpha_threshold`` opacity,
    ``-log(1 - threshold) / max(t_end - t_start) / 2``: a sample under it is culled by opacity whatever its
    interval (the half leaves room for float rounding)."""
    return -math.log1p(-alpha_threshold) / (t_ends - t_starts).max() / 2


def evaluate_in_chunks(
    fn: Callable[[Float[Tensor, "n 3"]], Tensor], points: Float[Tensor, "n 3"], chunk: Optional[int] = None
) -> Tensor:
    """``fn`` (e.g. a density function, ``(n, 3) -> (n, k)``) over ``points`` in slices of ``chunk`` (by
    default :data:`DENSITY_CHUNK` for the points' device), in order (no-grad callers: memory stays bounded)."""
    if chunk is None:
        chunk = DENSITY_CHUNK.get(points.device.type, DENSITY_CHUNK_ACCELERATOR)
    if points.shape[0] <= chunk:
        return fn(points)
    return torch.cat([fn(points[i : i + chunk]) for i in range(0, points.shape[0], chunk)])


@torch.no_grad()
def cull_marched(
    ray_indices: Int[Tensor, " n"],
    t_starts: Float[Tensor, " n"],
    t_ends: Float[Tensor, " n"],
    origins: Float[Tensor, "n_rays 3"],
    directions: Float[Tensor, "n_rays 3"],
    density_fn: DensityFn,
    alpha_threshold: AlphaThreshold,
    early_stop_eps: float,
    first_samples: int,
    backend: str,
) -> Tuple[Int[Tensor, " k"], Dict[str, Union[int, Tensor]]]:
    """The kept candidates' indices among ray-sorted, front-to-back packed candidates, and the pass's counts
    (``candidates``, ``evaluated``, ``kept``, ``alpha_culled``; a tensor where reading it would sync).

    ``first_samples`` > 0 reads densities in front-to-back rounds (:func:`densities_front_to_back`); ``backend``
    scans the visibility. A :class:`~nerfstudio_accel.sampling.base.DensityRecord` is first told the
    :func:`least_visible_density` (of the smallest threshold), then the kept candidates' rows in its call order."""
    per_candidate = isinstance(alpha_threshold, ThresholdPerCandidate)
    least = alpha_threshold.least if per_candidate else alpha_threshold
    network = density_fn.density_network() if isinstance(density_fn, DensityRecord) and not per_candidate else None
    if network is not None:
        fused = visibility_with_density_network(
            network, ray_indices, t_starts, t_ends, origins, directions, early_stop_eps, least, backend
        )
        if fused is not None:
            return _kept_by_fused_pass(fused, density_fn, t_starts.numel())
    if isinstance(density_fn, DensityRecord) and 0.0 < least < 1.0:  # it holds rows that can be kept
        density_fn.drop_below(least_visible_density(least, t_starts, t_ends))
    positions = origins.float()[ray_indices] + directions.float()[ray_indices] * (0.5 * (t_starts + t_ends))[:, None]
    densities, evaluated = densities_front_to_back(
        lambda points: evaluate_in_chunks(density_fn, points).reshape(-1).float(),
        positions,
        ray_indices,
        t_starts,
        t_ends,
        origins.shape[0],
        early_stop_eps,
        first_samples,
    )
    thresholds = alpha_threshold.values if per_candidate else alpha_threshold
    visible = render_visibility_from_density(
        t_starts,
        t_ends,
        densities,
        ray_indices,
        origins.shape[0],
        early_stop_eps,
        0.0 if per_candidate else least,
        backend,
    )
    alphas = 1.0 - torch.exp(-densities * (t_ends - t_starts))
    if per_candidate:  # a threshold of 0 keeps what the transmittance keeps, as the scalar 0 does
        visible &= (alphas >= thresholds) | (thresholds <= 0.0)
    if evaluated is not None:  # kept samples are read ones by construction, whatever the sums' rounding
        visible &= torch.zeros_like(visible).index_fill_(0, evaluated, True)
    keep = torch.nonzero(visible).reshape(-1)
    read = slice(None) if evaluated is None else evaluated
    counts = {
        "candidates": t_starts.numel(),
        "evaluated": t_starts.numel() if evaluated is None else evaluated.numel(),
        "kept": keep.numel(),
        "alpha_culled": (alphas[read] < (thresholds[read] if per_candidate else thresholds)).sum(),
    }
    if isinstance(density_fn, DensityRecord):
        density_fn.keep(rows_in_call_order(keep, evaluated, t_starts.numel()))
    return keep, counts


def _kept_by_fused_pass(
    fused: Tuple[Tensor, Tensor, Tensor, Dict[str, int]], record: DensityRecord, candidates: int
) -> Tuple[Int[Tensor, " k"], Dict[str, Union[int, Tensor]]]:
    """:func:`cull_marched`'s result from a fused pass's visible candidates, kept encodings and density heads and
    counts, the record handed the kept samples' encodings and heads."""
    visible, encodings, heads, counts = fused
    keep = torch.nonzero(visible).reshape(-1)
    record.keep_encoded(encodings[keep], heads[keep])
    return keep, {"candidates": candidates, "kept": keep.numel(), **counts}
