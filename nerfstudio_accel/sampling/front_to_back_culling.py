"""Front-to-back culling: the culling density pass reads each ray's first candidates, and the rest only of the
rays still transparent enough to show them.

A marched candidate is kept when the transmittance before it is at least ``early_stop_eps`` (and its opacity at
least the alpha threshold). Transmittance only falls along a ray, so once a ray's first candidates have brought
it under ``early_stop_eps``, none of its later candidates can be kept and their densities are not needed.
Behind a surface that has become opaque, a ray can still cross many occupied cells (a solid object's inside,
its far side). The skipped candidates get density 0. This cannot make them visible: the transmittance before
each is at most the ray's transmittance after the candidates read, already under the threshold. So the kept
samples are those of a single pass over every candidate.
"""

from __future__ import annotations

from typing import Callable, List, Mapping, Optional, Tuple, Union

import torch
from jaxtyping import Float, Int
from torch import Tensor

from nerfstudio_accel.ops import precision
from nerfstudio_accel.ops.packed_scan import places_in_rays

AUTO_FIRST_SAMPLES = 32
"""The first round's length where the rounds are chosen automatically (:func:`chosen_first_samples`)."""
AUTO_CANDIDATES_PER_KEPT = 4.0
"""Automatic rounds read in rounds while the last training batch marched more than this many candidates per
kept sample: lego on CPU measured 6 at 400x400, where rounds of 32 cut the pass by about a quarter, and 2.2 at
100x100, where they cost a little more than they save (docs/occupancy_sampler.md)."""

STOPPED_MARGIN = 1e-3
"""A ray counts as stopped when its transmittance is under ``early_stop_eps * (1 - STOPPED_MARGIN)``: rays this
close to the threshold, where the two sums' rounding could disagree, are read in full."""


def densities_front_to_back(
    evaluate: Callable[[Float[Tensor, "m 3"]], Float[Tensor, " m"]],
    positions: Float[Tensor, "n 3"],
    ray_indices: Int[Tensor, " n"],
    t_starts: Float[Tensor, " n"],
    t_ends: Float[Tensor, " n"],
    n_rays: int,
    early_stop_eps: float,
    first_samples: int,
) -> Tuple[Float[Tensor, " n"], Optional[Int[Tensor, " m"]]]:
    """Density of every packed, ray-sorted candidate, 0 where a candidate cannot be kept and was not evaluated,
    and the candidates ``evaluate`` saw, in the order it saw them (None: all of them, in order).

    ``evaluate`` maps points to densities. It is called in rounds of doubling length along the rays: each ray's
    first ``first_samples`` candidates, then the next ``first_samples``, the next ``2 * first_samples``, and so
    on, each round only for the rays whose transmittance is still at least ``early_stop_eps``.
    ``first_samples`` 0: one call over every candidate."""
    n = ray_indices.shape[0]
    if first_samples <= 0 or early_stop_eps <= 0.0 or n == 0:
        return evaluate(positions), None
    depth_dtype = torch.float64 if precision.supports_float64(positions.device) else torch.float32
    rank = places_in_rays(ray_indices)
    densities = torch.zeros(n, dtype=torch.float32, device=positions.device)
    optical_depth = torch.zeros(n_rays, dtype=depth_dtype, device=positions.device)
    open_rays = torch.ones(n_rays, dtype=torch.bool, device=positions.device)
    rounds: List[Tensor] = []
    low, high = 0, first_samples
    while True:
        in_round = torch.nonzero((rank >= low) & (rank < high) & open_rays[ray_indices]).reshape(-1)
        if in_round.numel() == 0:  # a ray with a later candidate would have one in this round
            break
        round_densities = evaluate(positions[in_round])
        densities[in_round] = round_densities
        rounds.append(in_round)
        depth = round_densities.to(depth_dtype) * (t_ends[in_round] - t_starts[in_round]).to(depth_dtype)
        optical_depth.index_add_(0, ray_indices[in_round], precision.capped_optical_depth(depth))
        open_rays = torch.exp(-optical_depth) >= early_stop_eps * (1.0 - STOPPED_MARGIN)
        low, high = high, 2 * high
    if len(rounds) == 1 and rounds[0].numel() == n:  # one round read every candidate, in order
        return densities, None
    return densities, torch.cat(rounds)


def chosen_first_samples(
    requested: Optional[int], last_counts: Mapping[str, Union[int, Tensor]], device_type: str
) -> int:
    """The culling pass's first round length: ``requested``, or where that is None (automatic), on the CPU,
    :data:`AUTO_FIRST_SAMPLES` while the last training batch's counts (``candidates``, ``kept``; host numbers,
    none at the first batch) exceed :data:`AUTO_CANDIDATES_PER_KEPT` candidates per kept sample, else 0 (one
    pass; always on other devices, where the rounds are not measured). Either way the same samples are kept."""
    if requested is not None:
        return requested
    if device_type != "cpu":
        return 0
    candidates, kept = last_counts.get("candidates"), last_counts.get("kept")
    if not isinstance(candidates, int) or not isinstance(kept, int):
        return 0
    return AUTO_FIRST_SAMPLES if candidates > AUTO_CANDIDATES_PER_KEPT * kept else 0


def rows_in_call_order(
    candidates: Int[Tensor, " k"], evaluated: Optional[Int[Tensor, " m"]], n: int
) -> Int[Tensor, " k"]:
    """Where each of ``candidates`` (evaluated ones, of ``n``) came in the order ``evaluated`` lists them: the
    rows of a record kept call by call (:class:`~nerfstudio_accel.fields.density_pass_record.DensityPassRecord`)."""
    if evaluated is None:
        return candidates
    position = torch.full((n,), -1, dtype=torch.long, device=evaluated.device)
    position[evaluated] = torch.arange(evaluated.numel(), device=evaluated.device)
    return position[candidates]
