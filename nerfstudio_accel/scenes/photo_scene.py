"""Photos of a noise-textured scene for structure from motion: a folder of PNGs and nothing else, as a
user's own capture arrives before ``ns-process-data``.

COLMAP's SIFT features need texture that does not repeat: on the checkerboards of
:mod:`~nerfstudio_accel.scenes.unbounded_scene` every corner looks like every other and far-apart views
match wrongly. Here every surface carries *cell noise*: space is cut into cubes and each cube gets a
colour drawn from a fixed table by a hash of its integer coordinates, at two scales mixed. A box, a
sphere and a cylinder stand on a noise-textured ground slab inside a noise-textured backdrop sphere;
shading is :func:`~nerfstudio_accel.scenes.primitives.shade`'s, view-independent. The cameras circle the
object on :func:`~nerfstudio_accel.scenes.unbounded_scene.arc_camera_positions`' orbit, looking at the
origin, and are rendered by :func:`~nerfstudio_accel.scenes.unbounded_scene.render_unbounded_view`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
from PIL import Image

from nerfstudio_accel.scenes.object_scene import look_at_origin
from nerfstudio_accel.scenes.primitives import Box, Cylinder, Primitive, Sphere
from nerfstudio_accel.scenes.unbounded_scene import UnboundedSceneSpec, arc_camera_positions, render_unbounded_view

TABLE_SIZE = 4096
"""Colours in the table a cell's hash indexes."""


@dataclass(frozen=True)
class PhotoSceneSpec(UnboundedSceneSpec):
    """An :class:`UnboundedSceneSpec` whose views all go into one folder of photos: ``num_train`` views
    on a full circle, looking down at the object from ``elevation_deg`` +- ``elevation_swing_deg``."""

    num_train: int = 24
    num_val: int = 0
    num_test: int = 0
    resolution: int = 256
    arc_degrees: float = 360.0
    elevation_deg: float = 30.0
    elevation_swing_deg: float = 5.0


def cell_noise(points: np.ndarray, cell: float, table: np.ndarray) -> np.ndarray:
    """The colour of the cube of side ``cell`` each point lies in, ``table`` indexed by a hash of the cube's
    integer coordinates. points: (n, 3); table: (TABLE_SIZE, 3). Returns (n, 3)."""
    cells = np.floor(points / cell).astype(np.int64)
    hashed = (cells[:, 0] * 73856093) ^ (cells[:, 1] * 19349663) ^ (cells[:, 2] * 83492791)
    return table[hashed % TABLE_SIZE]


def two_scale_noise(points: np.ndarray, cell: float, table: np.ndarray) -> np.ndarray:
    """Cell noise of side ``cell`` (weight 0.7) plus side ``cell / 3`` (0.3): (n, 3) -> (n, 3) in [0, 1]."""
    return 0.7 * cell_noise(points, cell, table) + 0.3 * cell_noise(points + 0.5 * cell, cell / 3.0, table[::-1])


def build_photo_scene(seed: int, backdrop_radius: float = PhotoSceneSpec.backdrop_radius) -> list[Primitive]:
    """A box, a sphere and a cylinder on a ground slab ([-4, 4]^2, top at z = -0.5), then the backdrop sphere
    (last, as :func:`render_unbounded_view` expects). ``seed`` draws the colour table."""
    table = np.random.default_rng([seed, 2]).uniform(0.05, 0.95, size=(TABLE_SIZE, 3))
    texture = partial(two_scale_noise, table=table)
    return [
        Box(np.array([-0.1, -0.6, -0.5]), np.array([0.5, 0.0, 0.1]), partial(texture, cell=0.08)),
        Sphere(np.array([-0.25, 0.3, -0.15]), 0.35, partial(texture, cell=0.07)),
        Cylinder(np.array([0.35, 0.4]), 0.15, -0.5, 0.4, partial(texture, cell=0.06)),
        Box(np.array([-4.0, -4.0, -0.7]), np.array([4.0, 4.0, -0.5]), partial(texture, cell=0.15)),
        Sphere(np.zeros(3), backdrop_radius, partial(texture, cell=4.0)),
    ]


def photo_name(index: int) -> str:
    """The file name of view ``index`` (0-based), as a camera names photos: ``IMG_0001.png``."""
    return f"IMG_{index + 1:04d}.png"


def generate_photos(out_dir: Path, spec: PhotoSceneSpec = PhotoSceneSpec()) -> Path:
    """Render every view into ``out_dir`` as RGB PNGs (``resolution`` x ``height``), no poses; returns out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    primitives = build_photo_scene(spec.seed, spec.backdrop_radius)
    for index, position in enumerate(arc_camera_positions(spec)):
        image = render_unbounded_view(primitives, look_at_origin(position), spec)
        Image.fromarray(image).save(out_dir / photo_name(index))
    return out_dir
