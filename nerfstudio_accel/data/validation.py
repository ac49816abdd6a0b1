"""Checks of a scene folder before nerfstudio loads it, each failing with one line that says what to fix.

nerfstudio's parsers fail on bad input deep inside loading, with a stack trace that names
neither the file nor the fix. These checks run first and raise :class:`SceneDataError`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, List

from PIL import Image


class SceneDataError(ValueError):
    """A scene folder that cannot be trained on; the message is one line with the fix."""


def _load_frames(transforms_path: Path) -> List[dict]:
    try:
        meta = json.loads(transforms_path.read_text())
    except json.JSONDecodeError as error:
        raise SceneDataError(f"{transforms_path} is not valid JSON ({error.msg} at line {error.lineno})") from None
    frames = meta.get("frames") if isinstance(meta, dict) else None
    if not frames:
        raise SceneDataError(f"{transforms_path} lists no frames; add a non-empty \"frames\" list")
    for index, frame in enumerate(frames):
        if not isinstance(frame, dict) or "file_path" not in frame or "transform_matrix" not in frame:
            raise SceneDataError(f"{transforms_path}: frame {index} needs \"file_path\" and \"transform_matrix\"")
    return frames


def _check_images(paths: Iterable[Path], listed_in: Path, same_size: bool = False) -> None:
    """Every image exists and decodes; with ``same_size``, all share the first one's size."""
    paths = list(paths)
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise SceneDataError(f"{len(missing)} image(s) listed in {listed_in} are missing, first: {missing[0]}")
    first_size = None
    for path in paths:
        try:
            with Image.open(path) as image:
                size = image.size
                image.verify()
        except Exception as error:
            raise SceneDataError(f"image {path} cannot be decoded ({type(error).__name__}: {error}); replace or remove it") from None
        first_size = first_size or size
        if same_size and size != first_size:
            raise SceneDataError(
                f"image {path} is {size[0]}x{size[1]} but {paths[0].name} is {first_size[0]}x{first_size[1]}; "
                f"every view in {listed_in.name} shares one camera, so resize them alike"
            )


def blender_image_path(data: Path, file_path: str) -> Path:
    """The file nerfstudio's blender parser reads for a frame: ``file_path`` without ``./``, plus ``.png``,
    always (``r_0.png`` is read as ``r_0.png.png``)."""
    return data / Path(file_path.replace("./", "") + ".png")


def _check_blender_images(data: Path, frames: List[dict], transforms: Path) -> None:
    """Like :func:`_check_images` on the parser's paths, first naming a ``file_path`` that already ends in
    ``.png`` when only that file exists (the parser would look for ``.png.png``)."""
    paths = [blender_image_path(data, frame["file_path"]) for frame in frames]
    for frame, path in zip(frames, paths):
        written = data / frame["file_path"]
        if not path.is_file() and written.suffix == ".png" and written.is_file():
            raise SceneDataError(
                f"{transforms}: file_path {frame['file_path']!r} ends in .png, but blender-data appends .png itself "
                f"(it would read {path.name}); drop the extension from every file_path"
            )
    _check_images(paths, transforms, same_size=True)


def check_blender_scene(data: Path, splits: Iterable[str] = ("train",)) -> None:
    """A Blender-format folder: ``transforms_{split}.json`` with frames whose ``file_path + '.png'`` decode."""
    data = Path(data)
    if not data.is_dir():
        raise SceneDataError(f"scene folder {data} does not exist; pass --data <folder with transforms_train.json>")
    for split in splits:
        transforms = data / f"transforms_{split}.json"
        if not transforms.is_file():
            hint = " (it has transforms.json: use nerfstudio-data)" if (data / "transforms.json").is_file() else ""
            raise SceneDataError(f"{data} has no transforms_{split}.json, which blender-data needs{hint}")
        _check_blender_images(data, _load_frames(transforms), transforms)


def check_nerfstudio_scene(data: Path) -> None:
    """A nerfstudio-format capture: ``transforms.json`` (or the given json) with frames whose images decode."""
    data = Path(data)
    if not data.exists():
        raise SceneDataError(f"scene folder {data} does not exist; pass --data <folder with transforms.json>")
    transforms = data if data.suffix == ".json" else data / "transforms.json"
    if not transforms.is_file():
        if (data / "transforms_train.json").is_file():
            raise SceneDataError(
                f"{data} is a Blender-format scene (transforms_train.json); add the subcommand: ... blender-data --data {data}"
            )
        raise SceneDataError(f"{data} has no transforms.json; run ns-process-data on your capture first")
    frames = _load_frames(transforms)
    _check_images((transforms.parent / f["file_path"] for f in frames), transforms)
