"""Ray-traced analytic solids, their procedural textures, and view-independent shading, shared by both scenes.

Shading is Lambertian with one fixed directional light plus ambient and hard shadows; it depends only on
the surface point, never on the viewing direction, so rendered images are views of a valid radiance field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

LIGHT_DIRECTION = np.array([0.45, -0.35, 0.82]) / np.linalg.norm([0.45, -0.35, 0.82])
AMBIENT = 0.25
SURFACE_OFFSET = 1e-4  # shadow rays start this far off the surface (scene units)

Texture = Callable[[np.ndarray], np.ndarray]


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


def nearest_positive(candidates: np.ndarray) -> np.ndarray:
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
        return nearest_positive(np.stack([-half_b - root, -half_b + root]))

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
        return nearest_positive(np.stack([np.where(inside, entry, np.inf), np.where(inside, exit_, np.inf)]))

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
            caps = np.stack(
                [(self.z_min - origins[:, 2]) / directions[:, 2], (self.z_max - origins[:, 2]) / directions[:, 2]]
            )
            side_z = origins[:, 2] + side * directions[:, 2]
            caps_xy = origins[None, :, :2] + caps[..., None] * directions[None, :, :2] - self.center_xy
        side = np.where((side_z >= self.z_min) & (side_z <= self.z_max), side, np.inf)
        caps = np.where(np.einsum("kij,kij->ki", caps_xy, caps_xy) <= self.radius**2, caps, np.inf)
        return nearest_positive(np.concatenate([side, caps]))

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


def checker(
    points: np.ndarray, origin: np.ndarray, cell: float, colours: np.ndarray, axes: tuple[int, ...]
) -> np.ndarray:
    """Checkerboard over the given axes, cells offset half a cell from origin.

    points: (n, 3); origin: (3,); colours: (2, 3). Returns (n, 3).
    The half-cell offset keeps faces that start at origin away from cell edges.
    """
    cells = np.floor((points[:, axes] - origin[list(axes)]) / cell + 0.5).astype(np.int64)
    return colours[cells.sum(axis=1) % 2]


def latitude_bands(points: np.ndarray, center: np.ndarray, radius: float, colours: np.ndarray) -> np.ndarray:
    """Horizontal bands on a sphere, brightness modulated by azimuth: (n, 3) -> (n, 3)."""
    relative = (points - center) / radius
    band = np.floor(4.0 * relative[:, 2] + 4.0).astype(np.int64) % 2
    azimuth = np.arctan2(relative[:, 1], relative[:, 0])
    return colours[band] * (0.75 + 0.25 * np.cos(3.0 * azimuth))[:, None]


def position_gradient(points: np.ndarray, center: np.ndarray, radius: float) -> np.ndarray:
    """Colour that varies linearly with position inside a ball: (n, 3) -> (n, 3) in [0.05, 0.95]."""
    return 0.5 + 0.45 * (points - center) / radius


def spiral_stripes(points: np.ndarray, center_xy: np.ndarray, z_min: float, colours: np.ndarray) -> np.ndarray:
    """Helical stripes around a Z-axis cylinder: (n, 3) -> (n, 3)."""
    azimuth = np.arctan2(points[:, 1] - center_xy[1], points[:, 0] - center_xy[0])
    stripe = np.floor(3.0 * azimuth / np.pi + 10.0 * (points[:, 2] - z_min)).astype(np.int64) % 2
    return colours[stripe]


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
