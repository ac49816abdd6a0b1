"""Checks of a scene folder before nerfstudio loads it, each failing with one line that says what to fix.

nerfstudio's parsers fail on bad input deep inside loading, with a stack trace that names
neither the file nor the fix. These checks run first and raise :class:`SceneDataError`;
:func:`check_scene` picks the check for a parser config and returns what training needs to know
of the images (:class:`SceneFacts`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, List, Optional, Sequence, Tuple, Union

from PIL import Image

from nerfstudio_accel.errors import SceneDataError

if TYPE_CHECKING:
    from nerfstudio.data.dataparsers.base_dataparser import DataParserConfig

INTRINSICS_KEYS = ("fl_x", "fl_y", "cx", "cy", "w", "h")
"""Camera intrinsics nerfstudio-data reads from ``transforms.json``, at the top level or in every frame (pixels)."""

COLMAP_MODEL_FOLDERS = ("colmap/sparse/0", "sparse/0", "sparse")
"""Where COLMAP models sit under a scene folder: ``ns-process-data``'s layout (the colmap parser's default
``--colmap-path``), then COLMAP's own (Mip-NeRF 360, Tanks and Temples)."""


@dataclass(frozen=True)
class SceneFacts:
    """What :func:`check_scene` learned of a scene folder that training choices follow from."""

    bounded: bool
    """An object inside a known box (blender-data), rather than a capture of unbounded space."""
    images_have_alpha: Optional[bool]
    """Whether the first training image, in the order the parser reads it, has an alpha channel; ``None``
    when that cannot be told without loading the data (a parser without a check here, or split files the
    parser would refuse)."""


def check_scene(data: Path, parser: DataParserConfig, eval_split: str = "val") -> SceneFacts:
    """Check ``data`` as ``parser`` will read it, picked by the parser config's type: blender-data (the
    ``train`` split and ``eval_split`` when that is ``val`` or ``test``), nerfstudio-data, or colmap (its
    ``colmap_path``, ``images_path`` and ``load_3D_points``); any other parser is not checked. Raises
    :class:`SceneDataError`."""
    from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig
    from nerfstudio.data.dataparsers.colmap_dataparser import ColmapDataParserConfig
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    data = Path(data)
    if isinstance(parser, BlenderDataParserConfig):
        check_blender_scene(data, ["train"] + ([eval_split] if eval_split in ("val", "test") else []))
        first = _first_blender_image(data)
    elif isinstance(parser, NerfstudioDataParserConfig):
        check_nerfstudio_scene(data)
        first = _first_nerfstudio_image(data, parser)
    elif isinstance(parser, ColmapDataParserConfig):
        images = _check_colmap_scene(data, parser.colmap_path, parser.images_path, parser.load_3D_points)
        first = _first_colmap_image(data, images, parser)
    else:
        first = None
    bounded = isinstance(parser, BlenderDataParserConfig)
    return SceneFacts(bounded=bounded, images_have_alpha=None if first is None else _has_alpha(first))


def _has_alpha(image_path: Path) -> bool:
    """Whether the image's mode has an alpha band (``RGBA``, ``LA``, ``PA``); reads only its header."""
    with Image.open(image_path) as image:
        return "A" in image.getbands()


def _first_blender_image(data: Path) -> Path:
    """The image of the first frame of ``transforms_train.json``: the parser keeps the json's order."""
    return blender_image_path(data, _load_frames(data / "transforms_train.json")[0]["file_path"])


def _first_nerfstudio_image(data: Path, parser) -> Optional[Path]:
    """The first training image of a nerfstudio-data capture as its parser picks it: frames sorted by path,
    then ``train_filenames`` or the parser's ``eval_mode`` split; ``None`` where the parser would refuse."""
    transforms = data if data.suffix == ".json" else data / "transforms.json"
    meta, frames = _load_transforms(transforms)
    paths = sorted(transforms.parent / frame["file_path"] for frame in frames)
    if "train_filenames" in meta:
        listed = {transforms.parent / name for name in meta["train_filenames"]}
        return next((path for path in paths if path in listed), None)
    if "val_filenames" in meta or "test_filenames" in meta:
        return None
    return _first_of_train_split(paths, parser)


def _first_colmap_image(data: Path, images: List[Path], parser) -> Optional[Path]:
    """The first training image of a COLMAP scene as the colmap parser picks it from ``images`` (in image
    id order): ``train_list.txt`` or the parser's ``eval_mode`` split; ``None`` where the parser would refuse."""
    if (data / "train_list.txt").is_file():
        names = (data / "train_list.txt").read_text().splitlines()
        listed = {data / parser.images_path / name for name in names}
        return next((path for path in images if path in listed), None)
    if (data / "test_list.txt").exists() or (data / "validation_list.txt").exists():
        return None
    return _first_of_train_split(images, parser)


def _first_of_train_split(paths: Sequence[Path], parser) -> Optional[Path]:
    """The first of ``paths`` in the train split of the parser's ``eval_mode`` (nerfstudio's own split
    functions); ``None`` where that split is empty or the mode cannot split these names."""
    from nerfstudio.data.utils import dataparsers_utils as splits

    try:
        if parser.eval_mode == "fraction":
            train, _ = splits.get_train_eval_split_fraction(paths, parser.train_split_fraction)
        elif parser.eval_mode == "filename":
            train, _ = splits.get_train_eval_split_filename(paths)
        elif parser.eval_mode == "interval":
            train, _ = splits.get_train_eval_split_interval(paths, parser.eval_interval)
        elif parser.eval_mode == "all":
            train, _ = splits.get_train_eval_split_all(paths)
        else:
            return None
    except (ValueError, AssertionError):
        return None
    return paths[int(train[0])] if len(train) else None


def _load_transforms(transforms_path: Path) -> Tuple[dict, List[dict]]:
    """The json's top level and its frames, each with ``file_path`` and ``transform_matrix``."""
    try:
        meta = json.loads(transforms_path.read_text())
    except json.JSONDecodeError as error:
        raise SceneDataError(f"{transforms_path} is not valid JSON ({error.msg} at line {error.lineno})") from None
    frames = meta.get("frames") if isinstance(meta, dict) else None
    if not frames:
        raise SceneDataError(f'{transforms_path} lists no frames; add a non-empty "frames" list')
    for index, frame in enumerate(frames):
        if not isinstance(frame, dict) or "file_path" not in frame or "transform_matrix" not in frame:
            raise SceneDataError(f'{transforms_path}: frame {index} needs "file_path" and "transform_matrix"')
    return meta, frames


def _load_frames(transforms_path: Path) -> List[dict]:
    return _load_transforms(transforms_path)[1]


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
            raise SceneDataError(
                f"image {path} cannot be decoded ({type(error).__name__}: {error}); replace or remove it"
            ) from None
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
    meta, frames = _load_transforms(transforms)
    _check_intrinsics(meta, frames, transforms)
    _check_images((transforms.parent / f["file_path"] for f in frames), transforms)


def _check_intrinsics(meta: dict, frames: List[dict], transforms: Path) -> None:
    """Each of :data:`INTRINSICS_KEYS` at the top level or in every frame, as nerfstudio-data reads them."""
    missing = [key for key in INTRINSICS_KEYS if key not in meta and any(key not in frame for frame in frames)]
    if not missing:
        return
    index = next(i for i, frame in enumerate(frames) if any(key not in frame for key in missing))
    angle_hint = ""
    if "camera_angle_x" in meta and "fl_x" in missing:
        angle_hint = " (camera_angle_x is not read: fl_x = w / (2 tan(camera_angle_x / 2)))"
    raise SceneDataError(
        f"{transforms} has no camera intrinsics {', '.join(missing)} (neither at the top level nor in frame {index}); "
        f"add fl_x, fl_y, cx, cy, w, h in pixels at the top level or to every frame{angle_hint}, "
        "or rerun ns-process-data on the capture"
    )


def find_colmap_model(data: Path) -> Optional[Path]:
    """The first of :data:`COLMAP_MODEL_FOLDERS` under ``data`` that holds a COLMAP model (``cameras.bin``
    or ``cameras.txt``), relative to ``data``; ``None`` if none does."""
    for folder in COLMAP_MODEL_FOLDERS:
        if colmap_model_format(Path(data) / folder) is not None:
            return Path(folder)
    return None


def colmap_model_format(model: Path) -> Optional[str]:
    """``".txt"`` or ``".bin"``: the format of the COLMAP model in ``model`` by its cameras file, text first as
    nerfstudio's parser reads it, else ``None``."""
    for ext in (".txt", ".bin"):
        if (model / f"cameras{ext}").is_file():
            return ext
    return None


def registered_image_names(model: Path, ext: str) -> List[str]:
    """Names of the images in ``model``'s ``images.bin``/``images.txt``, relative to the images folder, in image
    id order (the order nerfstudio's colmap parser reads them)."""
    from nerfstudio.data.utils import colmap_parsing_utils as colmap_utils

    read = colmap_utils.read_images_binary if ext == ".bin" else colmap_utils.read_images_text
    try:
        images = read(model / f"images{ext}")
    except Exception as error:
        raise SceneDataError(
            f"{model / f'images{ext}'} cannot be read as a COLMAP model ({type(error).__name__}: {error}); rerun COLMAP's mapper"
        ) from None
    return [images[key].name for key in sorted(images)]


def check_colmap_scene(
    data: Path,
    colmap_path: Union[Path, str] = "colmap/sparse/0",
    images_path: Union[Path, str] = "images",
    load_3D_points: bool = True,
) -> None:
    """A COLMAP scene as nerfstudio's ``colmap`` parser reads it: the model in ``data / colmap_path``
    (``cameras`` and ``images`` in one format, text first; with ``load_3D_points``, ``points3D`` in either) and
    every image it registers, decodable, in ``data / images_path``. The arguments are the parser's
    ``--data``, ``--colmap-path``, ``--images-path`` and ``--load-3D-points``."""
    _check_colmap_scene(data, colmap_path, images_path, load_3D_points)


def _check_colmap_scene(
    data: Path, colmap_path: Union[Path, str], images_path: Union[Path, str], load_3D_points: bool
) -> List[Path]:
    """:func:`check_colmap_scene`'s checks; returns the images the model registers, in image id order."""
    data, colmap_path, images_path = Path(data), Path(colmap_path), Path(images_path)
    if not data.is_dir():
        raise SceneDataError(
            f"scene folder {data} does not exist; pass --data <folder with {images_path}/ and {colmap_path}/>"
        )
    model = data / colmap_path
    ext = colmap_model_format(model)
    if ext is None:
        raise SceneDataError(_no_colmap_model_message(data, colmap_path, model))
    if not (model / f"images{ext}").is_file():
        raise SceneDataError(
            f"{model} has cameras{ext} but no images{ext}, which the colmap parser reads; rerun COLMAP's mapper"
        )
    if load_3D_points and not any((model / f"points3D{suffix}").is_file() for suffix in (".bin", ".txt")):
        raise SceneDataError(
            f"{model} has cameras{ext} but no points3D.bin or points3D.txt, which the colmap parser reads; "
            "pass colmap --load-3D-points False or rerun COLMAP's mapper"
        )
    images = data / images_path
    if not images.is_dir():
        raise SceneDataError(
            f"{data} has no images folder {images} (the colmap parser's --images-path {images_path}); put the photos "
            "COLMAP registered there or pass colmap --images-path <their folder, relative to --data>"
        )
    names = registered_image_names(model, ext)
    if not names:
        raise SceneDataError(f"{model / f'images{ext}'} registers no image; rerun COLMAP's mapper on the photos")
    paths = [images / name for name in names]
    _check_images(paths, model / f"images{ext}")
    return paths


def _no_colmap_model_message(data: Path, colmap_path: Path, model: Path) -> str:
    """Why ``model`` is not a COLMAP model, and the ``colmap`` flag or parser that reads ``data`` instead."""
    looked = f"{data} has no COLMAP model in {model} (no cameras.bin or cameras.txt; the colmap parser reads --colmap-path {colmap_path} under --data)"
    found = find_colmap_model(data)
    if found is not None:
        return f"{looked}, but {data / found} holds one; pass colmap --colmap-path {found} --data {data}"
    if (data / "transforms.json").is_file():
        return f"{looked}; it has transforms.json, so read it with nerfstudio-data --data {data}"
    if (data / "transforms_train.json").is_file():
        return f"{looked}; it is a Blender-format scene, so read it with blender-data --data {data}"
    return (
        f"{looked}; run COLMAP on the photos (ns-process-data images writes colmap/sparse/0) "
        "or pass colmap --colmap-path <model folder, relative to --data>"
    )
