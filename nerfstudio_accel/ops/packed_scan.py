"""Scans within the rays of packed, ray-sorted samples."""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from nerfstudio_accel.ops import _torch_impl


def packed_exclusive_sum(
    values: Float[Tensor, " n_samples"], ray_indices: Int[Tensor, " n_samples"]
) -> Float[Tensor, " n_samples"]:
    """Per-ray exclusive prefix sum of packed, ray-sorted, finite values (differentiable), with no host sync.

    One implementation for every backend, a float64 running sum (:mod:`~nerfstudio_accel.ops.precision`; nerfacc's
    ``exclusive_sum`` adds in the values' float32).

    Example:
        >>> packed_exclusive_sum(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([0, 0, 1, 1])).tolist()
        [0.0, 1.0, 0.0, 3.0]
    """
    return _torch_impl.packed_exclusive_sum(values, ray_indices)


def places_in_rays(ray_indices: Int[Tensor, " n_samples"]) -> Int[Tensor, " n_samples"]:
    """Each sample's place on its ray (0 for the first) in a packed, ray-sorted batch.

    Example:
        >>> places_in_rays(torch.tensor([0, 0, 0, 2, 2])).tolist()
        [0, 1, 2, 0, 1]
    """
    start_of_ray = torch.searchsorted(ray_indices, ray_indices, right=False)
    return torch.arange(ray_indices.numel(), device=ray_indices.device) - start_of_ray


def first_distance_of_each_ray(
    ray_indices: Int[Tensor, " n_samples"], t_starts: Float[Tensor, " n_samples"], n_rays: int
) -> Float[Tensor, " n_rays"]:
    """The least ``t_starts`` of each ray's samples, ``inf`` for a ray without any.

    Example:
        >>> first_distance_of_each_ray(torch.tensor([0, 0, 2]), torch.tensor([0.5, 0.7, 1.0]), 3).tolist()
        [0.5, inf, 1.0]
    """
    entry = torch.full((n_rays,), float("inf"), device=t_starts.device)
    return entry.scatter_reduce(0, ray_indices, t_starts.float(), reduce="amin")


def first_samples_of_each_ray(ray_indices: Int[Tensor, " n_samples"], cap: int) -> Bool[Tensor, " n_samples"]:
    """Mask of the first ``cap`` samples of each ray in a packed, ray-sorted batch (one torch implementation).

    Example:
        >>> first_samples_of_each_ray(torch.tensor([0, 0, 0, 2, 2]), cap=2).tolist()
        [True, True, False, True, True]
    """
    return places_in_rays(ray_indices) < cap
