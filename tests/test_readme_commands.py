"""The captured-scene ``ns-train`` commands of README.md and docs/captured_scenes.md, run as written.

The commands are read from the documents themselves, so a README edit that breaks one breaks this test.
A command is every line of a fenced code block (``\\`` continuations joined, ``#`` comments dropped) and
every inline code span that starts with ``ns-train`` and passes ``--data``, except those for Blender
scenes (``blender-data``; test_cli.py covers those) and those that repeat an earlier one but for the
``--data`` folder. Each runs through the real console script with:

- its ``--data`` value replaced by a small generated scene in the layout the command's parser is documented
  for: ``colmap`` gets a plain COLMAP folder as COLMAP itself writes it (``images/`` + ``sparse/0/`` with
  ``cameras.bin``, ``images.bin``, ``points3D.bin``, no ``transforms.json``); ``nerfstudio-data`` (named, or the
  method's default parser) gets ``transforms.json`` + ``images/`` as ``ns-process-data`` writes them;
- a few flags added after the method name, none that changes how the data is read: 3 steps, tensorboard
  instead of the viewer, no evaluation or intermediate saves, output under tmp_path. A command that names
  no ``--machine.device-type`` trains on the machine's device (CUDA when there is one, else CPU), as a user's does.

Every run must exit 0 with no traceback, save the final checkpoint and record the documented parser in
config.yml.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path
from typing import List, Tuple

import numpy as np
import pytest

from accel_test_helpers import quiet_train_flags
from nerfstudio_accel.scenes.unbounded_scene import IMAGE_DIR, UnboundedSceneSpec, generate_unbounded_scene

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = ("README.md", "docs/captured_scenes.md")
MAX_ITERATIONS = 3
FINAL_CHECKPOINT = f"step-{MAX_ITERATIONS - 1:09d}.ckpt"  # nerfstudio saves at the last step, 0-based
SPEC = UnboundedSceneSpec(num_train=6, num_val=1, num_test=1, resolution=32, supersample=1, seed=0)
"""8 views at 32x24: loading and 3 steps take a few seconds after ns-train's start-up."""

COLMAP_MODEL = Path("sparse/0")
"""Where COLMAP's own mapper writes its first model under the scene folder (``colmap mapper --output_path sparse``)."""

PARSER_CLASSES = {"colmap": "ColmapDataParserConfig", "nerfstudio-data": "NerfstudioDataParserConfig"}


# --- reading the commands ----------------------------------------------------------------------


def documented_commands(markdown: str) -> List[str]:
    """Shell commands in ``markdown`` that start with ``ns-train`` and pass ``--data``, in document order:
    lines of fenced code blocks (continuations joined) and inline code spans (whitespace collapsed)."""
    candidates: List[str] = []
    prose: List[str] = []
    in_block, pending = False, ""
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            in_block, pending = not in_block, ""
            prose.append("")
            continue
        if not in_block:
            prose.append(line)
            continue
        text = pending + line.strip()
        if text.endswith("\\"):
            pending = text[:-1].rstrip() + " "
            continue
        pending = ""
        candidates.append(text)
    candidates += [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", "\n".join(prose))]
    commands = [text for text in candidates if text.startswith("ns-train ")]
    return [text for text in commands if "--data" in shlex.split(text, comments=True)]


def dataparser_names() -> Tuple[str, ...]:
    from nerfstudio.configs.dataparser_configs import all_dataparsers

    return tuple(all_dataparsers)


def default_parser(method: str) -> str:
    """The name of ``method``'s default dataparser (the subcommand ns-train uses when none is given)."""
    from nerfstudio.configs.dataparser_configs import all_dataparsers

    from nerfstudio_accel import methods

    spec = getattr(methods, method.replace("-", "_"))
    parser_type = type(spec.config.pipeline.datamanager.dataparser)
    return next(name for name, config in all_dataparsers.items() if type(config) is parser_type)


def command_parser(argv: List[str]) -> str:
    """The dataparser subcommand of ``ns-train METHOD ...``, else the method's default."""
    names = dataparser_names()
    return next((token for token in argv[2:] if token in names), None) or default_parser(argv[1])


def without_data(argv: List[str]) -> Tuple[str, ...]:
    """``argv`` with its ``--data`` value blanked: commands that differ only in the scene folder run alike."""
    blanked = ["--data=" if token.startswith("--data=") else token for token in argv]
    return tuple("" if index and blanked[index - 1] == "--data" else token for index, token in enumerate(blanked))


def captured_scene_commands() -> List[Tuple[str, str]]:
    """(document, command) for every documented captured-scene ``ns-train`` command, the first occurrence of
    each (a command that differs from an earlier one only in its ``--data`` folder is left out)."""
    found, seen = [], set()
    for document in DOCUMENTS:
        for command in documented_commands((REPO / document).read_text(encoding="utf-8")):
            argv = shlex.split(command, comments=True)
            if "blender-data" not in argv and without_data(argv) not in seen:
                seen.add(without_data(argv))
                found.append((document, command))
    return found


COMMANDS = captured_scene_commands()
COMMAND_IDS = [
    f"{Path(document).stem}-{sum(other == document for other, _ in COMMANDS[:index])}"
    for index, (document, _) in enumerate(COMMANDS)
]


def test_documented_commands_reads_code_blocks_and_inline_spans() -> None:
    markdown = (
        "Train with `ns-train accel-ngp --data\n  <capture>` or `ns-train accel-ngp --help`.\n"
        "```bash\n"
        "ns-train accel-ngp colmap \\\n    --colmap-path sparse/0 --data scene   # a comment\n"
        "ns-eval --load-config config.yml\n"
        "```\n"
    )
    assert documented_commands(markdown) == [
        "ns-train accel-ngp colmap --colmap-path sparse/0 --data scene   # a comment",
        "ns-train accel-ngp --data <capture>",
    ]


def test_the_documents_have_captured_scene_commands() -> None:
    """Guard for the test below: the extraction finds the README's nerfstudio-data and colmap commands."""
    readme = [command for document, command in COMMANDS if document == "README.md"]
    parsers = {command_parser(shlex.split(command, comments=True)) for command in readme}
    assert {"colmap", "nerfstudio-data"} <= parsers, readme


# --- the scenes ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nerfstudio_scene(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """transforms.json + images/ (read-only: copy it to modify it)."""
    return generate_unbounded_scene(tmp_path_factory.mktemp("nerfstudio_scene"), SPEC)


def write_colmap_model(scene: Path, out_dir: Path) -> Path:
    """A plain COLMAP folder for the views of nerfstudio-data ``scene``: out_dir/images (the same PNGs) and a
    binary model in out_dir/sparse/0 (one PINHOLE camera, every view registered, a few 3D points)."""
    from nerfstudio.data.utils import colmap_parsing_utils as colmap

    meta = json.loads((scene / "transforms.json").read_text())
    shutil.copytree(scene / IMAGE_DIR, out_dir / "images")
    model = out_dir / COLMAP_MODEL
    model.mkdir(parents=True)
    cameras = {
        1: colmap.Camera(
            id=1,
            model="PINHOLE",
            width=meta["w"],
            height=meta["h"],
            params=np.array([meta["fl_x"], meta["fl_y"], meta["cx"], meta["cy"]]),
        )
    }
    images = {}
    for image_id, frame in enumerate(meta["frames"], start=1):
        camera_to_world = np.array(frame["transform_matrix"], dtype=float)
        camera_to_world[:3, 1:3] *= -1.0  # OpenGL camera axes (nerfstudio) -> OpenCV (COLMAP)
        world_to_camera = np.linalg.inv(camera_to_world)
        images[image_id] = colmap.Image(
            id=image_id,
            qvec=colmap.rotmat2qvec(world_to_camera[:3, :3]),
            tvec=world_to_camera[:3, 3],
            camera_id=1,
            name=Path(frame["file_path"]).name,
            xys=np.zeros((0, 2)),
            point3D_ids=np.zeros(0, dtype=np.int64),
        )
    rng = np.random.default_rng(0)
    points = {
        point_id: colmap.Point3D(
            id=point_id,
            xyz=rng.uniform(-0.7, 0.7, 3),
            rgb=np.array([128, 128, 128]),
            error=0.5,
            image_ids=np.zeros(0, dtype=np.int64),
            point2D_idxs=np.zeros(0, dtype=np.int64),
        )
        for point_id in range(1, 17)
    }
    colmap.write_model(cameras, images, points, str(model), ext=".bin")
    return out_dir


def scene_for(parser: str, nerfstudio_scene: Path, tmp_path: Path) -> Path:
    if parser == "colmap":
        return write_colmap_model(nerfstudio_scene, tmp_path / "colmap_scene")
    if parser == "nerfstudio-data":
        return nerfstudio_scene
    raise AssertionError(f"no generated scene for the {parser} parser; extend scene_for")


# --- running them ------------------------------------------------------------------------------


def harness_flags(output_dir: Path) -> List[str]:
    return [*quiet_train_flags(MAX_ITERATIONS, output_dir), "--experiment-name", "readme", "--timestamp", "run"]


def runnable(argv: List[str], scene: Path, output_dir: Path) -> List[str]:
    """``argv`` with its ``--data`` value replaced by ``scene`` and the test flags after the method name."""
    argv = list(argv)
    for index, token in enumerate(argv):
        if token == "--data":
            argv[index + 1] = str(scene)
        elif token.startswith("--data="):
            argv[index] = f"--data={scene}"
    return argv[:2] + harness_flags(output_dir) + argv[2:]


@pytest.mark.slow
@pytest.mark.parametrize("document,command", COMMANDS, ids=COMMAND_IDS)
def test_documented_captured_scene_command_trains(
    run_cli, nerfstudio_scene: Path, tmp_path: Path, document: str, command: str
) -> None:
    argv = shlex.split(command, comments=True)
    parser = command_parser(argv)
    scene = scene_for(parser, nerfstudio_scene, tmp_path)
    output_dir = tmp_path / "outputs"
    run = runnable(argv, scene, output_dir)

    code, out, err = run_cli(*run, timeout=300, cwd=tmp_path)

    shown = (
        f"{document}: {command}\nran: {shlex.join(run)}\n--- stdout tail\n{out[-2000:]}\n--- stderr tail\n{err[-3000:]}"
    )
    assert code == 0, shown
    assert "Traceback" not in out + err, shown
    run_dir = output_dir / "readme" / argv[1] / "run"
    assert (run_dir / "nerfstudio_models" / FINAL_CHECKPOINT).is_file(), shown
    assert PARSER_CLASSES[parser] in (run_dir / "config.yml").read_text(), shown
