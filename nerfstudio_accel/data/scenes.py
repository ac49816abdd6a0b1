"""Procedural synthetic scenes written in the Blender (NeRF-synthetic) format.

The object is a small set of analytic primitives (a checkerboard slab, two
spheres, a cube and a capped cylinder) with procedural textures, lit by one
fixed directional light plus ambient with hard shadows. Shading depends only on
the surface point, never on the viewing direction, so the images are views of
a valid radiance field. Every primitive lies inside [-0.7, 0.7]^3, well within
nerfstudio's Blender scene box [-1.5, 1.5]^3.

Pixel rays follow nerfstudio's Blender parser exactly: focal = 0.5 * W /
tan(0.5 * camera_angle_x), principal point (W / 2, H / 2), pixel (row v, col u)
centred at (u + 0.5, v + 0.5), camera looking down its local -Z with +Y up.
The output directory holds ``transforms_{train,val,test}.json`` and RGBA PNGs
``{train,val,test}/r_{i}.png`` with a transparent background.
With ``--unbounded`` the CLI writes unbounded_scene.py's capture-like nerfstudio-data scene instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Protocol

import numpy as np
from PIL import Image

SPLITS = ("train", "val", "test")
LIGHT_DIRECTION = np.array([0.45, -0.35, 0.82]) / np.linalg.norm([0.45, -0.35, 0.82])
AMBIENT = 0.25
SURFACE_OFFSET = 1e-4  # shadow rays start this far off the surface (scene units)
OBJECT_BOUND = 0.7  # every primitive lies inside [-OBJECT_BOUND, OBJECT_BOUND]^3

Texture = Callable[[np.ndarray], np.ndarray]


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


class Primitive(Protocol):
    """An opaque analytic solid that can be ray-intersected in bulk."""

    def hit_distance(self, origins: np.ndarray, directions: np.ndarray) -> np.ndarray:
        """Nearest hit distance along unit directions, inf on a miss.

        origins, directions: (n_rays, 3). Returns (n_rays,).
        """

    def normals(self, points: np.ndarray) -> np.ndarray:
        """Outward unit normals at surface points: (n, 3) -> (n, 3)."""

    def albedo(self, points: np.ndarray) -> np.ndarray:
        """Diffuse colour in [0, 1] at surface points: (n, 3) -> (n, 3)."""


def _nearest_positive(candidates: np.ndarray) -> np.ndarray:
    """Smallest candidate distance above SURFACE_OFFSET / 10 per ray, inf if none.

    candidates: (k, n_rays) with nan or inf for invalid entries. Returns (n_rays,).
    """
    valid = np.isfinite(candidates) & (candidates > 0.1 * SURFACE_OFFSET)
    return np.where(valid, candidates, np.inf).min(axis=0)


@dataclass(frozen=True, eq=False)
class Sphere:
    """Sphere with center: (3,) and radius in scene units."""

    center: np.ndarray
    radius: float
    texture: Texture

    def hit_distance(self, origins: np.ndarray, directions: np.ndarray) -> np.ndarray:
        offset = origins - self.center
        half_b = np.einsum("ij,ij->i", offset, directions)
        discriminant = half_b**2 - (np.einsum("ij,ij->i", offset, offset) - self.radius**2)
        root = np.sqrt(np.where(discriminant >= 0.0, discriminant, np.nan))
        return _nearest_positive(np.stack([-half_b - root, -half_b + root]))

    def normals(self, points: np.ndarray) -> np.ndarray:
        return (points - self.center) / self.radius

    def albedo(self, points: np.ndarray) -> np.ndarray:
        return self.texture(points)


@dataclass(frozen=True, eq=False)
class Box:
    """Axis-aligned box spanning corner_min: (3,) to corner_max: (3,)."""

    corner_min: np.ndarray
    corner_max: np.ndarray
    texture: Texture

    def hit_distance(self, origins: np.ndarray, directions: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            to_min = (self.corner_min - origins) / directions
            to_max = (self.corner_max - origins) / directions
        entry = np.fmax.reduce(np.fmin(to_min, to_max), axis=1)
        exit_ = np.fmin.reduce(np.fmax(to_min, to_max), axis=1)
        inside = exit_ >= entry
        return _nearest_positive(np.stack([np.where(inside, entry, np.inf), np.where(inside, exit_, np.inf)]))

    def normals(self, points: np.ndarray) -> np.ndarray:
        half_size = 0.5 * (self.corner_max - self.corner_min)
        relative = (points - 0.5 * (self.corner_max + self.corner_min)) / half_size
        axis = np.abs(relative).argmax(axis=1)
        normals = np.zeros_like(points)
        normals[np.arange(len(points)), axis] = np.sign(relative[np.arange(len(points)), axis])
        return normals

    def albedo(self, points: np.ndarray) -> np.ndarray:
        return self.texture(points)


@dataclass(frozen=True, eq=False)
class Cylinder:
    """Capped cylinder along world Z: axis through center_xy: (2,), z in [z_min, z_max]."""

    center_xy: np.ndarray
    radius: float
    z_min: float
    z_max: float
    texture: Texture

    def hit_distance(self, origins: np.ndarray, directions: np.ndarray) -> np.ndarray:
        offset_xy = origins[:, :2] - self.center_xy
        dir_xy = directions[:, :2]
        a = np.einsum("ij,ij->i", dir_xy, dir_xy)
        half_b = np.einsum("ij,ij->i", offset_xy, dir_xy)
        c = np.einsum("ij,ij->i", offset_xy, offset_xy) - self.radius**2
        discriminant = half_b**2 - a * c
        with np.errstate(divide="ignore", invalid="ignore"):
            root = np.sqrt(np.where(discriminant >= 0.0, discriminant, np.nan))
            side = np.stack([(-half_b - root) / a, (-half_b + root) / a])
            caps = np.stack([(self.z_min - origins[:, 2]) / directions[:, 2], (self.z_max - origins[:, 2]) / directions[:, 2]])
            side_z = origins[:, 2] + side * directions[:, 2]
            caps_xy = origins[None, :, :2] + caps[..., None] * directions[None, :, :2] - self.center_xy
        side = np.where((side_z >= self.z_min) & (side_z <= self.z_max), side, np.inf)
        caps = np.where(np.einsum("kij,kij->ki", caps_xy, caps_xy) <= self.radius**2, caps, np.inf)
        return _nearest_positive(np.concatenate([side, caps]))

    def normals(self, points: np.ndarray) -> np.ndarray:
        radial = points[:, :2] - self.center_xy
        half_height = 0.5 * (self.z_max - self.z_min)
        axial = points[:, 2] - 0.5 * (self.z_max + self.z_min)
        on_cap = np.abs(axial) / half_height > np.linalg.norm(radial, axis=1) / self.radius
        normals = np.zeros_like(points)
        normals[:, :2] = np.where(on_cap[:, None], 0.0, radial / self.radius)
        normals[:, 2] = np.where(on_cap, np.sign(axial), 0.0)
        return normals

    def albedo(self, points: np.ndarray) -> np.ndarray:
        return self.texture(points)


def _checker(points: np.ndarray, origin: np.ndarray, cell: float, colours: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Checkerboard over the given axes, cells offset half a cell from origin.

    points: (n, 3); origin: (3,); colours: (2, 3). Returns (n, 3).
    The half-cell offset keeps faces that start at origin away from cell edges.
    """
    cells = np.floor((points[:, axes] - origin[list(axes)]) / cell + 0.5).astype(np.int64)
    return colours[cells.sum(axis=1) % 2]


def _latitude_bands(points: np.ndarray, center: np.ndarray, radius: float, colours: np.ndarray) -> np.ndarray:
    """Horizontal bands on a sphere, brightness modulated by azimuth: (n, 3) -> (n, 3)."""
    relative = (points - center) / radius
    band = np.floor(4.0 * relative[:, 2] + 4.0).astype(np.int64) % 2
    azimuth = np.arctan2(relative[:, 1], relative[:, 0])
    return colours[band] * (0.75 + 0.25 * np.cos(3.0 * azimuth))[:, None]


def _position_gradient(points: np.ndarray, center: np.ndarray, radius: float) -> np.ndarray:
    """Colour that varies linearly with position inside a ball: (n, 3) -> (n, 3) in [0.05, 0.95]."""
    return 0.5 + 0.45 * (points - center) / radius


def _spiral_stripes(points: np.ndarray, center_xy: np.ndarray, z_min: float, colours: np.ndarray) -> np.ndarray:
    """Helical stripes around a Z-axis cylinder: (n, 3) -> (n, 3)."""
    azimuth = np.arctan2(points[:, 1] - center_xy[1], points[:, 0] - center_xy[0])
    stripe = np.floor(3.0 * azimuth / np.pi + 10.0 * (points[:, 2] - z_min)).astype(np.int64) % 2
    return colours[stripe]


def build_primitives(seed: int) -> list[Primitive]:
    """The scene's primitives; seed jitters positions by <= 0.04 and colours by <= 0.08."""
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
        Box(slab_min, slab_max, partial(_checker, origin=slab_min, cell=0.2,
                                        colours=palette([0.9, 0.85, 0.7], [0.2, 0.25, 0.35]), axes=(0, 1))),
        Sphere(big_center, big_radius, partial(_latitude_bands, center=big_center, radius=big_radius,
                                               colours=palette([0.85, 0.2, 0.15], [0.95, 0.8, 0.2]))),
        Sphere(small_center, small_radius, partial(_position_gradient, center=small_center, radius=small_radius)),
        Box(cube_min, cube_max, partial(_checker, origin=cube_min, cell=0.07,
                                        colours=palette([0.15, 0.55, 0.85], [0.9, 0.9, 0.9]), axes=(0, 1, 2))),
        Cylinder(cylinder_xy, cylinder_radius, *cylinder_z,
                 texture=partial(_spiral_stripes, center_xy=cylinder_xy, z_min=cylinder_z[0],
                                 colours=palette([0.2, 0.7, 0.3], [0.55, 0.2, 0.65]))),
    ]


def trace(primitives: list[Primitive], origins: np.ndarray, directions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest hit over all primitives.

    origins, directions: (n_rays, 3), unit directions.
    Returns distances: (n_rays,) (inf on a miss) and primitive indices: (n_rays,).
    """
    distances = np.stack([primitive.hit_distance(origins, directions) for primitive in primitives])
    nearest = distances.argmin(axis=0)
    return distances[nearest, np.arange(len(nearest))], nearest


def shade(primitives: list[Primitive], points: np.ndarray, hit_primitive: np.ndarray) -> np.ndarray:
    """View-independent Lambertian radiance with hard shadows.

    points: (n, 3) surface points; hit_primitive: (n,) index of the primitive hit.
    Returns radiance: (n, 3) in [0, 1].
    """
    normals = np.empty_like(points)
    albedo = np.empty_like(points)
    for index, primitive in enumerate(primitives):
        on_primitive = hit_primitive == index
        normals[on_primitive] = primitive.normals(points[on_primitive])
        albedo[on_primitive] = primitive.albedo(points[on_primitive])
    diffuse = np.clip(normals @ LIGHT_DIRECTION, 0.0, None)
    lit = diffuse > 0.0
    shadow_origins = points[lit] + SURFACE_OFFSET * normals[lit]
    shadow_distances, _ = trace(primitives, shadow_origins, np.broadcast_to(LIGHT_DIRECTION, shadow_origins.shape))
    diffuse[np.flatnonzero(lit)[np.isfinite(shadow_distances)]] = 0.0
    return np.clip(albedo * (AMBIENT + (1.0 - AMBIENT) * diffuse)[:, None], 0.0, 1.0)


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
    return np.stack([np.cos(elevation) * np.cos(azimuth), np.cos(elevation) * np.sin(azimuth),
                     np.full(count, np.sin(elevation))], axis=1)


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
            frames.append({"file_path": f"./{split}/r_{index}", "rotation": 0.0,
                           "transform_matrix": camera_to_world.tolist()})
        transforms = {"camera_angle_x": spec.camera_angle_x, "frames": frames}
        (out_dir / f"transforms_{split}.json").write_text(json.dumps(transforms, indent=2) + "\n")
    return out_dir


def main(argv: list[str] | None = None) -> int:
    """CLI: ns-accel-scene OUT_DIR [--unbounded] [--num-train N] [--num-val N] [--num-test N]
    [--resolution PX] [--supersample S] [--seed S] [--force]. Returns the exit code."""
    from nerfstudio_accel.data.unbounded_scene import UnboundedSceneSpec, generate_unbounded_scene

    description = f"{__doc__.splitlines()[0]} With --unbounded: a capture-like scene in nerfstudio-data format."
    parser = argparse.ArgumentParser(prog="ns-accel-scene", description=description)
    parser.add_argument("out_dir", type=Path, metavar="OUT_DIR", help="folder to write the scene into")
    parser.add_argument("--unbounded", action="store_true",
                        help="instead: the object on an endless textured ground inside a far backdrop, seen from a "
                             "240-degree arc, in nerfstudio-data format (transforms.json, images/, 4:3 RGB)")
    parser.add_argument("--num-train", type=int, help=f"training views (default {SceneSpec.num_train})")
    parser.add_argument("--num-val", type=int, help=f"validation views (default {SceneSpec.num_val})")
    parser.add_argument("--num-test", type=int, help=f"test views (default {SceneSpec.num_test})")
    parser.add_argument("--resolution", type=int,
                        help=f"image width in pixels; height = width, or 3/4 of it with --unbounded "
                             f"(default {SceneSpec.resolution}, --unbounded {UnboundedSceneSpec.resolution})")
    parser.add_argument("--supersample", type=int,
                        help=f"anti-aliasing rays per axis (default {SceneSpec.supersample})")
    parser.add_argument("--seed", type=int, help=f"varies colours and positions (default {SceneSpec.seed})")
    parser.add_argument("--force", action="store_true", help="write into OUT_DIR even if it is not empty")
    args = parser.parse_args(argv)

    out_dir: Path = args.out_dir
    if out_dir.exists() and not out_dir.is_dir():
        print(f"error: OUT_DIR {out_dir} is not a directory", file=sys.stderr)
        return 2
    if out_dir.is_dir() and any(out_dir.iterdir()) and not args.force:
        print(f"error: OUT_DIR {out_dir} is not empty; pass --force to overwrite", file=sys.stderr)
        return 2
    spec_type, generate = (UnboundedSceneSpec, generate_unbounded_scene) if args.unbounded \
        else (SceneSpec, generate_scene)
    names = ("num_train", "num_val", "num_test", "resolution", "supersample", "seed")
    try:
        spec = spec_type(**{name: getattr(args, name) for name in names if getattr(args, name) is not None})
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    start = time.perf_counter()
    generate(out_dir, spec)
    seconds = time.perf_counter() - start
    views = spec.num_train + spec.num_val + spec.num_test
    print(f"wrote {views} views ({spec.num_train} train / {spec.num_val} val / {spec.num_test} test) "
          f"at {spec.resolution}x{spec.height} to {out_dir} in {seconds:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
