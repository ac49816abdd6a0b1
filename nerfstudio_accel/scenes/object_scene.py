"""Procedural synthetic scenes written in the Blender (NeRF-synthetic) format.

The object is a small set of analytic primitives (a checkerboard slab, two
spheres, a cube and a capped cylinder) with procedural textures, shaded by
:func:`~nerfstudio_accel.scenes.primitives.shade`. Every primitive lies inside
[-0.7, 0.7]^3, well within nerfstudio's Blender scene box [-1.5, 1.5]^3.

Pixel rays follow nerfstudio's Blender parser exactly: focal = 0.5 * W /
tan(0.5 * camera_angle_x), principal point (W / 2, H / 2), pixel (row v, col u)
centred at (u + 0.5, v + 0.5), camera looking down its local -Z with +Y up.
The output directory holds ``transforms_{train,val,test}.json`` and RGBA PNGs
``{train,val,test}/r_{i}.png`` with a transparent background.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
from PIL import Image

from nerfstudio_accel.scenes.primitives import (
    Box,
    Cylinder,
    Primitive,
    Sphere,
    checker,
    latitude_bands,
    position_gradient,
    shade,
    spiral_stripes,
    trace,
)

SPLITS = ("train", "val", "test")
OBJECT_BOUND = 0.7  # every primitive lies inside [-OBJECT_BOUND, OBJECT_BOUND]^3


@dataclass(frozen=True)
class SceneSpec:
    """What to generate: view counts, image size and camera orbit.

    resolution: image width = height in pixels, >= 8 (subclasses may override ``height``).
    supersample: sub-pixel rays per axis, >= 1 (s * s rays averaged per pixel).
    seed: varies primitive colours and positions slightly.
    camera_distance: orbit radius in scene units, > OBJECT_BOUND * sqrt(3).
    camera_angle_x: horizontal field of view in radians, in (0, pi).
    """

    num_train: int = 60
    num_val: int = 5
    num_test: int = 10
    resolution: int = 64
    supersample: int = 2
    seed: int = 0
    camera_distance: float = 3.2
    camera_angle_x: float = 0.69

    def __post_init__(self) -> None:
        if self.num_train < 1:
            raise ValueError(f"num_train must be >= 1, got {self.num_train}")
        if self.num_val < 0 or self.num_test < 0:
            raise ValueError(f"num_val and num_test must be >= 0, got {self.num_val} and {self.num_test}")
        if self.resolution < 8:
            raise ValueError(f"resolution must be >= 8 pixels, got {self.resolution}")
        if self.supersample < 1:
            raise ValueError(f"supersample must be >= 1, got {self.supersample}")
        if not self.camera_distance > OBJECT_BOUND * np.sqrt(3.0):
            raise ValueError(
                f"camera_distance must exceed {OBJECT_BOUND * np.sqrt(3.0):.3f} so cameras stay outside the object, "
                f"got {self.camera_distance}"
            )
        if not 0.0 < self.camera_angle_x < np.pi:
            raise ValueError(f"camera_angle_x must be in (0, pi) radians, got {self.camera_angle_x}")

    @property
    def height(self) -> int:
        """Image height in pixels; the width is ``resolution``."""
        return self.resolution

    @property
    def focal(self) -> float:
        """Focal length in pixels (square pixels), identical to nerfstudio's Blender parser."""
        return 0.5 * self.resolution / float(np.tan(0.5 * self.camera_angle_x))


def build_primitives(seed: int) -> list[Primitive]:
    """The object's primitives; seed jitters positions by <= 0.04 and colours by <= 0.08."""
    rng = np.random.default_rng(seed)

    def jitter(position: list[float]) -> np.ndarray:
        return np.asarray(position) + rng.uniform(-0.04, 0.04, size=len(position))

    def palette(*colours: list[float]) -> np.ndarray:
        return np.clip(np.asarray(colours) + rng.uniform(-0.08, 0.08, size=(len(colours), 3)), 0.05, 0.95)

    slab_min, slab_max = np.array([-0.6, -0.6, -0.5]), np.array([0.6, 0.6, -0.3])
    big_center, big_radius = jitter([0.0, 0.0, 0.1]), 0.36
    small_center, small_radius = jitter([0.44, -0.4, -0.1]), 0.18
    cube_min = np.append(jitter([0.28, 0.28]), -0.3)
    cube_max = cube_min + 0.28
    cylinder_xy, cylinder_radius, cylinder_z = jitter([-0.4, 0.36]), 0.15, (-0.3, 0.5)
    return [
        Box(
            slab_min,
            slab_max,
            partial(
                checker, origin=slab_min, cell=0.2, colours=palette([0.9, 0.85, 0.7], [0.2, 0.25, 0.35]), axes=(0, 1)
            ),
        ),
        Sphere(
            big_center,
            big_radius,
            partial(
                latitude_bands,
                center=big_center,
                radius=big_radius,
                colours=palette([0.85, 0.2, 0.15], [0.95, 0.8, 0.2]),
            ),
        ),
        Sphere(small_center, small_radius, partial(position_gradient, center=small_center, radius=small_radius)),
        Box(
            cube_min,
            cube_max,
            partial(
                checker,
                origin=cube_min,
                cell=0.07,
                colours=palette([0.15, 0.55, 0.85], [0.9, 0.9, 0.9]),
                axes=(0, 1, 2),
            ),
        ),
        Cylinder(
            cylinder_xy,
            cylinder_radius,
            *cylinder_z,
            texture=partial(
                spiral_stripes,
                center_xy=cylinder_xy,
                z_min=cylinder_z[0],
                colours=palette([0.2, 0.7, 0.3], [0.55, 0.2, 0.65]),
            ),
        ),
    ]


def pixel_ray_directions(spec: SceneSpec) -> np.ndarray:
    """Camera-space sub-pixel ray directions (not normalised), OpenGL convention.

    Returns (height * supersample, resolution * supersample, 3); sub-ray (j, i) samples
    pixel (row j // s, col i // s) at offset ((i % s + 0.5) / s, (j % s + 0.5) / s).
    The principal point is the image centre (resolution / 2, height / 2).
    """
    samples = spec.supersample
    u_coords = (np.arange(spec.resolution * samples) + 0.5) / samples
    v_coords = (np.arange(spec.height * samples) + 0.5) / samples
    u, v = np.meshgrid(u_coords, v_coords, indexing="xy")
    center_u, center_v = 0.5 * spec.resolution, 0.5 * spec.height
    return np.stack([(u - center_u) / spec.focal, -(v - center_v) / spec.focal, -np.ones_like(u)], axis=-1)


def render_view(primitives: list[Primitive], camera_to_world: np.ndarray, spec: SceneSpec) -> np.ndarray:
    """Render one view as an RGBA image.

    camera_to_world: (4, 4) OpenGL convention. Returns (H, W, 4) uint8 with straight
    (non-premultiplied) colour and alpha = fraction of sub-pixel rays that hit the object.
    """
    size, samples = spec.resolution, spec.supersample
    directions = pixel_ray_directions(spec).reshape(-1, 3) @ camera_to_world[:3, :3].T
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    origins = np.broadcast_to(camera_to_world[:3, 3], directions.shape)
    distances, hit_primitive = trace(primitives, origins, directions)
    hit = np.isfinite(distances)
    radiance = np.zeros_like(directions)
    points = origins[hit] + distances[hit, None] * directions[hit]
    radiance[hit] = shade(primitives, points, hit_primitive[hit])

    coverage = hit.reshape(size, samples, size, samples).mean(axis=(1, 3))
    summed = radiance.reshape(size, samples, size, samples, 3).sum(axis=(1, 3))
    colour = summed / np.maximum(coverage * samples * samples, 1.0)[..., None]
    rgba = np.concatenate([colour, coverage[..., None]], axis=-1)
    return np.round(rgba * 255.0).astype(np.uint8)


def look_at_origin(position: np.ndarray) -> np.ndarray:
    """Camera-to-world (4, 4) for a camera at position: (3,) looking at the origin, world up +Z.

    Columns are camera +X (right), +Y (up), +Z (backwards) and the position (OpenGL/Blender).
    """
    backward = position / np.linalg.norm(position)
    right = np.cross([0.0, 0.0, 1.0], backward)
    right /= np.linalg.norm(right)
    up = np.cross(backward, right)
    camera_to_world = np.eye(4)
    camera_to_world[:3, :4] = np.stack([right, up, backward, position], axis=1)
    return camera_to_world


def train_directions(count: int) -> np.ndarray:
    """Fibonacci spiral of unit view directions from 10 deg below to 80 deg above the equator: (count, 3)."""
    z_low, z_high = np.sin(np.radians(-10.0)), np.sin(np.radians(80.0))
    steps = np.arange(count) + 0.5
    z = z_low + (z_high - z_low) * steps / count
    azimuth = steps * np.pi * (3.0 - np.sqrt(5.0))
    ring_radius = np.sqrt(1.0 - z**2)
    return np.stack([ring_radius * np.cos(azimuth), ring_radius * np.sin(azimuth), z], axis=1)


def ring_directions(count: int, elevation_deg: float, azimuth_offset: float) -> np.ndarray:
    """Evenly spaced unit view directions on a ring at a fixed elevation: (count, 3).

    azimuth_offset: fraction of the spacing the first direction is rotated by.
    """
    azimuth = 2.0 * np.pi * (np.arange(count) + azimuth_offset) / max(count, 1)
    elevation = np.radians(elevation_deg)
    return np.stack(
        [np.cos(elevation) * np.cos(azimuth), np.cos(elevation) * np.sin(azimuth), np.full(count, np.sin(elevation))],
        axis=1,
    )


def heldout_ring(count: int, elevation_deg: float, avoid: np.ndarray) -> np.ndarray:
    """Ring of view directions rotated to lie as far as possible from others: (count, 3).

    avoid: (m, 3) unit directions; the ring's azimuth offset is the one of 32 evenly
    spaced candidates that maximises the smallest angle to any of them.
    """
    candidates = [ring_directions(count, elevation_deg, offset) for offset in np.arange(32) / 32]
    closest_cosines = [(ring @ avoid.T).max(initial=-1.0) for ring in candidates]
    return candidates[int(np.argmin(closest_cosines))]


def split_directions(spec: SceneSpec) -> dict[str, np.ndarray]:
    """Unit view directions per split: (n, 3) each.

    Train views follow a Fibonacci spiral; val and test views are rings at 22.5 and
    37.5 degrees elevation, rotated away from the train views so they are held out.
    """
    train = train_directions(spec.num_train)
    return {
        "train": train,
        "val": heldout_ring(spec.num_val, elevation_deg=22.5, avoid=train),
        "test": heldout_ring(spec.num_test, elevation_deg=37.5, avoid=train),
    }


def generate_scene(out_dir: Path, spec: SceneSpec = SceneSpec()) -> Path:
    """Render every split of the scene into out_dir in Blender synthetic format; returns out_dir.

    Stale ``r_*.png`` files in the split folders are removed first, so the folders
    hold exactly the frames listed in the transforms files.
    """
    out_dir = Path(out_dir)
    primitives = build_primitives(spec.seed)
    for split, directions in split_directions(spec).items():
        split_dir = out_dir / split
        split_dir.mkdir(parents=True, exist_ok=True)
        for stale in split_dir.glob("r_*.png"):
            stale.unlink()
        frames = []
        for index, direction in enumerate(directions):
            camera_to_world = look_at_origin(spec.camera_distance * direction)
            Image.fromarray(render_view(primitives, camera_to_world, spec)).save(split_dir / f"r_{index}.png")
            frames.append(
                {"file_path": f"./{split}/r_{index}", "rotation": 0.0, "transform_matrix": camera_to_world.tolist()}
            )
        transforms = {"camera_angle_x": spec.camera_angle_x, "frames": frames}
        (out_dir / f"transforms_{split}.json").write_text(json.dumps(transforms, indent=2) + "\n")
    return out_dir
