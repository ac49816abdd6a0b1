"""Procedural unbounded scene written in nerfstudio-data format (``transforms.json`` + ``images/``).

The object of :mod:`nerfstudio_accel.scenes.object_scene` (inside [-0.7, 0.7]^3, centred on the
origin) rests on an infinite textured ground plane z = GROUND_HEIGHT, and everything sits
inside a self-lit backdrop sphere of radius ``backdrop_radius`` (50 scene units by default,
~36x the object's size) with striped sky and a skyline. Object and ground are Lambertian
with the same light and hard shadows as the Blender scene, the backdrop shows its texture
unshaded; nothing depends on the viewing direction, so the images are views of a valid
radiance field. Every ray from a camera hits something, so the PNGs are opaque RGB.

Cameras follow a phone-like partial orbit: ``arc_degrees`` of azimuth centred on +X,
elevation ``elevation_deg`` +- ``elevation_swing_deg``, all looking at the origin. Held-out
views are interleaved on the same arc and listed in ``{train,val,test}_filenames``.

Pixel rays follow nerfstudio's ``Cameras`` exactly: pixel (row v, col u) centred at
(u + 0.5, v + 0.5), principal point (cx, cy) = (W / 2, H / 2), fl_x = fl_y, camera looking
down its local -Z with +Y up (OpenGL camera-to-world in ``transform_matrix``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
from PIL import Image

from nerfstudio_accel.scenes.object_scene import SceneSpec, build_primitives, look_at_origin, pixel_ray_directions
from nerfstudio_accel.scenes.primitives import Primitive, Sphere, Texture, checker, nearest_positive, shade, trace

GROUND_HEIGHT = -0.5  # the object's base slab rests on the ground plane z = GROUND_HEIGHT
IMAGE_DIR = "images"


@dataclass(frozen=True)
class UnboundedSceneSpec(SceneSpec):
    """What to generate: view counts, image size and the camera arc.

    resolution: image width in pixels, >= 8; the height is 3/4 of it (rounded half up).
    camera_distance: distance from every camera to the origin, in scene units.
    camera_angle_x: horizontal field of view in radians (60 degrees by default).
    arc_degrees: azimuth span of the orbit in (0, 360], centred on world +X.
    elevation_deg, elevation_swing_deg: camera elevation above the XY plane is
        elevation_deg + elevation_swing_deg * sin(3 pi t) at arc fraction t in [0, 1]; stays in [0, 90).
    backdrop_radius: radius of the backdrop sphere around the origin, > 10 * camera_distance.
    """

    camera_distance: float = 3.0
    camera_angle_x: float = float(np.radians(60.0))
    arc_degrees: float = 240.0
    elevation_deg: float = 14.0
    elevation_swing_deg: float = 6.0
    backdrop_radius: float = 50.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.arc_degrees <= 360.0:
            raise ValueError(f"arc_degrees must be in (0, 360], got {self.arc_degrees}")
        if (
            self.elevation_swing_deg < 0
            or not 0.0 <= self.elevation_deg - self.elevation_swing_deg
            or not self.elevation_deg + self.elevation_swing_deg < 90.0
        ):
            raise ValueError(
                f"elevation_deg +- elevation_swing_deg must stay in [0, 90) degrees, got "
                f"{self.elevation_deg} +- {self.elevation_swing_deg}"
            )
        if not self.backdrop_radius > 10.0 * self.camera_distance:
            raise ValueError(
                f"backdrop_radius must exceed 10 * camera_distance = {10.0 * self.camera_distance}, "
                f"got {self.backdrop_radius}"
            )

    @property
    def height(self) -> int:
        """Image height in pixels: 3/4 of the width, rounded half up."""
        return (3 * self.resolution + 2) // 4


@dataclass(frozen=True, eq=False)
class GroundPlane:
    """Infinite horizontal plane z = height with normal +Z."""

    height: float
    texture: Texture

    def hit_distance(self, origins: np.ndarray, directions: np.ndarray) -> np.ndarray:
        """origins, directions: (n_rays, 3). Returns (n_rays,), inf for rays parallel to or leaving the plane."""
        with np.errstate(divide="ignore", invalid="ignore"):
            distances = (self.height - origins[:, 2]) / directions[:, 2]
        return nearest_positive(distances[None])

    def normals(self, points: np.ndarray) -> np.ndarray:
        return np.broadcast_to(np.array([0.0, 0.0, 1.0]), points.shape).copy()

    def albedo(self, points: np.ndarray) -> np.ndarray:
        return self.texture(points)


def _ground_texture(
    points: np.ndarray, cell: float, near_colours: np.ndarray, far_colours: np.ndarray, fade_radius: float
) -> np.ndarray:
    """Checkerboard near the object blending into smooth large-scale waves far away.

    points: (n, 3); near_colours, far_colours: (2, 3). Returns (n, 3). The checker's weight
    is 1 / (1 + (r / fade_radius)^2) at distance r from the Z axis, so the far ground stays
    smooth enough not to alias; its waves have a 6-unit radial and a 7-fold angular period.
    """
    near = checker(points, origin=np.zeros(3), cell=cell, colours=near_colours, axes=(0, 1))
    radius = np.hypot(points[:, 0], points[:, 1])
    azimuth = np.arctan2(points[:, 1], points[:, 0])
    wave = 0.5 + 0.25 * np.cos(2.0 * np.pi * radius / 6.0) + 0.25 * np.cos(7.0 * azimuth)
    far = far_colours[0] + wave[:, None] * (far_colours[1] - far_colours[0])
    near_weight = (1.0 / (1.0 + (radius / fade_radius) ** 2))[:, None]
    return near_weight * near + (1.0 - near_weight) * far


def _backdrop_texture(
    points: np.ndarray, radius: float, sky_colours: np.ndarray, hill_colour: np.ndarray, stripes: int
) -> np.ndarray:
    """Sky of vertical stripes brightening towards the zenith above a wavy skyline of hills.

    points: (n, 3) on the sphere of the given radius around the origin; sky_colours: (3, 3);
    hill_colour: (3,). Returns (n, 3) in [0, 1]. Stripe k spans 360 / stripes degrees of azimuth;
    the skyline sits 2 to 9 degrees above the horizon.
    """
    relative = points / radius
    azimuth = np.arctan2(relative[:, 1], relative[:, 0])
    stripe = np.floor(stripes * (azimuth + np.pi) / (2.0 * np.pi)).astype(np.int64)
    sky = sky_colours[stripe % 3] * ((0.8 + 0.2 * np.cos(2.4 * stripe)) * (0.6 + 0.4 * relative[:, 2]))[:, None]
    skyline = 0.09 + 0.04 * np.sin(5.0 * azimuth) + 0.025 * np.sin(11.0 * azimuth + 1.0)
    hills = hill_colour * (0.7 + 0.3 * np.cos(9.0 * azimuth))[:, None]
    return np.clip(np.where((relative[:, 2] < skyline)[:, None], hills, sky), 0.0, 1.0)


def build_unbounded_scene(seed: int, backdrop_radius: float = UnboundedSceneSpec.backdrop_radius) -> list[Primitive]:
    """The object's primitives (``build_primitives(seed)``), then the ground plane, then the backdrop.

    The backdrop sphere (centred on the origin) is always last; seed also jitters the
    ground's and backdrop's colours by <= 0.08.
    """
    rng = np.random.default_rng([seed, 1])

    def palette(*colours: list[float]) -> np.ndarray:
        return np.clip(np.asarray(colours) + rng.uniform(-0.08, 0.08, size=(len(colours), 3)), 0.05, 0.95)

    ground = GroundPlane(
        GROUND_HEIGHT,
        partial(
            _ground_texture,
            cell=0.4,
            near_colours=palette([0.75, 0.7, 0.55], [0.35, 0.4, 0.3]),
            far_colours=palette([0.3, 0.45, 0.25], [0.65, 0.6, 0.4]),
            fade_radius=4.0,
        ),
    )
    backdrop = Sphere(
        np.zeros(3),
        backdrop_radius,
        partial(
            _backdrop_texture,
            radius=backdrop_radius,
            sky_colours=palette([0.55, 0.7, 0.95], [0.9, 0.85, 0.75], [0.7, 0.6, 0.85]),
            hill_colour=palette([0.25, 0.35, 0.3])[0],
            stripes=24,
        ),
    )
    return [*build_primitives(seed), ground, backdrop]


def render_rays(primitives: list[Primitive], origins: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """Radiance along rays starting inside the backdrop (the last primitive).

    origins, directions: (n_rays, 3), unit directions. Returns (n_rays, 3) in [0, 1]: the
    backdrop's texture unshaded; every other primitive Lambertian-shaded by ``primitives.shade``
    with shadows cast among all primitives but the backdrop. Rays that hit nothing are black.
    """
    distances, hit_primitive = trace(primitives, origins, directions)
    points = origins + np.where(np.isfinite(distances), distances, 0.0)[:, None] * directions
    radiance = np.zeros_like(directions, dtype=float)
    on_backdrop = hit_primitive == len(primitives) - 1
    on_backdrop &= np.isfinite(distances)
    radiance[on_backdrop] = np.clip(primitives[-1].albedo(points[on_backdrop]), 0.0, 1.0)
    lit = np.isfinite(distances) & ~on_backdrop
    radiance[lit] = shade(primitives[:-1], points[lit], hit_primitive[lit])
    return radiance


def world_pixel_rays(camera_to_world: np.ndarray, spec: UnboundedSceneSpec) -> tuple[np.ndarray, np.ndarray]:
    """World-space sub-pixel rays of one camera: origins and unit directions, (H * s * W * s, 3) each,
    in the row-major order of ``object_scene.pixel_ray_directions``. camera_to_world: (4, 4) OpenGL."""
    directions = pixel_ray_directions(spec).reshape(-1, 3) @ camera_to_world[:3, :3].T
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    return np.broadcast_to(camera_to_world[:3, 3], directions.shape), directions


def render_unbounded_view(
    primitives: list[Primitive], camera_to_world: np.ndarray, spec: UnboundedSceneSpec
) -> np.ndarray:
    """Render one view: (height, resolution, 3) uint8, each pixel the mean of its s * s sub-rays."""
    origins, directions = world_pixel_rays(camera_to_world, spec)
    radiance = render_rays(primitives, origins, directions)
    samples = spec.supersample
    colour = radiance.reshape(spec.height, samples, spec.resolution, samples, 3).mean(axis=(1, 3))
    return np.round(colour * 255.0).astype(np.uint8)


def arc_camera_positions(spec: UnboundedSceneSpec) -> np.ndarray:
    """Camera centres of all views in arc order: (num_train + num_val + num_test, 3).

    Azimuths run evenly from -arc/2 to +arc/2 around +X, both ends included (a full 360-degree
    arc leaves out the duplicate end); every centre is camera_distance from the origin.
    """
    count = spec.num_train + spec.num_val + spec.num_test
    full_circle = spec.arc_degrees >= 360.0
    fraction = np.arange(count) / (count if full_circle else max(count - 1, 1)) if count > 1 else np.full(1, 0.5)
    azimuth = np.radians(spec.arc_degrees * (fraction - 0.5))
    elevation = np.radians(spec.elevation_deg + spec.elevation_swing_deg * np.sin(3.0 * np.pi * fraction))
    return spec.camera_distance * np.stack(
        [np.cos(elevation) * np.cos(azimuth), np.cos(elevation) * np.sin(azimuth), np.sin(elevation)], axis=1
    )


def split_indices(num_train: int, num_val: int, num_test: int) -> dict[str, np.ndarray]:
    """Arc-order view indices per split, held-out views interleaved among the train views.

    The num_val + num_test held-out views sit at floor((j + 0.5) * n / n_heldout) of the n views
    (so neither arc end is held out while n_heldout <= n / 2), alternating val and test in
    proportion to their counts. Returns {"train", "val", "test"}: sorted int arrays.
    """
    count, heldout_count = num_train + num_val + num_test, num_val + num_test
    heldout = np.floor((np.arange(heldout_count) + 0.5) * count / max(heldout_count, 1)).astype(np.int64)
    is_test = np.floor((np.arange(heldout_count) + 1) * num_test / max(heldout_count, 1)) > np.floor(
        np.arange(heldout_count) * num_test / max(heldout_count, 1)
    )
    return {"train": np.setdiff1d(np.arange(count), heldout), "val": heldout[~is_test], "test": heldout[is_test]}


def frame_file_path(index: int) -> str:
    """``file_path`` of arc-order view index (0-based), as ns-process-data names frames: images/frame_00001.png."""
    return f"{IMAGE_DIR}/frame_{index + 1:05d}.png"


def generate_unbounded_scene(out_dir: Path, spec: UnboundedSceneSpec = UnboundedSceneSpec()) -> Path:
    """Render every view into out_dir/images and write out_dir/transforms.json; returns out_dir.

    Stale ``images/frame_*.png`` files are removed first, so the folder holds exactly the
    listed frames. The json has nerfstudio's OPENCV intrinsics (zero distortion) at top
    level, frames in arc order and explicit ``{train,val,test}_filenames``.
    """
    out_dir = Path(out_dir)
    image_dir = out_dir / IMAGE_DIR
    image_dir.mkdir(parents=True, exist_ok=True)
    for stale in image_dir.glob("frame_*.png"):
        stale.unlink()
    primitives = build_unbounded_scene(spec.seed, spec.backdrop_radius)
    frames = []
    for index, position in enumerate(arc_camera_positions(spec)):
        camera_to_world = look_at_origin(position)
        Image.fromarray(render_unbounded_view(primitives, camera_to_world, spec)).save(out_dir / frame_file_path(index))
        frames.append({"file_path": frame_file_path(index), "transform_matrix": camera_to_world.tolist()})
    transforms = {
        "camera_model": "OPENCV",
        "fl_x": spec.focal,
        "fl_y": spec.focal,
        "cx": 0.5 * spec.resolution,
        "cy": 0.5 * spec.height,
        "w": spec.resolution,
        "h": spec.height,
        "k1": 0.0,
        "k2": 0.0,
        "p1": 0.0,
        "p2": 0.0,
        "frames": frames,
    }
    for split, indices in split_indices(spec.num_train, spec.num_val, spec.num_test).items():
        transforms[f"{split}_filenames"] = [frame_file_path(int(index)) for index in indices]
    (out_dir / "transforms.json").write_text(json.dumps(transforms, indent=2) + "\n")
    return out_dir
