"""The cameras of a ``transforms.json`` as nerfstudio's parsers read them, checked before loading: each frame's
pose a rigid 3x4 or 4x4 camera-to-world matrix of finite numbers, positive focal lengths and image sizes, principal
points inside the image, a field of view between 0 and 180 degrees. nerfstudio accepts all of these broken (a NaN
pose trains to NaN without a word; nerfstudio-data's auto-orientation spreads one to every pose); each check fails
with one line naming the frame."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

from nerfstudio_accel.errors import SceneDataError

ROTATION_TOLERANCE = 1e-2
"""Largest entry of ``R^T R - I`` a pose's rotation may have: rigid poses written with 4 decimals pass."""


def frame_name(transforms: Path, index: int, frame: Dict[str, Any]) -> str:
    """How a message names a frame: the json, the frame's index and its image."""
    return f"{transforms}: frame {index} ({frame.get('file_path', '?')})"


def check_pose(matrix: Any, where: str) -> None:
    """``matrix`` is a camera-to-world pose nerfstudio reads: 3x4 or 4x4 finite numbers, rotation orthonormal."""
    try:
        pose = np.asarray(matrix, dtype=np.float64)
    except (TypeError, ValueError):
        raise SceneDataError(f"{where}: transform_matrix is not a matrix of numbers; write it as 4 rows of 4") from None
    if pose.shape not in ((3, 4), (4, 4)):
        shape = "x".join(map(str, pose.shape)) if pose.ndim == 2 else f"of shape {pose.shape}"
        raise SceneDataError(f"{where}: transform_matrix is {shape}; a camera-to-world pose is 4x4 (or 3x4)")
    if not np.isfinite(pose).all():
        raise SceneDataError(f"{where}: transform_matrix holds NaN or infinite values; fix or remove this frame")
    rotation = pose[:3, :3]
    off = float(np.abs(rotation.T @ rotation - np.eye(3)).max())
    if off > ROTATION_TOLERANCE:
        raise SceneDataError(
            f"{where}: transform_matrix is not a rigid pose (its rotation's columns are off orthonormal by "
            f"{off:.3g}); write camera-to-world poses without scale or shear"
        )


def check_poses(transforms: Path, frames: List[Dict[str, Any]]) -> None:
    """:func:`check_pose` for every frame, naming the first broken one."""
    for index, frame in enumerate(frames):
        check_pose(frame["transform_matrix"], frame_name(transforms, index, frame))


def finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_intrinsic_values(meta: Dict[str, Any], frames: List[Dict[str, Any]], transforms: Path) -> None:
    """Focal lengths and image sizes positive, principal points within the image, wherever they are given (the top
    level, or a frame, which overrides it)."""
    sources = [(meta, f"{transforms}: top level")]
    sources += [({**meta, **frame}, frame_name(transforms, index, frame)) for index, frame in enumerate(frames)]
    for values, where in sources:
        for key in ("fl_x", "fl_y", "w", "h"):
            if key in values and not (finite_number(values[key]) and values[key] > 0):
                raise SceneDataError(f"{where}: {key} is {values[key]!r}; it must be a positive number of pixels")
        for key, side in (("cx", "w"), ("cy", "h")):
            if key not in values:
                continue
            value, size = values[key], values.get(side)
            inside = finite_number(value) and (not finite_number(size) or 0 <= value <= size)
            if not inside:
                raise SceneDataError(
                    f"{where}: {key} is {value!r}, outside the image (0 to {side} = {size}); it is the principal "
                    f"point in pixels"
                )


def check_camera_angle(meta: Dict[str, Any], transforms: Path) -> None:
    """A Blender scene's ``camera_angle_x``: the horizontal field of view in radians, between 0 and pi."""
    angle = meta.get("camera_angle_x")
    if not (finite_number(angle) and 0 < angle < math.pi):
        raise SceneDataError(
            f"{transforms}: camera_angle_x is {angle!r}; it must be the horizontal field of view in radians, "
            f"between 0 and pi"
        )
