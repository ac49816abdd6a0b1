"""The culling pass of a split scene on a rank that holds one block: the samples the one-process
:class:`~nerfstudio_accel.spatial.block_sampler.BlockSampler` keeps in its cell, from that block's densities only.

A ray's per-ray cap and its early stopping run over every cell it crosses. A rank knows only its own candidates, so
it shares two small per-ray summaries with the other ranks (:func:`~nerfstudio_accel.distributed.gather_rows`):
- before its densities are read, where the block's candidates start on the ray and how many there are, from which
  each rank counts the candidates in front of its own;
- after, the optical depth of its capped candidates, from which each rank has the ray's transmittance where the
  ray enters its cell.

A candidate is then kept as in :func:`~nerfstudio_accel.sampling.culling_pass.cull_marched` over the merged
candidates: transmittance before it at least ``early_stop_eps`` and opacity at least its cell's threshold. The
optical depth is summed per block and then over blocks (in float64 where the device has it), so it differs from
the one-process sum only in rounding. A :class:`~nerfstudio_accel.sampling.base.DensityRecord` is told the least
visible density and the kept rows, as the one-process pass tells it.
"""

from __future__ import annotations

from typing import Dict, Tuple, Union

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from nerfstudio_accel import distributed
from nerfstudio_accel.ops import precision
from nerfstudio_accel.ops.packed_scan import first_distance_of_each_ray, packed_exclusive_sum, places_in_rays
from nerfstudio_accel.sampling.base import DensityFn, DensityRecord
from nerfstudio_accel.sampling.culling_pass import evaluate_in_chunks, least_visible_density
from nerfstudio_accel.sampling.occupancy import MarchingOptions


def blocks_in_front(entries: Float[Tensor, "k n"], own: Float[Tensor, " n"]) -> Bool[Tensor, "k n"]:
    """Which blocks each ray crosses before the own block (cells are disjoint, so the entries of blocks with
    candidates differ; a block without any, at ``inf``, is never in front)."""
    return entries < own[None, :]


@torch.no_grad()
def cull_own_block(
    ray_indices: Int[Tensor, " m"],
    t_starts: Float[Tensor, " m"],
    t_ends: Float[Tensor, " m"],
    origins: Float[Tensor, "n_rays 3"],
    directions: Float[Tensor, "n_rays 3"],
    density_fn: DensityFn,
    alpha_threshold: float,
    marching: MarchingOptions,
) -> Tuple[Int[Tensor, " kept"], Dict[str, Union[int, Tensor]]]:
    """The kept candidates' indices among this block's ray-sorted, front-to-back candidates of rays that every
    rank passes alike, and the pass's counts (``candidates``, ``evaluated``, ``kept``, ``alpha_culled``).
    ``alpha_threshold``: this block's (its grid's effective threshold). Two all-gathers of 2 and 1 floats per
    ray; every rank must call it for the same rays."""
    n_rays, device = origins.shape[0], origins.device
    candidates = t_starts.numel()
    entry = first_distance_of_each_ray(ray_indices, t_starts, n_rays)
    counts = torch.bincount(ray_indices, minlength=n_rays).float()  # exact up to 2^24 candidates a ray
    summaries = torch.stack(distributed.gather_rows(torch.stack([entry, counts], dim=-1)))  # (k, n, 2)
    front = blocks_in_front(summaries[:, :, 0], entry)
    if marching.max_samples_per_ray is not None and candidates > 0:
        before = (summaries[:, :, 1] * front).sum(dim=0).long()
        capped = torch.nonzero(before[ray_indices] + places_in_rays(ray_indices) < marching.max_samples_per_ray)
        capped = capped.reshape(-1)
        ray_indices, t_starts, t_ends = ray_indices[capped], t_starts[capped], t_ends[capped]
    else:
        capped = torch.arange(candidates, device=device)
    positions = origins.float()[ray_indices] + directions.float()[ray_indices] * (0.5 * (t_starts + t_ends))[:, None]
    record = density_fn if isinstance(density_fn, DensityRecord) else None
    if ray_indices.numel() == 0:  # nothing to read here, but the other ranks still wait for this rank's depths
        densities = positions.new_zeros(0)
    else:
        if record is not None and 0.0 < alpha_threshold < 1.0:  # it holds only rows that can be kept
            record.drop_below(least_visible_density(alpha_threshold, t_starts, t_ends))
        densities = evaluate_in_chunks(density_fn, positions).reshape(-1).float()
    sigmas_dt = densities * (t_ends - t_starts)
    depth_dtype = torch.float64 if precision.supports_float64(device) else torch.float32
    depth = precision.capped_optical_depth(sigmas_dt).to(depth_dtype)
    through_block = torch.zeros(n_rays, dtype=depth_dtype, device=device).index_add_(0, ray_indices, depth)
    depths = torch.stack(distributed.gather_rows(through_block[:, None]))[:, :, 0]  # (k, n)
    depth_at_entry = (depths * front).sum(dim=0)
    transmittance = torch.exp(-(depth_at_entry[ray_indices] + packed_exclusive_sum(depth, ray_indices)))
    alphas = 1.0 - torch.exp(-sigmas_dt)
    visible = transmittance >= marching.early_stop_eps
    if alpha_threshold > 0.0:
        visible &= alphas >= alpha_threshold
    kept_rows = torch.nonzero(visible).reshape(-1)  # among the rows read, in the order they were read
    keep = capped[kept_rows]
    if record is not None and ray_indices.numel() > 0:
        record.keep(kept_rows)
    counts_out: Dict[str, Union[int, Tensor]] = {
        "candidates": candidates,
        "evaluated": int(capped.numel()),
        "kept": int(keep.numel()),
        "alpha_culled": (alphas < alpha_threshold).sum(),
    }
    return keep, counts_out
