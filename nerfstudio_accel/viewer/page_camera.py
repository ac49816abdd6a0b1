"""Cameras of the viewer's pages: viser's and nerfstudio's conventions, and where a page opens.

viser's camera looks along its +z axis (OpenCV axes) in units 10x the world's; nerfstudio's looks along
-z (OpenGL axes). :func:`viser_pose` and :func:`centre_ray` convert between the two as nerfstudio's
viewer does (``Viewer.get_camera_state``).

nerfstudio 1.1.5 leaves a new page at viser's default camera, (3, 3, 3) viser units looking at the
origin: 0.3 world units from the centre, inside most scenes. From there every ray crosses the scene's
occupied cells, so the page's first renders are the most expensive it will ask for (on lego, ~70
samples per ray against ~6 from a training view) and show the scene from inside. :func:`open_pages_at`
moves each new page's camera once, on its first camera message, next to a training camera: its view
turned a few degrees about the scene, so that the camera's own frustum, which nerfstudio draws with the
training image in it, does not stand in front of the page and hide the render. The user moves freely
from there. While training the trainer's ``TrainingViewer`` calls it; in ``ns-viewer`` the model's
``FinishedRunViewer`` does.
"""

from __future__ import annotations

import math
from typing import Tuple

import numpy as np
import torch
from jaxtyping import Float
from nerfstudio.viewer.viewer import VISER_NERFSTUDIO_SCALE_RATIO
from torch import Tensor


def viser_pose(camera_to_world: Float[Tensor, "3 4"]) -> Tuple[np.ndarray, np.ndarray]:
    """``(wxyz, position)`` of a viser camera (OpenCV axes, viser units) that sees what a nerfstudio camera
    (OpenGL axes: -z forward, +y up; world units) sees: nerfstudio's viewer turns a viser camera into a
    nerfstudio one by rotating it half a turn about x and dividing its position by 10; this inverts that."""
    import viser.transforms as vtf

    pose = camera_to_world.detach().cpu().double().numpy()
    rotation = vtf.SO3.from_matrix(pose[:, :3]) @ vtf.SO3.from_x_radians(np.pi)
    return rotation.wxyz, pose[:, 3] * VISER_NERFSTUDIO_SCALE_RATIO


def centre_ray(wxyz, position) -> Tuple[torch.Tensor, torch.Tensor]:
    """Origin and unit direction (nerfstudio world units) of the centre ray of a viser camera: viser's
    camera looks along its +z axis and stands at ``position`` in viser's scaled units."""
    import viser.transforms as vtf

    forward = vtf.SO3(np.asarray(wxyz, dtype=np.float64)).as_matrix() @ np.array([0.0, 0.0, 1.0])
    origin = np.asarray(position, dtype=np.float64) / VISER_NERFSTUDIO_SCALE_RATIO
    return torch.tensor(origin, dtype=torch.float32), torch.tensor(forward, dtype=torch.float32)


def vertical_fov(fy: float, height: int) -> float:
    """Vertical field of view in radians of a pinhole camera ``height`` pixels tall."""
    return 2.0 * math.atan(0.5 * height / fy)


def orbit_point(camera_to_world: Float[Tensor, "3 4"], centre: Float[Tensor, "3"]) -> Float[Tensor, "3"]:
    """The point of the camera's view axis nearest ``centre`` (at least a tenth of the distance to it in
    front of the camera): where the orbit controls turn about."""
    position, forward = camera_to_world[:, 3].double(), -camera_to_world[:, 2].double()
    to_centre = centre.double() - position
    ahead = max(float(to_centre @ forward), 0.1 * float(torch.linalg.norm(to_centre)), 1e-4)
    return position + ahead * forward


def orbited(camera_to_world: Float[Tensor, "3 4"], pivot: Float[Tensor, "3"], radians: float) -> Float[Tensor, "3 4"]:
    """The camera turned by ``radians`` about its own up axis through ``pivot`` (a step sideways around
    the scene that keeps ``pivot`` on the view axis)."""
    pose = camera_to_world.detach().cpu().double()
    up = pose[:, 1] / torch.linalg.norm(pose[:, 1])
    cross = torch.tensor([[0.0, -up[2], up[1]], [up[2], 0.0, -up[0]], [-up[1], up[0], 0.0]], dtype=torch.float64)
    turn = torch.eye(3, dtype=torch.float64) + math.sin(radians) * cross + (1.0 - math.cos(radians)) * cross @ cross
    pivot = pivot.detach().cpu().double()
    return torch.cat([turn @ pose[:, :3], (pivot + turn @ (pose[:, 3] - pivot))[:, None]], dim=1)


STEP_ASIDE_RADIANS = math.radians(8.0)
"""How far a page opens turned about the scene from the training camera it opens beside."""


def page_pose(
    camera_to_world: Float[Tensor, "3 4"], centre: Float[Tensor, "3"], step_aside_radians: float = STEP_ASIDE_RADIANS
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(wxyz, position, look_at)`` in viser's convention of a page beside the camera ``camera_to_world`` (world
    units): the camera turned by ``step_aside_radians`` about the view axis' point nearest ``centre``, which
    the page looks at (and its orbit controls turn about)."""
    pivot = orbit_point(camera_to_world.detach().cpu(), centre.detach().cpu())
    wxyz, position = viser_pose(orbited(camera_to_world, pivot, step_aside_radians))
    return wxyz, position, pivot.numpy() * VISER_NERFSTUDIO_SCALE_RATIO


def open_pages_at(
    server,
    camera_to_world: Float[Tensor, "3 4"],
    fov: float,
    centre: Float[Tensor, "3"],
    step_aside_radians: float = STEP_ASIDE_RADIANS,
) -> None:
    """On each new page's first camera message, move its camera to :func:`page_pose` beside
    ``camera_to_world`` (clear of the camera's own frustum), with vertical ``fov``."""
    wxyz, position, look_at = page_pose(camera_to_world, centre, step_aside_radians)

    @server.on_client_connect
    def _(client) -> None:
        moved = []

        @client.camera.on_update
        def _(camera) -> None:
            if moved:
                return
            moved.append(True)
            with client.atomic():
                camera.position = position
                camera.wxyz = wxyz
                camera.look_at = look_at
                camera.fov = fov


def first_training_view(pipeline) -> Tuple[Float[Tensor, "3 4"], float, Float[Tensor, "3"]]:
    """The first training camera's pose and vertical field of view, and the scene box's centre."""
    dataset = pipeline.datamanager.train_dataset
    cameras = dataset.cameras
    fov = vertical_fov(float(cameras.fy[0]), int(cameras.height[0]))
    return cameras.camera_to_worlds[0], fov, dataset.scene_box.aabb.float().mean(dim=0)
