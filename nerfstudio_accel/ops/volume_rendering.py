"""Volume rendering of packed samples: compositing weights, the visibility culling keeps, sums along rays.

Packed samples are ``n_samples`` intervals ``[t_starts, t_ends]`` sorted by ray (``ray_indices``, int64).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from nerfstudio_accel.kernels.density_network import DensityNetwork
from nerfstudio_accel.ops import _torch_impl, precision


def render_weight_from_density(
    t_starts: Float[Tensor, " n_samples"],
    t_ends: Float[Tensor, " n_samples"],
    sigmas: Float[Tensor, " n_samples"],
    ray_indices: Int[Tensor, " n_samples"],
    n_rays: int,
    backend: str = "torch",
) -> Float[Tensor, " n_samples"]:
    """Compositing weights ``w_i = T_i * alpha_i`` of packed samples (differentiable in ``sigmas``), with
    ``T_i = exp(-sum_{j<i} sigma_j dt_j)`` and ``alpha_i = 1 - exp(-sigma_i dt_i)``.

    ``backend``: ``nerfacc`` (its CUDA scan), else the torch twin (a float64 running sum, no host sync).

    Example:
        >>> weights = render_weight_from_density(
        ...     torch.tensor([0.0, 1.0, 0.0]), torch.tensor([1.0, 2.0, 1.0]), torch.tensor([0.6931472] * 3),
        ...     torch.tensor([0, 0, 1]), n_rays=2,
        ... )
        >>> [round(w, 4) for w in weights.tolist()]
        [0.5, 0.25, 0.5]
    """
    if backend == "nerfacc":
        from nerfacc.volrend import render_weight_from_density as nerfacc_weights

        return nerfacc_weights(t_starts, t_ends, sigmas, ray_indices=ray_indices, n_rays=n_rays)[0]
    return _torch_impl.render_weight_from_density(t_starts, t_ends, sigmas, ray_indices, n_rays)


def render_visibility_from_density(
    t_starts: Float[Tensor, " n_samples"],
    t_ends: Float[Tensor, " n_samples"],
    sigmas: Float[Tensor, " n_samples"],
    ray_indices: Int[Tensor, " n_samples"],
    n_rays: int,
    early_stop_eps: float = 1e-4,
    alpha_threshold: float = 0.0,
    backend: str = "torch",
) -> Bool[Tensor, " n_samples"]:
    """The samples worth shading: transmittance before them ``>= early_stop_eps`` and opacity
    ``>= alpha_threshold``.

    ``backend``: ``nerfacc`` (its CUDA scan), else the torch twin.

    Example:
        >>> render_visibility_from_density(
        ...     torch.tensor([0.0, 1.0, 2.0]), torch.tensor([1.0, 2.0, 3.0]), torch.tensor([20.0, 1.0, 1.0]),
        ...     torch.tensor([0, 0, 0]), n_rays=1,
        ... ).tolist()
        [True, False, False]
    """
    if backend == "nerfacc":
        from nerfacc.volrend import render_visibility_from_density as nerfacc_visibility

        return nerfacc_visibility(
            t_starts,
            t_ends,
            sigmas,
            ray_indices=ray_indices,
            n_rays=n_rays,
            early_stop_eps=early_stop_eps,
            alpha_thre=alpha_threshold,
        )
    return _torch_impl.render_visibility_from_density(
        t_starts, t_ends, sigmas, ray_indices, n_rays, early_stop_eps=early_stop_eps, alpha_threshold=alpha_threshold
    )


def visibility_with_density_network(
    network: DensityNetwork,
    ray_indices: Int[Tensor, " n_samples"],
    t_starts: Float[Tensor, " n_samples"],
    t_ends: Float[Tensor, " n_samples"],
    origins: Float[Tensor, "n_rays 3"],
    directions: Float[Tensor, "n_rays 3"],
    early_stop_eps: float,
    alpha_threshold: float,
    backend: str,
) -> Optional[
    Tuple[Bool[Tensor, " n_samples"], Float[Tensor, "n_samples enc"], Float[Tensor, "n_samples heads"], Dict[str, int]]
]:
    """:func:`render_visibility_from_density` of ray-sorted candidates at the midpoints of their intervals along
    ``origins + t directions``, with the densities computed in the same pass by ``network``, reading no candidate
    behind a ray's early stop: the ``kernel`` backend on the CPU
    (:func:`~nerfstudio_accel.kernels.culling_numba.cull_fused`: the visible samples, ``(n_samples, enc)`` and
    ``(n_samples, heads)`` buffers whose visible rows hold their encodings and density heads (``network``'s head
    rows), and the counts ``evaluated`` and ``alpha_culled``). None on
    other backends and devices: the caller evaluates the densities and calls
    :func:`render_visibility_from_density`."""
    if backend != "kernel" or origins.device.type != "cpu":
        return None
    from nerfstudio_accel.kernels.culling_numba import cull_fused

    return cull_fused(
        network,
        ray_indices,
        t_starts,
        t_ends,
        origins,
        directions,
        alpha_threshold,
        early_stop_eps,
        precision.OPTICAL_DEPTH_CAP,
    )


def composite_along_rays(
    t_starts: Float[Tensor, " n_samples"],
    t_ends: Float[Tensor, " n_samples"],
    sigmas: Float[Tensor, " n_samples"],
    colors: Float[Tensor, "n_samples 3"],
    ray_indices: Int[Tensor, " n_samples"],
    n_rays: int,
    backend: str = "torch",
) -> Tuple[
    Float[Tensor, " n_samples"], Float[Tensor, "n_rays 1"], Float[Tensor, "n_rays 3"], Float[Tensor, "n_rays 1"]
]:
    """The weights of :func:`render_weight_from_density` ``(n_samples,)`` and per ray ``sum w`` (opacity),
    ``sum w c`` and ``sum w t_mid`` with ``t_mid`` the interval's midpoint (differentiable in ``sigmas`` and
    ``colors``).

    ``backend``: ``kernel`` on float32 CPU tensors whose intervals have no graph is one numba kernel each way
    (:func:`~nerfstudio_accel.kernels.compositing_numba.composite_along_rays`); ``nerfacc`` scans the weights
    with its CUDA op; otherwise the torch twin.

    Example:
        >>> weights, opacity, rgb, depth = composite_along_rays(
        ...     torch.tensor([0.0, 1.0]), torch.tensor([1.0, 2.0]), torch.tensor([0.6931472] * 2),
        ...     torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), torch.tensor([0, 0]), n_rays=1,
        ... )
        >>> [round(v, 4) for v in rgb[0].tolist()], round(float(depth[0]), 4)
        ([0.5, 0.25, 0.0], 0.625)
    """
    if backend == "kernel" and fused_compositing_takes(t_starts, t_ends, sigmas, colors):
        from nerfstudio_accel.kernels.compositing_numba import composite_along_rays as fused

        return fused(t_starts, t_ends, sigmas, colors, ray_indices, n_rays, precision.OPTICAL_DEPTH_CAP)
    if backend == "nerfacc":
        weights = render_weight_from_density(t_starts, t_ends, sigmas, ray_indices, n_rays, backend)
        return (weights, *_torch_impl.ray_sums(weights, colors, t_starts, t_ends, ray_indices, n_rays))
    return _torch_impl.composite_along_rays(t_starts, t_ends, sigmas, colors, ray_indices, n_rays)


def fused_compositing_takes(
    t_starts: Float[Tensor, " n_samples"],
    t_ends: Float[Tensor, " n_samples"],
    sigmas: Float[Tensor, " n_samples"],
    colors: Float[Tensor, "n_samples 3"],
) -> bool:
    """Whether the CPU kernel composites these tensors: all float32 on the CPU, the intervals without a graph
    (it gives no gradient for them)."""
    tensors = (t_starts, t_ends, sigmas, colors)
    return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors) and not (
        t_starts.requires_grad or t_ends.requires_grad
    )


def accumulate_along_rays(
    weights: Float[Tensor, " n_samples"],
    values: Optional[Float[Tensor, "n_samples channels"]],
    ray_indices: Int[Tensor, " n_samples"],
    n_rays: int,
) -> Float[Tensor, "n_rays channels"]:
    """``sum_i w_i v_i`` per ray, ``(n_rays, channels)``; ``values=None`` sums the weights (opacity, one channel).

    One implementation for every backend, one ``index_add`` (nerfacc's ``accumulate_along_rays`` is the same).

    Example:
        >>> accumulate_along_rays(torch.tensor([0.5, 0.25, 1.0]), None, torch.tensor([0, 0, 2]), n_rays=3).tolist()
        [[0.75], [0.0], [1.0]]
    """
    return _torch_impl.accumulate_along_rays(weights, values, ray_indices, n_rays)
