"""Occupancy-grid marching: the packed samples of rays through a multi-level binary grid."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Tuple

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from nerfstudio_accel.kernels.density_network import DensityNetwork
from nerfstudio_accel.ops import _torch_impl, precision
from nerfstudio_accel.ops.packed_scan import first_samples_of_each_ray

if TYPE_CHECKING:  # the kernel module loads numba
    from nerfstudio_accel.kernels.march_cull_numba import KeptSamples


def traverse_occupancy_grid(
    origins: Float[Tensor, "n_rays 3"],
    directions: Float[Tensor, "n_rays 3"],
    binaries: Bool[Tensor, "n_levels rx ry rz"],
    aabbs: Float[Tensor, "n_levels 6"],
    near_planes: Float[Tensor, " n_rays"],
    far_planes: Float[Tensor, " n_rays"],
    step_size: float,
    cone_angle: float = 0.0,
    backend: str = "torch",
    max_samples_per_ray: Optional[int] = None,
) -> Tuple[Int[Tensor, " n_samples"], Float[Tensor, " n_samples"], Float[Tensor, " n_samples"]]:
    """March rays through an occupancy grid and keep the lattice steps whose midpoint is in an occupied cell.

    The lattice starts at each ray's near plane and advances by ``dt = max(t * cone_angle, step_size)``
    (:mod:`nerfstudio_accel.kernels.lattice`); level ``i`` of ``binaries`` covers ``aabbs[i]``, and a point is
    looked up in the finest level containing it. Returns packed ``ray_indices (int64), t_starts, t_ends``,
    sorted by ray then by ``t``, at most ``max_samples_per_ray`` per ray (the nearest; None: all). Not
    differentiable.

    ``backend``: ``nerfacc`` (its ``traverse_grids``; it sums the lattice step by step, so a sample on a cell
    face can differ), ``kernel`` (numba on CPU tensors, Triton on CUDA ones: the twin's samples) or ``torch``.

    Example:
        >>> rays = torch.tensor([[0.0, 0.0, -2.0]]), torch.tensor([[0.0, 0.0, 1.0]])
        >>> grid, box = torch.ones(1, 4, 4, 4, dtype=torch.bool), torch.tensor([[-1.0, -1, -1, 1, 1, 1]])
        >>> _, t_starts, t_ends = traverse_occupancy_grid(*rays, grid, box, torch.zeros(1), torch.full((1,), 9.0), 0.5)
        >>> t_starts.tolist(), t_ends.tolist()
        ([1.0, 1.5, 2.0, 2.5], [1.5, 2.0, 2.5, 3.0])
    """
    if backend == "nerfacc":
        from nerfacc.grid import traverse_grids

        intervals, samples = traverse_grids(
            origins,
            directions,
            binaries,
            aabbs,
            near_planes=near_planes,
            far_planes=far_planes,
            step_size=step_size,
            cone_angle=cone_angle,
        )
        marched = samples.ray_indices.long(), intervals.vals[intervals.is_left], intervals.vals[intervals.is_right]
    elif backend == "kernel" and origins.device.type == "cpu":
        from nerfstudio_accel.kernels import marching_numba

        return marching_numba.traverse_occupancy_grid(
            origins, directions, binaries, aabbs, near_planes, far_planes, step_size, cone_angle, max_samples_per_ray
        )  # capped in the kernel
    else:
        traverse = _torch_impl.traverse_occupancy_grid
        if backend == "kernel":
            from nerfstudio_accel.kernels import marching_triton

            traverse = marching_triton.traverse_occupancy_grid
        marched = traverse(origins, directions, binaries, aabbs, near_planes, far_planes, step_size, cone_angle)
    if max_samples_per_ray is None or marched[0].numel() == 0:
        return marched
    keep = torch.nonzero(first_samples_of_each_ray(marched[0], max_samples_per_ray))[:, 0]
    return marched[0][keep], marched[1][keep], marched[2][keep]  # one sync, not three


def march_and_cull_with_density_network(
    network: DensityNetwork,
    origins: Float[Tensor, "n_rays 3"],
    directions: Float[Tensor, "n_rays 3"],
    binaries: Bool[Tensor, "n_levels rx ry rz"],
    aabbs: Float[Tensor, "n_levels 6"],
    near_planes: Float[Tensor, " n_rays"],
    far_planes: Float[Tensor, " n_rays"],
    step_size: float,
    cone_angle: float,
    max_samples_per_ray: Optional[int],
    alpha_threshold: float,
    early_stop_eps: float,
    backend: str,
    expected_kept_per_ray: float,
) -> Optional[KeptSamples]:
    """:func:`traverse_occupancy_grid`, then the culling pass over its candidates with ``network``'s densities
    (:func:`~nerfstudio_accel.ops.volume_rendering.visibility_with_density_network`), in one pass that marches no
    step behind a ray's early stop: the ``kernel`` backend on the CPU
    (:func:`~nerfstudio_accel.kernels.march_cull_numba.march_and_cull`: the kept samples' packed ``ray_indices,
    t_starts, t_ends``, their unweighted encodings and density heads (``network``'s head rows), and the counts
    ``evaluated``, every candidate marched, and ``alpha_culled``; ``expected_kept_per_ray`` sizes its scratch). None
    on other backends and devices: the caller marches, then culls."""
    if backend != "kernel" or origins.device.type != "cpu":
        return None
    from nerfstudio_accel.kernels.march_cull_numba import march_and_cull

    return march_and_cull(
        network, origins, directions, binaries, aabbs, near_planes, far_planes, step_size, cone_angle,
        max_samples_per_ray, alpha_threshold, early_stop_eps, precision.OPTICAL_DEPTH_CAP, expected_kept_per_ray,
    )  # fmt: skip
