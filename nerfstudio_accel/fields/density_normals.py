"""Surface normals from the density's gradient, rendered like colour: what ``ns-export pointcloud`` and
``ns-export poisson`` read as the ``normals`` output (their default ``--normal-method model_output``).

A sample's normal is ``-grad sigma' / |grad sigma'|``, the pre-activation density's gradient with respect to
the world position (density rises into a surface, so the normal points out of it); a ray's normal is the
weight-averaged normal of its samples, renormalised and shaded to ``[0, 1]`` as nerfstudio's nerfacto does,
``(n + 1) / 2``. The gradient is taken with autograd even where the caller runs without grad (ns-export,
ns-viewer), and no graph is kept. The models compute it outside training only, so a training step pays nothing.
"""

from __future__ import annotations

from typing import Callable

import torch
from jaxtyping import Float, Int
from torch import Tensor

from nerfstudio_accel.ops.volume_rendering import accumulate_along_rays


def density_normals(raw_density: Callable[[Tensor], Tensor], positions: Float[Tensor, "n 3"]) -> Float[Tensor, "n 3"]:
    """Unit normals ``-grad sigma' / |grad sigma'|`` at world ``positions``; ``raw_density``: world positions
    ``(n, 3)`` -> pre-activation density ``(n, 1)``. A zero gradient (outside the scene box) gives a zero normal."""
    if positions.shape[0] == 0:
        return positions.new_zeros(0, 3)
    with torch.enable_grad():
        points = positions.detach().float().requires_grad_(True)
        (gradient,) = torch.autograd.grad(raw_density(points).sum(), points)
    return -torch.nn.functional.normalize(gradient, dim=-1)


def rendered_normals(
    raw_density: Callable[[Tensor], Tensor],
    positions: Float[Tensor, "n_samples 3"],
    weights: Float[Tensor, " n_samples"],
    ray_indices: Int[Tensor, " n_samples"],
    n_rays: int,
) -> Float[Tensor, "n_rays 3"]:
    """Each ray's normal: the compositing ``weights`` of its samples (world ``positions``, ray of each in
    ``ray_indices``) over their :func:`density_normals`, renormalised and shaded to ``[0, 1]``
    (``(n + 1) / 2``; a ray without density gets 0.5 grey)."""
    normals = density_normals(raw_density, positions)
    summed = accumulate_along_rays(weights.detach().float(), normals, ray_indices, n_rays)
    return ((torch.nn.functional.normalize(summed, dim=-1) + 1.0) / 2.0).clamp(0.0, 1.0)
