"""What one benchmark entry trains: a registered method, ns-train flags, and the shared scene settings.

An entry of ``--methods`` is ``NAME`` or ``NAME:FLAGS``, e.g. ``accel-ngp:--pipeline.hard-mining=False``
or ``accel-ngp:--precision bf16 --pipeline.hard-mining False`` (flags split like a shell would). The
config is the one ``ns-train NAME FLAGS DATAPARSER --data DIR`` builds, with the bench's device,
seed and downscale on top. For ``colmap`` the bench finds the model folder itself (``colmap/sparse/0``,
``sparse/0`` or ``sparse``), as ``--colmap-path`` would name it.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import io
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from nerfstudio_accel.data.scene_checks import (
    COLMAP_MODEL_FOLDERS,
    check_scene,
    colmap_model_format,
    find_colmap_model,
    registered_image_names,
)
from nerfstudio_accel.errors import SceneDataError

DATAPARSERS = ("blender-data", "nerfstudio-data", "colmap")

# Models whose kernels exist only on CUDA, with the one-line reason a bench row gives elsewhere.
CUDA_ONLY_MODELS = {
    "nerfstudio.models.instant_ngp.NGPModel": "nerfstudio's instant-ngp samples with nerfacc's CUDA ops, which need a CUDA device (accel-ngp runs without them)",
    "nerfstudio.models.splatfacto.SplatfactoModel": "splatfacto rasterizes with gsplat's CUDA kernels, which need a CUDA device",
}


class BenchError(Exception):
    """A mistake in the bench's input, reported as one line (no traceback)."""


@dataclass(frozen=True)
class MethodSpec:
    """One ``--methods`` entry: a registered method name and the ns-train flags applied on top of it."""

    label: str
    """The entry as written; it names the method's row, log and curve."""
    name: str
    flags: Tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> "MethodSpec":
        label = text.strip()
        name, _, flags = label.partition(":")
        try:
            split_flags = tuple(shlex.split(flags))
        except ValueError as error:
            raise BenchError(f"method entry {label!r}: cannot split its flags ({error})") from None
        if not name.strip():
            raise BenchError(f"method entry {label!r} has no method name before ':'")
        return cls(label=label, name=name.strip(), flags=split_flags)


def parse_methods(values: Sequence[str]) -> List[MethodSpec]:
    """Method entries from one or more comma-separated ``--methods`` values, in order, each once."""
    specs = [MethodSpec.parse(item) for value in values for item in value.split(",") if item.strip()]
    if not specs:
        raise BenchError("--methods lists no method; e.g. --methods accel-ngp,nerfacto")
    labels = [spec.label for spec in specs]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise BenchError(f"--methods lists {repeated[0]!r} twice; use --repeats N to run a method several times")
    return specs


def resolve_dataparser(data: Path, requested: str) -> str:
    """The dataparser for ``data``: ``requested``, or for ``auto`` the one its files call for, in this order:

    ``blender-data`` needs ``transforms_train.json`` and ``transforms_test.json``;
    ``nerfstudio-data`` needs ``transforms.json``;
    ``colmap`` needs a COLMAP model in one of :data:`COLMAP_MODEL_FOLDERS`.
    """
    if not data.is_dir():
        raise BenchError(f"--data {data} is not a folder; point it at a scene (Blender, nerfstudio or COLMAP format)")
    blender = (data / "transforms_train.json").is_file()
    if requested == "auto":
        if blender or (data / "transforms.json").is_file():
            requested = "blender-data" if blender else "nerfstudio-data"
        elif find_colmap_model(data) is not None:
            requested = "colmap"
        else:
            raise BenchError(
                f"{data} holds neither transforms_train.json (Blender) nor transforms.json (nerfstudio) nor a COLMAP model "
                f"({', '.join(COLMAP_MODEL_FOLDERS)}); point --data at a scene folder"
            )
    if requested == "colmap":
        if find_colmap_model(data) is None:
            raise BenchError(
                f"{data} has no COLMAP model (cameras.bin or cameras.txt) in {', '.join(COLMAP_MODEL_FOLDERS)}, "
                "which --dataparser colmap reads; check --data or --dataparser"
            )
        return requested
    needed = ("transforms_train.json", "transforms_test.json") if requested == "blender-data" else ("transforms.json",)
    missing = [name for name in needed if not (data / name).is_file()]
    if missing:
        raise BenchError(
            f"{data} has no {missing[0]}, which --dataparser {requested} reads; check --data or --dataparser"
        )
    return requested


def check_data(data: Path, dataparser: str, downscale: float = 1.0) -> None:
    """The scene checks ``ns-train`` runs for accel methods (:func:`check_scene` on ``dataparser``'s default
    config, at the parser factor the bench gives for ``--downscale``: :func:`prescaled_factor`), for every
    method of the bench (the splits it trains and scores: train and test); a problem is a :class:`BenchError`
    before any training."""
    parser = parser_config(data, dataparser)
    pin_parser_factor(parser, data, dataparser, downscale)
    try:
        check_scene(data, parser, eval_split="test")
    except SceneDataError as error:
        raise BenchError(str(error)) from None


def parser_config(data: Path, dataparser: str, own=None):
    """``dataparser``'s config as ``ns-train ... DATAPARSER --data DIR`` builds it, reading ``data``: a method's
    ``own`` parser config when it is that parser (its settings kept), else the default; for ``colmap``,
    ``colmap_path`` names the model folder the bench found (:func:`find_colmap_model`)."""
    from nerfstudio.configs.dataparser_configs import all_dataparsers

    default = all_dataparsers[dataparser]
    parser = copy.deepcopy(own if type(own) is type(default) else default)
    parser.data = Path(data)
    if dataparser == "colmap":
        parser.colmap_path = find_colmap_model(data) or parser.colmap_path
    return parser


def prescaled_factor(data: Path, dataparser: str, downscale: float) -> int:
    """The factor to give the parser's own ``downscale_factor`` for ``--downscale``: ``downscale`` when the
    capture already holds every image the parser reads (the frames of ``transforms.json``, the photos the
    COLMAP model registers) downscaled by it (``images_4/`` beside ``images/``, as ``ns-process-data``
    writes them and Mip-NeRF 360 ships them), which the parser then reads as
    ``ns-train ... --downscale-factor 4`` would; else 1, and the datamanager resizes the originals on load.
    Always 1 for ``blender-data``, which has no such option."""
    if dataparser == "blender-data" or downscale <= 1 or downscale != int(downscale):
        return 1
    factor = int(downscale)
    if dataparser == "colmap":  # the parser reads images_N/<name> for each photo the model registers
        model = find_colmap_model(data)
        try:
            names = registered_image_names(data / model, colmap_model_format(data / model)) if model is not None else []
        except SceneDataError:
            names = []
        prescaled = [data / f"images_{factor}" / name for name in names]
    else:
        frames = _frames_or_empty(data / "transforms.json")  # the parser reads images_N/<file name> for each frame
        prescaled = [data / f"images_{factor}" / Path(frame.get("file_path", "")).name for frame in frames]
    return factor if prescaled and all(path.is_file() for path in prescaled) else 1


def pin_parser_factor(parser, data: Path, dataparser: str, downscale: float) -> int:
    """Set ``parser``'s own ``downscale_factor`` (where it has one: its auto mode would downscale on its own) to
    :func:`prescaled_factor` for ``--downscale``; returns that factor."""
    factor = prescaled_factor(data, dataparser, downscale)
    if hasattr(parser, "downscale_factor"):
        parser.downscale_factor = factor
    return factor


def _frames_or_empty(transforms: Path) -> List[dict]:
    try:
        frames = json.loads(transforms.read_text()).get("frames")
    except (OSError, ValueError, AttributeError):
        return []
    return [frame for frame in frames if isinstance(frame, dict)] if isinstance(frames, list) else []


def _tyro_error_line(text: str) -> str:
    """The message inside tyro's boxed error, on one line."""
    lines = text.splitlines()
    rules = [index for index, line in enumerate(lines) if set(line.strip()) == {"-"}]
    body = lines[rules[0] + 1 : rules[1]] if len(rules) >= 2 else lines
    return re.sub(r"\s+", " ", " ".join(body)).strip() or "invalid flags"


def build_config(
    spec: MethodSpec,
    data: Path,
    dataparser: str,
    downscale: float,
    device: str,
    seed: int,
    output_dir: Path,
    resolve: bool = False,
):
    """The ``TrainerConfig`` of ``spec`` on ``data``, as ns-train would build it
    (:func:`~nerfstudio_accel.engine.build.build_trainer_config`), set for a bench run; ``resolve``: also
    resolve an accel method's config (raises :class:`~nerfstudio_accel.errors.AccelError`), as its run does."""
    from nerfstudio.configs.method_configs import all_methods

    from nerfstudio_accel.engine.build import build_trainer_config

    if spec.name not in all_methods:
        close = difflib.get_close_matches(spec.name, list(all_methods), n=1)
        hint = f"did you mean {close[0]!r}?" if close else "ns-train --help lists the installed ones"
        raise BenchError(f"unknown method {spec.name!r} in --methods; {hint}")

    def set_for_the_bench(config) -> None:
        datamanager = config.pipeline.datamanager
        if not hasattr(datamanager, "camera_res_scale_factor"):
            raise BenchError(f"{spec.label}: its datamanager cannot downscale images, so the bench cannot run it")
        datamanager.dataparser = parser_config(data, dataparser, own=datamanager.dataparser)
        datamanager.data = Path(data)
        parser_factor = pin_parser_factor(datamanager.dataparser, data, dataparser, downscale)
        datamanager.camera_res_scale_factor = parser_factor / downscale
        config.machine.seed = seed
        config.max_num_iterations = 10**9
        config.set_timestamp()

    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
            return build_trainer_config(
                all_methods[spec.name],
                data,
                device,
                flags=spec.flags,
                output_dir=output_dir,
                eval_split="test",
                configure=set_for_the_bench,
                resolve=resolve,
            )
    except SystemExit:  # tyro's answer to a bad flag
        raise BenchError(
            f"{spec.label}: {_tyro_error_line(captured.getvalue())} (ns-train {spec.name} --help lists the flags)"
        ) from None


def unsupported_reason(config, device: str) -> Optional[str]:
    """Why the method of ``config`` cannot train on ``device`` (one line), or ``None`` if it can."""
    target = config.pipeline.model._target
    reason = CUDA_ONLY_MODELS.get(f"{target.__module__}.{target.__qualname__}")
    return reason if reason is not None and device != "cuda" else None
