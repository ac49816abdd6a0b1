"""Ray-box intersection."""

from __future__ import annotations

from typing import Tuple

from jaxtyping import Bool, Float
from torch import Tensor

from nerfstudio_accel.kernels import lattice


def ray_aabb_intersect(
    origins: Float[Tensor, "n_rays 3"],
    directions: Float[Tensor, "n_rays 3"],
    aabb: Float[Tensor, "6"],
) -> Tuple[Float[Tensor, " n_rays"], Float[Tensor, " n_rays"], Bool[Tensor, " n_rays"]]:
    """Slab test of rays against one box ``(xmin, ymin, zmin, xmax, ymax, zmax)``: ``t_enter, t_exit, hit``
    (``t_enter`` may be negative when the origin is inside; a miss keeps its slab distances).

    One implementation for every backend, the torch slab test the marchers' ranges start from
    (:func:`nerfstudio_accel.kernels.lattice.ray_aabb_intersect`): nerfacc's own op replaces a miss's distances
    with a fill value and divides by zero direction components.

    Example:
        >>> t_enter, t_exit, hit = ray_aabb_intersect(
        ...     torch.tensor([[0.0, 0.0, -2.0]]), torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([-1.0, -1, -1, 1, 1, 1])
        ... )
        >>> t_enter.tolist(), t_exit.tolist(), hit.tolist()
        ([1.0], [3.0], [True])
    """
    return lattice.ray_aabb_intersect(origins, directions, aabb)
