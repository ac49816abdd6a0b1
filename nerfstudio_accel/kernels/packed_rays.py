"""Where each ray's samples start in a packed, ray-sorted batch: the offsets the CPU kernels walk rays by."""

from __future__ import annotations

import torch
from jaxtyping import Int
from torch import Tensor


def ray_starts(ray_indices: Int[Tensor, " n"], n_rays: int) -> Int[Tensor, " n_rays_plus_1"]:
    """``(n_rays + 1,)`` int64 offsets: ray ``r``'s samples are ``ray_starts[r]:ray_starts[r + 1]`` (CPU).

    Example:
        >>> ray_starts(torch.tensor([0, 0, 2]), n_rays=4).tolist()
        [0, 2, 2, 3, 3]
    """
    starts = torch.zeros(n_rays + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(ray_indices, minlength=n_rays), 0, out=starts[1:])
    return starts
