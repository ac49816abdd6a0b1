"""Checks of a scene folder before nerfstudio loads it, each failing with one line that says what to fix.

nerfstudio's parsers fail on bad input deep inside loading, with a stack trace that names
neither the file nor the fix. These checks run first and raise :class:`SceneDataError`;
:func:`check_scene` picks the check for a parser config and returns what training needs to know
of the images (:class:`SceneFacts`).
"""

from __future__ import annotations

import difflib
import json
import math
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, List, Optional, Sequence, Tuple, Union

from PIL import Image

from nerfstudio_accel.data.camera_checks import check_camera_angle, check_intrinsic_values, check_poses
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
    train_pixels: Optional[int] = None
    """Pixels in the training split's images (each image's width x height, summed) as training reads them;
    ``None`` where :attr:`images_have_alpha` is."""

    def at_image_scale(self, scale: float) -> SceneFacts:
        """These facts with every training image resized by ``scale`` a side (the data manager's
        ``camera_res_scale_factor``)."""
        pixels = None if self.train_pixels is None else round(self.train_pixels * scale * scale)
        return replace(self, train_pixels=pixels)


def check_scene(data: Path, parser: DataParserConfig, eval_split: str = "val") -> SceneFacts:
    """Check ``data`` as ``parser`` will read it, picked by the parser config's type: blender-data (the
    ``train`` split and ``eval_split`` when that is ``val`` or ``test``), nerfstudio-data (its
    ``downscale_factor``), or colmap (its ``colmap_path``, ``images_path``, ``load_3D_points`` and
    ``downscale_factor``); any other parser is not checked. Raises :class:`SceneDataError`."""
    from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig
    from nerfstudio.data.dataparsers.colmap_dataparser import ColmapDataParserConfig
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    data = Path(data)
    downscale, rounding = 1, "floor"  # how the parser resizes the files listed in train (colmap: their cameras)
    if isinstance(parser, BlenderDataParserConfig):
        check_blender_scene(data, ["train"] + ([eval_split] if eval_split in ("val", "test") else []))
        train = _blender_train_images(data)
    elif isinstance(parser, NerfstudioDataParserConfig):
        check_nerfstudio_scene(data, parser.downscale_factor)
        train = _nerfstudio_train_images(data, parser)
    elif isinstance(parser, ColmapDataParserConfig):
        images = _check_colmap_scene(
            data, parser.colmap_path, parser.images_path, parser.load_3D_points, parser.downscale_factor
        )
        train = _colmap_train_images(data, images, parser)
        downscale = colmap_downscale_factor(images[0], parser.downscale_factor)
        rounding = parser.downscale_rounding_mode
    else:
        train = None
    bounded = isinstance(parser, BlenderDataParserConfig)
    if not train:
        return SceneFacts(bounded=bounded, images_have_alpha=None)
    pixels = _pixel_count(train, downscale, rounding)
    return SceneFacts(bounded=bounded, images_have_alpha=_has_alpha(train[0]), train_pixels=pixels)


def _has_alpha(image_path: Path) -> bool:
    """Whether the image's mode has an alpha band (``RGBA``, ``LA``, ``PA``); reads only its header."""
    with Image.open(image_path) as image:
        return "A" in image.getbands()


def _pixel_count(image_paths: Sequence[Path], downscale: int = 1, rounding: str = "floor") -> int:
    """Width x height summed over the images, each side divided by ``downscale`` and rounded as nerfstudio's
    ``Cameras.rescale_output_resolution`` rounds it (``floor``, ``round`` or ``ceil``); reads only their headers."""
    total = 0
    for path in image_paths:
        with Image.open(path) as image:
            width, height = image.size
        total += _scaled_side(width, downscale, rounding) * _scaled_side(height, downscale, rounding)
    return total


def _scaled_side(side: int, downscale: int, rounding: str) -> int:
    """``side / downscale`` rounded by ``rounding`` (``floor``, ``round`` or ``ceil``)."""
    if rounding == "round":
        return math.floor(0.5 + side / downscale)
    return math.ceil(side / downscale) if rounding == "ceil" else side // downscale


def _blender_train_images(data: Path) -> List[Path]:
    """The images of ``transforms_train.json``'s frames, in the json's order (the parser keeps it)."""
    return [
        blender_image_path(data, frame["file_path"]) for frame in _load_blender_frames(data / "transforms_train.json")
    ]


def _nerfstudio_train_images(data: Path, parser) -> Optional[List[Path]]:
    """The training images of a nerfstudio-data capture as its parser picks them (in ``images_N/`` at a
    downscale factor N > 1): frames sorted by that path, then ``train_filenames`` or the parser's ``eval_mode``
    split; ``None`` where the parser would refuse."""
    transforms = data if data.suffix == ".json" else data / "transforms.json"
    meta, frames = _load_transforms(transforms)
    factor = nerfstudio_downscale_factor(transforms.parent, frames, parser.downscale_factor)
    paths = sorted(nerfstudio_image_path(transforms.parent, frame["file_path"], factor) for frame in frames)
    if "train_filenames" in meta:
        listed = {nerfstudio_image_path(transforms.parent, name, factor) for name in meta["train_filenames"]}
        return [path for path in paths if path in listed]
    if "val_filenames" in meta or "test_filenames" in meta:
        return None
    return _train_split(paths, parser)


def _colmap_train_images(data: Path, images: List[Path], parser) -> Optional[List[Path]]:
    """The training images of a COLMAP scene as the colmap parser picks them from ``images`` (in image id
    order): ``train_list.txt`` or the parser's ``eval_mode`` split; ``None`` where the parser would refuse."""
    if (data / "train_list.txt").is_file():
        names = (data / "train_list.txt").read_text().splitlines()
        listed = {data / parser.images_path / name for name in names}
        return [path for path in images if path in listed]
    if (data / "test_list.txt").exists() or (data / "validation_list.txt").exists():
        return None
    return _train_split(images, parser)


def _train_split(paths: Sequence[Path], parser) -> Optional[List[Path]]:
    """The ``paths`` in the train split of the parser's ``eval_mode`` (nerfstudio's own split functions);
    ``None`` where the mode cannot split these names."""
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
    return [paths[int(index)] for index in train]


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
    check_poses(transforms_path, frames)
    return meta, frames


def _load_blender_frames(transforms_path: Path) -> List[dict]:
    """A Blender split's frames, its field of view checked."""
    meta, frames = _load_transforms(transforms_path)
    check_camera_angle(meta, transforms_path)
    return frames


def _check_images(paths: Iterable[Path], listed_in: Path, same_size: bool = False) -> None:
    """Every image exists and decodes with the first one's channels (RGB, RGBA, ...); with ``same_size``, all share
    the first one's size."""
    paths = list(paths)
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise SceneDataError(f"{len(missing)} image(s) listed in {listed_in} are missing, first: {missing[0]}")
    first_size, first_bands = None, None
    for path in paths:
        try:
            with Image.open(path) as image:
                size, bands = image.size, image.getbands()
                image.verify()
        except Exception as error:
            raise SceneDataError(
                f"image {path} cannot be decoded ({type(error).__name__}: {error}); replace or remove it"
            ) from None
        first_size, first_bands = first_size or size, first_bands or bands
        if len(bands) != len(first_bands):
            raise SceneDataError(
                f"image {path} has {len(bands)} channel(s) ({''.join(bands)}) but {paths[0].name} has "
                f"{len(first_bands)} ({''.join(first_bands)}); save every image with the same channels"
            )
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
    if data.is_file():
        raise SceneDataError(f"--data names the file {data}; blender-data reads its folder: pass --data {data.parent}")
    if not data.is_dir():
        raise SceneDataError(f"scene folder {data} does not exist; pass --data <folder with transforms_train.json>")
    for split in splits:
        transforms = data / f"transforms_{split}.json"
        if not transforms.is_file():
            hint = " (it has transforms.json: use nerfstudio-data)" if (data / "transforms.json").is_file() else ""
            raise SceneDataError(f"{data} has no transforms_{split}.json, which blender-data needs{hint}")
        _check_blender_images(data, _load_blender_frames(transforms), transforms)


def check_nerfstudio_scene(data: Path, downscale_factor: Optional[int] = None) -> None:
    """A nerfstudio-format capture as nerfstudio-data reads it: ``transforms.json`` (or the given json) with
    intrinsics and a known ``camera_model``, frames whose images decode, and at a downscale factor N > 1 their
    copies in ``images_N/`` too; a ``mask_path`` in every frame or none, each mask decoding (from ``masks_N/``
    at N > 1). ``downscale_factor`` is the parser's ``--downscale-factor``; ``None``: the factor it chooses."""
    data = Path(data)
    if not data.exists():
        raise SceneDataError(f"scene folder {data} does not exist; pass --data <folder with transforms.json>")
    transforms = data if data.suffix == ".json" else data / "transforms.json"
    if not transforms.is_file():
        if (data / "transforms_train.json").is_file():
            raise SceneDataError(
                f"{data} is a Blender-format scene (transforms_train.json); add the subcommand: ... blender-data --data {data}"
            )
        model = find_colmap_model(data)
        if model is not None:
            flag = "" if model == Path(COLMAP_MODEL_FOLDERS[0]) else f" --colmap-path {model}"
            raise SceneDataError(
                f"{data} has no transforms.json, which nerfstudio-data reads, but {data / model} holds a COLMAP "
                f"model; add the subcommand: ... colmap{flag} --data {data}"
            )
        raise SceneDataError(f"{data} has no transforms.json; run ns-process-data on your capture first")
    meta, frames = _load_transforms(transforms)
    _check_intrinsics(meta, frames, transforms)
    check_intrinsic_values(meta, frames, transforms)
    _check_camera_model(meta, transforms)
    data_dir = transforms.parent
    _check_images((data_dir / f["file_path"] for f in frames), transforms)
    factor = nerfstudio_downscale_factor(data_dir, frames, downscale_factor)
    why = ""
    if factor > 1:
        first = Path(frames[0]["file_path"]).name
        why = (
            f"nerfstudio-data --downscale-factor {factor}"
            if downscale_factor is not None
            else f"chosen by nerfstudio-data as {first} is over 1600 px a side and images_{factor}/{first} exists"
        )
        scaled = [nerfstudio_image_path(data_dir, frame["file_path"], factor) for frame in frames]
        fix = f"write every image there at 1/{factor} size or pass nerfstudio-data --downscale-factor 1"
        _check_present(scaled, "image(s)", f"listed in {transforms}", factor, why, fix)
        _check_images(scaled, transforms)
    _check_masks(transforms, frames, factor, why)


def nerfstudio_image_path(data_dir: Path, file_path: str, factor: int, prefix: str = "images_") -> Path:
    """The file nerfstudio-data reads for a frame's ``file_path`` (or its ``mask_path``, with ``prefix``
    ``"masks_"``): ``data_dir / file_path``, or at a downscale ``factor`` > 1 its name in ``{prefix}{factor}/``."""
    return data_dir / f"{prefix}{factor}" / Path(file_path).name if factor > 1 else data_dir / file_path


def nerfstudio_downscale_factor(data_dir: Path, frames: List[dict], given: Optional[int]) -> int:
    """The downscale factor nerfstudio-data reads images at: ``given``, else the smallest power of two that
    brings the first frame's image (in the json's order) to at most 1600 px a side, stopping at the first
    ``images_{2^k}/`` without that image's name (at 1 when ``images_2/`` lacks it)."""
    if given is not None:
        return given
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import MAX_AUTO_RESOLUTION

    first = Path(frames[0]["file_path"])
    with Image.open(data_dir / first) as image:
        longest = max(image.size)
    factor = 1
    while longest / factor > MAX_AUTO_RESOLUTION and (data_dir / f"images_{2 * factor}" / first.name).exists():
        factor *= 2
    return factor


def _check_present(paths: List[Path], what: str, source: str, factor: int, why: str, fix: str) -> None:
    """Every one of ``paths`` exists; else one line with how many do not and the first, and at a downscale
    ``factor`` > 1 the folder and ``why`` the parser reads them there."""
    missing = [path for path in paths if not path.is_file()]
    if missing:
        where = f" from {missing[0].parent} (read at downscale factor {factor}, {why})" if factor > 1 else ""
        raise SceneDataError(
            f"{len(missing)} of {len(paths)} {what} {source} are missing{where}, first: {missing[0]}; {fix}"
        )


def _check_masks(transforms: Path, frames: List[dict], factor: int, why: str) -> None:
    """A ``mask_path`` in every frame or none (nerfstudio-data asserts as much), each mask decoding, read from
    ``masks_N/`` at a downscale factor N > 1 (``why`` says where N comes from)."""
    masked = sum("mask_path" in frame for frame in frames)
    if masked == 0:
        return
    if masked < len(frames):
        index = next(i for i, frame in enumerate(frames) if "mask_path" not in frame)
        raise SceneDataError(
            f'{transforms}: {masked} of {len(frames)} frames have a "mask_path", frame {index} has none; '
            "give a mask_path to every frame or none"
        )
    masks = [nerfstudio_image_path(transforms.parent, frame["mask_path"], factor, "masks_") for frame in frames]
    if factor > 1:
        fix = f"write every mask there at 1/{factor} size or pass nerfstudio-data --downscale-factor 1"
    else:
        fix = "add the missing masks or remove mask_path from every frame"
    _check_present(masks, "mask(s)", f"named by mask_path in {transforms}", factor, why, fix)
    _check_images(masks, transforms)


def _check_camera_model(meta: dict, transforms: Path) -> None:
    """``camera_model``, where given, a name nerfstudio-data knows (it looks it up in ``CAMERA_MODEL_TO_TYPE``)."""
    from nerfstudio.cameras.cameras import CAMERA_MODEL_TO_TYPE

    if "camera_model" not in meta:
        return
    model = meta["camera_model"]
    if isinstance(model, str) and model in CAMERA_MODEL_TO_TYPE:
        return
    close = difflib.get_close_matches(str(model).upper(), list(CAMERA_MODEL_TO_TYPE), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise SceneDataError(
        f"{transforms}: camera_model {model!r} is not one nerfstudio-data knows; {hint}"
        f"use one of {', '.join(CAMERA_MODEL_TO_TYPE)}"
    )


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
    downscale_factor: Optional[int] = None,
) -> None:
    """A COLMAP scene as nerfstudio's ``colmap`` parser reads it: the model in ``data / colmap_path``
    (``cameras`` and ``images`` in one format, text first; with ``load_3D_points``, ``points3D`` in either) and
    every image it registers, decodable, in ``data / images_path``, and at a downscale factor N > 1 in
    ``{images_path}_N/`` too (see :func:`_check_colmap_downscaled`). The arguments are the parser's ``--data``,
    ``--colmap-path``, ``--images-path``, ``--load-3D-points`` and ``--downscale-factor`` (``None``: the factor
    it chooses)."""
    _check_colmap_scene(data, colmap_path, images_path, load_3D_points, downscale_factor)


def _check_colmap_scene(
    data: Path,
    colmap_path: Union[Path, str],
    images_path: Union[Path, str],
    load_3D_points: bool,
    downscale_factor: Optional[int] = None,
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
    factor = colmap_downscale_factor(paths[0], downscale_factor)
    if factor > 1:
        if downscale_factor is not None:
            why = f"colmap --downscale-factor {factor}"
        else:
            why = f"chosen by the colmap parser as {paths[0].name} is over 1600 px a side"
        _check_colmap_downscaled(images, names, factor, why, model / f"images{ext}")
    return paths


def colmap_downscale_factor(first_image: Path, given: Optional[int]) -> int:
    """The downscale factor nerfstudio's colmap parser reads images at: ``given``, else the smallest power of
    two that brings ``first_image`` (the model's first, in image id order) to at most 1600 px a side."""
    if given is not None:
        return given
    from nerfstudio.data.dataparsers.colmap_dataparser import MAX_AUTO_RESOLUTION

    with Image.open(first_image) as image:
        longest = max(image.size)
    factor = 1
    while longest / factor > MAX_AUTO_RESOLUTION:
        factor *= 2
    return factor


def _check_colmap_downscaled(images: Path, names: List[str], factor: int, why: str, listed_in: Path) -> None:
    """The colmap parser reads ``{images}_{factor}/<name>`` for every registered ``name``. Where such a folder
    is absent it asks whether to write them all with ffmpeg: the check lets it ask when standard input is a
    terminal and ffmpeg is on PATH, and fails otherwise (outside a terminal the question ends in EOFError).
    Where the folders exist it never looks for missing files, which would fail at load: the check does."""
    scaled = [images.parent / f"{images.name}_{factor}" / name for name in names]
    absent = next((path.parent for path in scaled if not path.parent.exists()), None)
    if absent is not None:
        in_terminal = sys.stdin is not None and sys.stdin.isatty()
        if in_terminal and shutil.which("ffmpeg") is not None:
            return
        cannot_ask = (
            "would offer to write it with ffmpeg, which is not installed: install ffmpeg, "
            if in_terminal
            else "can only offer to write it (with ffmpeg) when ns-train runs in a terminal: "
        )
        raise SceneDataError(
            f"{absent} does not exist, but the colmap parser reads the photos from it at downscale factor {factor} "
            f"({why}) and {cannot_ask}write the {len(names)} photos {listed_in.name} registers there at 1/{factor} "
            "size, or pass colmap --downscale-factor 1"
        )
    fix = (
        f"write the missing ones there at 1/{factor} size, delete the folder for the colmap parser to offer to "
        "write it anew, or pass colmap --downscale-factor 1"
    )
    _check_present(scaled, "image(s)", f"registered in {listed_in}", factor, why, fix)
    _check_images(scaled, listed_in)


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
