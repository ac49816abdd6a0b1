"""Pure-PyTorch ops of coarse-to-fine proposal sampling, on padded rays.

Every ray carries the same number of intervals, described by sorted *edges* ``(n_rays, k + 1)`` in a
normalised spacing ``u in [0, 1]`` between the ray's near and far distance; interval ``j`` of a ray is
``[edges[:, j], edges[:, j + 1]]``. The ops run on any device (``torch.searchsorted`` is native on
CPU, CUDA and MPS) and are the reference the tests hold against dense numerical computations.

- :func:`spacing_to_distance`: ``u`` -> distance, linear or linear-then-disparity ("lindisp": uniform in
  distance up to 1 scene unit, uniform in inverse distance beyond, so the far field of an unbounded
  scene gets a fair share of samples);
- :func:`uniform_edges`: the first round's edges, optionally jittered;
- :func:`resample_edges`: inverse-transform sampling of a piecewise-constant PDF (the next round's edges);
- :func:`weights_from_density`: volume-rendering weights ``T_j (1 - exp(-sigma_j dt_j))`` in fp32;
- :func:`outer_weights` / :func:`interlevel_loss`: the proposal loss of mip-NeRF 360 (eq. 13), which
  trains a proposal round to upper-bound the next round's weights;
- :func:`distortion_loss`: mip-NeRF 360's distortion loss (eq. 15), which gathers each ray's weight into
  as short a stretch of the normalised spacing as it can (it removes floaters of unbounded captures).
"""

from __future__ import annotations

from typing import Literal, Optional

import torch
from jaxtyping import Float
from torch import Tensor

from nerfstudio_accel.ops.precision import exclusive_cumsum

Spacing = Literal["linear", "lindisp"]


def _lindisp(t: Tensor) -> Tensor:
    """Distance ``t >= 0`` -> ``s in [0, 1)``: ``t / 2`` below 1, ``1 - 1 / (2 t)`` above (continuous at 1)."""
    return torch.where(t < 1.0, 0.5 * t, 1.0 - 0.5 / t.clamp(min=1.0))


def _lindisp_inverse(s: Tensor) -> Tensor:
    return torch.where(s < 0.5, 2.0 * s, 0.5 / (1.0 - s).clamp(min=1e-12))


def spacing_to_distance(
    u: Float[Tensor, "n_rays k"], near: Float[Tensor, "n_rays 1"], far: Float[Tensor, "n_rays 1"], spacing: Spacing
) -> Float[Tensor, "n_rays k"]:
    """Distances along the ray of normalised spacing values ``u in [0, 1]`` (0 at ``near``, 1 at ``far``)."""
    if spacing == "linear":
        return near + u * (far - near)
    s_near, s_far = _lindisp(near), _lindisp(far)
    return _lindisp_inverse(s_near + u * (s_far - s_near))


def uniform_edges(
    n_rays: int,
    n_intervals: int,
    stratified: bool,
    device: torch.device,
    generator: Optional[torch.Generator] = None,
) -> Float[Tensor, "n_rays k1"]:
    """``n_intervals + 1`` edges evenly spaced over ``[0, 1]``; ``stratified`` moves each interior edge
    between its neighbouring interval centres by one random fraction per ray (endpoints stay 0 and 1), drawn from
    ``generator`` (None: the default one)."""
    edges = torch.linspace(0.0, 1.0, n_intervals + 1, device=device).expand(n_rays, -1)
    if not stratified:
        return edges.contiguous()
    centers = 0.5 * (edges[:, 1:] + edges[:, :-1])
    interior = centers[:, :-1] + (centers[:, 1:] - centers[:, :-1]) * torch.rand(
        n_rays, 1, device=device, generator=generator
    )
    return torch.cat([edges[:, :1], interior, edges[:, -1:]], dim=-1)


def resample_edges(
    edges: Float[Tensor, "n_rays k1"],
    weights: Float[Tensor, "n_rays k"],
    n_intervals: int,
    stratified: bool,
    padding: float = 0.01,
    generator: Optional[torch.Generator] = None,
) -> Float[Tensor, "n_rays m1"]:
    """``n_intervals + 1`` sorted edges drawn by inverse-transform sampling from the piecewise-constant PDF
    that puts mass ``weights + padding`` uniformly on each interval of ``edges``.

    The ``j``-th new edge is the CDF's inverse at ``(j + xi) / (n_intervals + 1)``: ``xi = 1/2`` for a
    deterministic render, one uniform draw per ray when ``stratified`` (from ``generator``). The padding keeps some samples
    in empty space, where the proposal may yet find something. Not differentiable (no graph is needed:
    the next round learns through the interlevel loss).
    """
    with torch.no_grad():
        n_rays = edges.shape[0]
        mass = weights.float().clamp(min=0.0) + padding
        cdf = torch.cumsum(mass, dim=-1)
        cdf = torch.cat([torch.zeros_like(cdf[:, :1]), cdf / cdf[:, -1:]], dim=-1).clamp(max=1.0)
        offset = (
            torch.rand(n_rays, 1, device=edges.device, generator=generator)
            if stratified
            else torch.full((n_rays, 1), 0.5, device=edges.device)
        )
        u = (torch.arange(n_intervals + 1, device=edges.device, dtype=cdf.dtype) + offset) / (n_intervals + 1)
        above = torch.searchsorted(cdf, u.contiguous(), right=True).clamp(1, cdf.shape[-1] - 1)
        below = above - 1
        cdf_below, cdf_above = cdf.gather(1, below), cdf.gather(1, above)
        edge_below, edge_above = edges.float().gather(1, below), edges.float().gather(1, above)
        fraction = ((u - cdf_below) / (cdf_above - cdf_below).clamp(min=1e-12)).clamp(0.0, 1.0)
        return edge_below + fraction * (edge_above - edge_below)


def weights_from_density(
    distances: Float[Tensor, "n_rays k1"], densities: Float[Tensor, "n_rays k"]
) -> Float[Tensor, "n_rays k"]:
    """Rendering weights of the intervals between consecutive ``distances``: ``T_j * (1 - exp(-sigma_j dt_j))``
    with ``T_j = exp(-sum_{i<j} sigma_i dt_i)``, in fp32 with autocast off."""
    with torch.autocast(device_type=densities.device.type, enabled=False):
        optical_depth = densities.float() * (distances[:, 1:] - distances[:, :-1]).float()
        return torch.exp(-exclusive_cumsum(optical_depth)) * (1.0 - torch.exp(-optical_depth))


def outer_weights(
    query_edges: Float[Tensor, "n_rays m1"], edges: Float[Tensor, "n_rays k1"], weights: Float[Tensor, "n_rays k"]
) -> Float[Tensor, "n_rays m"]:
    """For each query interval, the summed ``weights`` of the intervals of ``edges`` that overlap it
    (open overlap: ``edges_j < b`` and ``edges_{j+1} > a`` for query ``[a, b]``)."""
    cumulative = torch.cat([torch.zeros_like(weights[:, :1]), torch.cumsum(weights, dim=-1)], dim=-1)
    n_src = weights.shape[-1]
    query_edges = query_edges.contiguous()
    first = (torch.searchsorted(edges.contiguous(), query_edges[:, :-1].contiguous(), right=True) - 1).clamp(0, n_src)
    end = torch.searchsorted(edges.contiguous(), query_edges[:, 1:].contiguous(), right=False).clamp(0, n_src)
    end = torch.maximum(end, first)
    return cumulative.gather(1, end) - cumulative.gather(1, first)


def interlevel_loss(
    edges: Float[Tensor, "n_rays m1"],
    weights: Float[Tensor, "n_rays m"],
    proposal_edges: Float[Tensor, "n_rays k1"],
    proposal_weights: Float[Tensor, "n_rays k"],
    eps: float = 1e-7,
) -> Float[Tensor, ""]:
    """Mean over rays and intervals of ``max(w - w_outer, 0)^2 / (w + eps)``: how far the proposal's
    weights, summed over each interval's overlap, fall short of bounding the (detached) weights ``w``."""
    weights = weights.detach().float()
    bound = outer_weights(edges.detach(), proposal_edges.detach(), proposal_weights.float())
    return torch.mean(torch.clamp(weights - bound, min=0.0) ** 2 / (weights + eps))


def distortion_loss(edges: Float[Tensor, "n_rays m1"], weights: Float[Tensor, "n_rays m"]) -> Float[Tensor, ""]:
    """Mean over rays of ``sum_ij w_i w_j |c_i - c_j| + 1/3 sum_i w_i^2 (e_{i+1} - e_i)``, with ``c`` the
    interval centres in the normalised spacing ``edges`` (detached; the gradient reaches ``weights``).
    The double sum is ``2 sum_i w_i (c_i W_i - S_i)`` over sorted centres, with ``W_i`` and ``S_i`` the
    exclusive prefix sums of ``w`` and ``w c``: linear in the samples per ray."""
    edges = edges.detach().float()
    weights = weights.float()
    centres = 0.5 * (edges[:, 1:] + edges[:, :-1])
    weight_before, moment_before = exclusive_cumsum(weights), exclusive_cumsum(weights * centres)
    pairwise = 2.0 * torch.sum(weights * (centres * weight_before - moment_before), dim=-1)
    own = torch.sum(weights**2 * (edges[:, 1:] - edges[:, :-1]), dim=-1) / 3.0
    return torch.mean(pairwise + own)
