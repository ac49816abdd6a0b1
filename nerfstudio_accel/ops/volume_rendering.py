"""Volume rendering of packed samples: compositing weights, the visibility culling keeps, sums along rays.

Packed samples are ``n_samples`` intervals ``[t_starts, t_ends]`` sorted by ray (``ray_indices``, int64).
"""

from __future__ import annotations

from typing import Optional

from jaxtyping import Bool, Float, Int
from torch import Tensor

from nerfstudio_accel.ops import _torch_impl


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
