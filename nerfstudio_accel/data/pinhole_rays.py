"""Training rays of pinhole cameras in a handful of tensor ops.

nerfstudio's :class:`~nerfstudio.model_components.ray_generators.RayGenerator` goes through
:meth:`Cameras.generate_rays`, which serves every camera model: it checks shapes, finds the camera types of the
batch, masks each type's rays in and out of a stack, and looks at the distortion parameters, for every batch. For
a scene whose cameras are all undistorted pinholes (synthetic scenes, undistorted captures) none of that changes
a ray, and on a CPU it is most of the cost of a training batch (benchmarks/ray_generation.py measures both).
:class:`PinholeRayGenerator` decides once, from the cameras, whether they are such a scene, and then computes the
rays with nerfstudio's own arithmetic in the same order, so the rays are the same to the bit; any other scene
goes through nerfstudio's path unchanged.
"""

from __future__ import annotations

import torch
from jaxtyping import Int
from nerfstudio.cameras import camera_utils
from nerfstudio.cameras.cameras import Cameras, CameraType
from nerfstudio.cameras.rays import RayBundle
from nerfstudio.model_components.ray_generators import RayGenerator
from torch import Tensor


def undistorted_pinholes(cameras: Cameras) -> bool:
    """Whether every camera is a perspective camera without lens distortion, times or per-camera metadata (the
    cases :func:`pinhole_rays` computes exactly); ``cameras`` flat, ``(n_cameras,)``."""
    return (
        len(cameras.shape) == 1
        and bool((cameras.camera_type == CameraType.PERSPECTIVE.value).all())
        and (cameras.distortion_params is None or not bool((cameras.distortion_params != 0).any()))
        and cameras.times is None
        and not cameras.metadata
    )


def pinhole_rays(cameras: Cameras, image_coords: Tensor, ray_indices: Int[Tensor, "n_rays 3"]) -> RayBundle:
    """The rays nerfstudio generates for pixels ``ray_indices`` (camera, row, column) of ``cameras`` that
    :func:`undistorted_pinholes` accepts; ``image_coords (H, W, 2)`` are the pixel centres ``(y, x)``. Origins,
    unit directions ``(n_rays, 3)``, ``pixel_area (n_rays, 1)``, ``camera_indices (n_rays, 1)`` and the
    directions' norm in ``metadata``, bit for bit nerfstudio's, on the cameras' device (the indices may be on
    the images' device, the CPU)."""
    device = cameras.device
    pixel = ray_indices[:, 1].long() * image_coords.shape[1] + ray_indices[:, 2].long()
    coords = image_coords.reshape(-1, 2).index_select(0, pixel.to(image_coords.device)).to(device)
    camera = ray_indices[:, 0].long().to(device)
    y, x = coords[:, 0], coords[:, 1]
    fx, fy, cx, cy = (
        intrinsic.reshape(-1).index_select(0, camera) for intrinsic in (cameras.fx, cameras.fy, cameras.cx, cameras.cy)
    )
    across, down = x - cx, y - cy
    right, up = across / fx, -(down / fy)
    # the pixel, and its neighbours one pixel right and one down: (3, n_rays) camera-space x and y (float32, as
    # nerfstudio's direction stack, whatever the cameras' dtype); z is -1 (nerfstudio's camera looks down -z, y up)
    camera_x = torch.stack([right, (across + 1) / fx, right]).float()
    camera_y = torch.stack([up, up, -((down + 1) / fy)]).float()
    camera_to_world = cameras.camera_to_worlds.index_select(0, camera)
    rotation = camera_to_world[:, :3, :3]
    # nerfstudio's sum over the three products, term by term from +0 as torch's sum adds them: the same bits
    world = 0.0 + camera_x[..., None] * rotation[:, :, 0] + camera_y[..., None] * rotation[:, :, 1] - rotation[:, :, 2]
    world, norms = camera_utils.normalize_with_norm(world, -1)
    directions = world[0]
    dx = torch.sqrt(torch.sum((directions - world[1]) ** 2, dim=-1))
    dy = torch.sqrt(torch.sum((directions - world[2]) ** 2, dim=-1))
    return RayBundle(
        origins=camera_to_world[:, :3, 3],
        directions=directions,
        pixel_area=(dx * dy)[:, None],
        camera_indices=camera[:, None],
        metadata={"directions_norm": norms[0].detach()},
    )


class PinholeRayGenerator(RayGenerator):
    """nerfstudio's ray generator, with :func:`pinhole_rays` where :func:`undistorted_pinholes` holds for its
    cameras (decided once, here)."""

    def __init__(self, cameras: Cameras) -> None:
        super().__init__(cameras)
        self.pinholes = undistorted_pinholes(cameras)

    def forward(self, ray_indices: Int[Tensor, "n_rays 3"]) -> RayBundle:
        """The rays of pixels ``ray_indices`` (camera, row, column)."""
        if not self.pinholes:
            return super().forward(ray_indices)
        return pinhole_rays(self.cameras, self.image_coords, ray_indices)
