"""Input checks for captured scenes: a COLMAP folder as nerfstudio's ``colmap`` parser reads it, and a
nerfstudio ``transforms.json`` without camera intrinsics, with an unknown ``camera_model`` or missing masks;
``images_N/`` at a downscale factor given or chosen by either parser; a COLMAP folder given to nerfstudio-data.
Each bad input stops ``ns-train`` with one line naming what is wrong and the fix, and each check is held against
what nerfstudio's own parser does with the same folder; a real phone capture (``../shared/data/fruit``) passes.
``check_scene`` picks the check by the parser config and tells whether the first training image nerfstudio
reads has alpha.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable, Dict, Tuple

import numpy as np
import pytest
from PIL import Image

from nerfstudio_accel.data.scene_checks import (
    SceneFacts,
    check_colmap_scene,
    check_nerfstudio_scene,
    check_scene,
    find_colmap_model,
)
from nerfstudio_accel.errors import SceneDataError
from nerfstudio_accel.scenes.object_scene import SceneSpec, generate_scene
from nerfstudio_accel.scenes.unbounded_scene import UnboundedSceneSpec, generate_unbounded_scene

FRUIT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "fruit"
NS_TRAIN_FLAGS = ("--max-num-iterations", "1", "--vis", "tensorboard", "--machine.device-type", "cpu")
LOADING_STARTED = "Setting up training dataset"  # nerfstudio prints this when it starts reading images


def colmap_scene(blender_scene: Path, out: Path, model_folder: str = "sparse/0", ext: str = ".txt") -> Path:
    """A COLMAP scene made from a Blender scene's train views: ``images/`` (RGB PNGs) and a PINHOLE model in
    ``out / model_folder``, poses converted from OpenGL camera-to-world to COLMAP's OpenCV world-to-camera."""
    from nerfstudio.data.utils import colmap_parsing_utils as colmap

    meta = json.loads((blender_scene / "transforms_train.json").read_text())
    (out / "images").mkdir(parents=True)
    width, height = Image.open(blender_scene / (meta["frames"][0]["file_path"] + ".png")).size
    focal = 0.5 * width / np.tan(0.5 * meta["camera_angle_x"])
    cameras = {
        1: colmap.Camera(
            id=1, model="PINHOLE", width=width, height=height, params=np.array([focal, focal, width / 2, height / 2])
        )
    }
    images = {}
    for image_id, frame in enumerate(meta["frames"], start=1):
        name = Path(frame["file_path"]).name + ".png"
        Image.open(blender_scene / (frame["file_path"] + ".png")).convert("RGB").save(out / "images" / name)
        c2w = np.array(frame["transform_matrix"], dtype=np.float64)
        c2w[:3, 1:3] *= -1  # OpenGL -> OpenCV camera axes
        w2c = np.linalg.inv(c2w)
        images[image_id] = colmap.Image(
            id=image_id, qvec=colmap.rotmat2qvec(w2c[:3, :3]), tvec=w2c[:3, 3], camera_id=1, name=name,
            xys=np.zeros((1, 2)), point3D_ids=np.array([1]),
        )  # fmt: skip
    points = {
        1: colmap.Point3D(
            id=1,
            xyz=np.zeros(3),
            rgb=np.array([128, 128, 128]),
            error=0.5,
            image_ids=np.array([1]),
            point2D_idxs=np.array([0]),
        )
    }
    (out / model_folder).mkdir(parents=True)
    colmap.write_model(cameras, images, points, out / model_folder, ext=ext)
    return out


def capture_without_intrinsics(blender_scene: Path, out: Path) -> Path:
    """A nerfstudio-format capture (train PNGs, transforms.json) whose json lost its fl_x, fl_y, cx, cy, w, h,
    keeping instant-ngp's camera_angle_x, which nerfstudio-data does not read."""
    meta = json.loads((blender_scene / "transforms_train.json").read_text())
    shutil.copytree(blender_scene / "train", out / "train")
    frames = [
        {"file_path": frame["file_path"] + ".png", "transform_matrix": frame["transform_matrix"]}
        for frame in meta["frames"]
    ]
    (out / "transforms.json").write_text(json.dumps({"camera_angle_x": meta["camera_angle_x"], "frames": frames}))
    return out


def assert_one_line_error(code: int, out: str, err: str, *expected: str) -> str:
    """Non-zero exit, no stack trace, exactly one ``error: ...`` line, containing every expected substring."""
    both = out + err
    assert code != 0, both[-3000:]
    assert "Traceback" not in both, both[-3000:]
    lines = [line for line in both.splitlines() if line.lower().startswith("error")]
    assert len(lines) == 1, f"expected one error line, got {lines}\n{both[-3000:]}"
    for part in expected:
        assert part in lines[0], f"{part!r} not in {lines[0]!r}"
    assert LOADING_STARTED not in both  # rejected before nerfstudio reads any image
    return lines[0]


# --- through ns-train, as a user types it -------------------------------------------------------


def test_ns_train_colmap_folder_without_sparse_0_is_one_line(run_cli, tiny_scene: Path, tmp_path: Path):
    """Photos in images/ but no reconstruction: the line names the model folder the parser reads and the flag."""
    scene = tmp_path / "capture"
    (scene / "images").mkdir(parents=True)
    (scene / "sparse").mkdir()
    shutil.copy(tiny_scene / "train" / "r_0.png", scene / "images" / "r_0.png")

    code, out, err = run_cli(
        "ns-train", "accel-ngp", *NS_TRAIN_FLAGS, "--output-dir", tmp_path / "out", "colmap", "--data", scene
    )

    line = assert_one_line_error(
        code, out, err, str(scene / "colmap" / "sparse" / "0"), "--colmap-path", "ns-process-data"
    )
    print(line)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.ckpt"))


def test_ns_train_transforms_without_intrinsics_is_one_line(run_cli, tiny_scene: Path, tmp_path: Path):
    scene = capture_without_intrinsics(tiny_scene, tmp_path / "capture")

    code, out, err = run_cli(
        "ns-train", "accel-ngp", *NS_TRAIN_FLAGS, "--output-dir", tmp_path / "out", "nerfstudio-data", "--data", scene
    )

    line = assert_one_line_error(
        code, out, err, str(scene / "transforms.json"), "fl_x, fl_y, cx, cy, w, h", "ns-process-data"
    )
    print(line)


# --- the same checks in process ---------------------------------------------------------------


def colmap_cases() -> Dict[str, Callable[[Path, Path], Tuple[Path, dict, Tuple[str, ...]]]]:
    """name -> (tiny scene, work folder) -> (scene folder, parser options, substrings of the message)."""

    def with_model(change: Callable[[Path], Tuple[dict, Tuple[str, ...]]], **kwargs) -> Callable:
        def build(blender: Path, work: Path):
            scene = colmap_scene(blender, work / "capture", **kwargs)
            options, expected = change(scene)
            return scene, options, expected

        return build

    def unlink(path: Path) -> Path:
        path.unlink()
        return path

    def corrupt(path: Path, content: bytes) -> Path:
        path.write_bytes(content)
        return path

    def folder_with(work: Path, *, dirs: Tuple[str, ...] = (), files: Tuple[str, ...] = ()) -> Path:
        for name in dirs:
            (work / name).mkdir(parents=True)
        for name in files:
            (work / name).write_text("{}")
        return work

    def drop_images(scene: Path) -> Path:
        shutil.rmtree(scene / "images")
        return scene / "images"

    return {
        "missing-folder": lambda b, w: (w / "nope", {}, (str(w / "nope"), "does not exist", "--data")),
        "model-in-sparse-0": with_model(lambda s: ({}, (str(s / "colmap/sparse/0"), str(s / "sparse/0"), "--colmap-path sparse/0"))),
        "no-model-anywhere": lambda b, w: (
            folder_with(w, dirs=("images", "sparse")), {}, (str(w / "colmap/sparse/0"), "--colmap-path", "ns-process-data images"),
        ),
        "ns-process-data-layout-without-model": lambda b, w: (
            folder_with(w, dirs=("images",), files=("transforms.json",)), {}, ("transforms.json", f"nerfstudio-data --data {w}"),
        ),
        "empty-model-folder": lambda b, w: (
            folder_with(w, dirs=("colmap/sparse/0",)), {}, (str(w / "colmap/sparse/0"), "no cameras.bin or cameras.txt"),
        ),
        "no-images-file": with_model(lambda s: ({"colmap_path": "sparse/0"}, ("no images.txt", str(unlink(s / "sparse/0/images.txt").parent)))),
        "no-points3D": with_model(
            lambda s: ({"colmap_path": "sparse/0"}, ("no points3D.bin or points3D.txt", "--load-3D-points False", str(unlink(s / "sparse/0/points3D.txt").parent)))
        ),
        "no-images-folder": with_model(lambda s: ({"colmap_path": "sparse/0"}, (str(drop_images(s)), "--images-path images", "--images-path <"))),
        "images-elsewhere": with_model(lambda s: ({"colmap_path": "sparse/0", "images_path": "photos"}, (str(s / "photos"), "--images-path photos"))),
        "missing-image": with_model(lambda s: ({"colmap_path": "sparse/0"}, ("1 image(s)", "missing", str(unlink(s / "images" / "r_2.png"))))),
        "corrupt-image": with_model(
            lambda s: ({"colmap_path": "sparse/0"}, (str(corrupt(s / "images" / "r_1.png", b"not a PNG")), "cannot be decoded"))
        ),
        "corrupt-binary-model": with_model(
            lambda s: ({"colmap_path": "sparse/0"}, (str(corrupt(s / "sparse/0/images.bin", b"\x01")), "cannot be read as a COLMAP model")), ext=".bin"
        ),
    }  # fmt: skip


@pytest.mark.parametrize("case", sorted(colmap_cases()))
def test_check_colmap_scene_rejects_in_one_line(tiny_scene: Path, tmp_path: Path, case: str):
    folder, options, expected = colmap_cases()[case](tiny_scene, tmp_path)

    with pytest.raises(SceneDataError) as raised:
        check_colmap_scene(folder, **options)

    message = str(raised.value)
    assert "\n" not in message
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


@pytest.mark.parametrize("ext", [".txt", ".bin"])
def test_colmap_scene_passes_and_nerfstudio_reads_it(tiny_scene: Path, tmp_path: Path, ext: str):
    """What the check accepts, nerfstudio's colmap parser loads: every registered view, its intrinsics."""
    from nerfstudio.data.dataparsers.colmap_dataparser import ColmapDataParserConfig

    scene = colmap_scene(tiny_scene, tmp_path / "capture", model_folder="colmap/sparse/0", ext=ext)
    check_colmap_scene(scene)
    assert find_colmap_model(scene) == Path("colmap/sparse/0")
    parser = ColmapDataParserConfig(data=scene, downscale_factor=1, eval_mode="all").setup()
    outputs = parser.get_dataparser_outputs("train")
    assert len(outputs.image_filenames) == 8 and int(outputs.cameras.width[0]) == 32


def test_transforms_without_intrinsics_name_the_missing_keys(tiny_scene: Path, tmp_path: Path):
    scene = capture_without_intrinsics(tiny_scene, tmp_path / "capture")
    with pytest.raises(
        SceneDataError, match=r"no camera intrinsics fl_x, fl_y, cx, cy, w, h .*camera_angle_x is not read"
    ):
        check_nerfstudio_scene(scene)
    # Per-frame intrinsics are read too: only the keys some frame lacks are named.
    transforms = scene / "transforms.json"
    meta = json.loads(transforms.read_text())
    meta.update(fl_x=40.0, fl_y=40.0, w=32, h=32)
    for frame in meta["frames"]:
        frame.update(cx=16.0, cy=16.0)
    del meta["frames"][3]["cy"]
    transforms.write_text(json.dumps(meta))
    with pytest.raises(SceneDataError) as raised:
        check_nerfstudio_scene(scene)
    assert "no camera intrinsics cy (neither at the top level nor in frame 3)" in str(raised.value)
    meta["frames"][3]["cy"] = 16.0
    transforms.write_text(json.dumps(meta))
    check_nerfstudio_scene(scene)


@pytest.mark.skipif(
    not (FRUIT / "transforms.json").is_file(), reason="the fruit capture is not at ../shared/data/fruit"
)
def test_real_phone_capture_with_distortion_passes():
    meta = json.loads((FRUIT / "transforms.json").read_text())
    assert meta["k1"] != 0 and "fl_x" in meta  # a distorted camera, intrinsics at the top level
    check_nerfstudio_scene(FRUIT)


# --- check_scene: the check of the parser config, and the first training image's alpha -------------

BLENDER_SPEC = SceneSpec(num_train=3, num_val=1, num_test=1, resolution=8, supersample=1, seed=0)
CAPTURE_SPEC = UnboundedSceneSpec(num_train=6, num_val=1, num_test=1, resolution=8, supersample=1, seed=0)


def nerfstudio_reads_alpha(parser) -> bool:
    """Whether the first training image nerfstudio loads through ``parser`` keeps 4 channels."""
    from nerfstudio.data.datasets.base_dataset import InputDataset

    outputs = parser.setup().get_dataparser_outputs("train")
    return InputDataset(outputs).get_numpy_image(0).shape[-1] == 4


def test_check_scene_runs_the_check_of_the_parser_config(tmp_path: Path):
    from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig
    from nerfstudio.data.dataparsers.colmap_dataparser import ColmapDataParserConfig
    from nerfstudio.data.dataparsers.instant_ngp_dataparser import InstantNGPDataParserConfig
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    blender = generate_scene(tmp_path / "blender", BLENDER_SPEC)
    colmap = colmap_scene(blender, tmp_path / "colmap", model_folder="sparse/0")
    (blender / "transforms_test.json").unlink()

    # blender-data: train, and the eval split when it is val or test
    train_pixels = BLENDER_SPEC.num_train * BLENDER_SPEC.resolution**2
    blender_facts = SceneFacts(bounded=True, images_have_alpha=True, train_pixels=train_pixels)
    assert check_scene(blender, BlenderDataParserConfig()) == blender_facts
    assert check_scene(blender, BlenderDataParserConfig(), eval_split="inference") == blender_facts
    with pytest.raises(SceneDataError, match="has no transforms_test.json, which blender-data needs"):
        check_scene(blender, BlenderDataParserConfig(), eval_split="test")
    # nerfstudio-data on a Blender folder: the nerfstudio check, which names the other subcommand
    with pytest.raises(SceneDataError, match="is a Blender-format scene"):
        check_scene(blender, NerfstudioDataParserConfig())
    # colmap: with the parser's colmap_path, images_path and load_3D_points
    with pytest.raises(SceneDataError, match="--colmap-path sparse/0"):
        check_scene(colmap, ColmapDataParserConfig())
    colmap_facts = check_scene(colmap, ColmapDataParserConfig(colmap_path=Path("sparse/0")))
    assert (colmap_facts.bounded, colmap_facts.images_have_alpha) == (False, False)
    (colmap / "images").rename(colmap / "photos")
    with pytest.raises(SceneDataError, match="--images-path images"):
        check_scene(colmap, ColmapDataParserConfig(colmap_path=Path("sparse/0")))
    (colmap / "sparse/0/points3D.txt").unlink()
    with pytest.raises(SceneDataError, match="no points3D.bin or points3D.txt"):
        check_scene(colmap, ColmapDataParserConfig(colmap_path=Path("sparse/0"), images_path=Path("photos")))
    no_points = ColmapDataParserConfig(colmap_path=Path("sparse/0"), images_path=Path("photos"), load_3D_points=False)
    assert check_scene(colmap, no_points) == colmap_facts
    # a parser without a check: nothing is read, nothing is known
    assert check_scene(tmp_path / "nowhere", InstantNGPDataParserConfig()) == SceneFacts(
        bounded=False, images_have_alpha=None
    )


def test_images_have_alpha_of_generated_scenes_is_what_nerfstudio_loads(tmp_path: Path):
    """The Blender scene's PNGs are RGBA, the capture's RGB, a COLMAP scene made of RGB copies RGB: the fact
    agrees with the first training image nerfstudio's own parser and dataset load."""
    from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig
    from nerfstudio.data.dataparsers.colmap_dataparser import ColmapDataParserConfig
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    blender = generate_scene(tmp_path / "blender", BLENDER_SPEC)
    capture = generate_unbounded_scene(tmp_path / "capture", CAPTURE_SPEC)
    colmap = colmap_scene(blender, tmp_path / "colmap", model_folder="colmap/sparse/0")
    cases = [
        (blender, BlenderDataParserConfig(data=blender), True),
        (capture, NerfstudioDataParserConfig(data=capture, downscale_factor=1), False),
        (colmap, ColmapDataParserConfig(data=colmap, downscale_factor=1), False),
    ]
    for scene, parser, has_alpha in cases:
        facts = check_scene(scene, parser)
        assert facts.images_have_alpha is has_alpha
        assert nerfstudio_reads_alpha(parser) is has_alpha


def nerfstudio_train_pixels(parser) -> int:
    """Width x height summed over the training cameras nerfstudio's own parser reads."""
    cameras = parser.setup().get_dataparser_outputs("train").cameras
    return int((cameras.width * cameras.height).sum())


@pytest.mark.parametrize("split_by", ["blender", "filenames", "fraction", "interval", "colmap", "colmap_downscaled"])
def test_train_pixels_count_the_training_split_nerfstudio_reads(tmp_path: Path, split_by: str):
    """The training pixel count (which picks the CPU's hash-table size) is the training split's, as each parser
    splits it, at the size the parser reads it (``images_2/`` at downscale factor 2: nerfstudio-data's files, the
    colmap parser's cameras), and scales with the data manager's image scale."""
    from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig
    from nerfstudio.data.dataparsers.colmap_dataparser import ColmapDataParserConfig
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    if split_by == "blender":
        scene = generate_scene(tmp_path / "blender", BLENDER_SPEC)
        parser = BlenderDataParserConfig(data=scene)
    elif split_by.startswith("colmap"):
        scene = colmap_scene(generate_scene(tmp_path / "blender", BLENDER_SPEC), tmp_path / "colmap", "colmap/sparse/0")
        factor = 2 if split_by == "colmap_downscaled" else 1
        if factor > 1:
            write_downscaled(scene / "images", factor)  # the parser reads these; its cameras rescale the originals'
        parser = ColmapDataParserConfig(data=scene, downscale_factor=factor, eval_mode="interval", eval_interval=2)
    else:
        scene = generate_unbounded_scene(tmp_path / "capture", CAPTURE_SPEC)
        write_downscaled(scene / "images", 2)
        parser = NerfstudioDataParserConfig(data=scene, downscale_factor=2)
        meta = json.loads((scene / "transforms.json").read_text())
        meta["train_filenames"].remove("images/frame_00001.png")
        if split_by != "filenames":
            for split in ("train", "val", "test"):
                del meta[f"{split}_filenames"]
            parser.eval_mode = split_by
        (scene / "transforms.json").write_text(json.dumps(meta))
    expected = nerfstudio_train_pixels(parser)

    facts = check_scene(scene, parser)
    assert facts.train_pixels == expected
    assert facts.at_image_scale(0.5).train_pixels == expected / 4
    assert facts.at_image_scale(0.5).images_have_alpha is facts.images_have_alpha


def test_one_image_with_other_channels_is_refused_and_alpha_is_read_from_all(tmp_path: Path):
    """nerfstudio stacks the images it loads, so one RGBA photo among RGB ones ends training in a stack error: the
    check names it in one line. A capture whose photos all have alpha has alpha, as nerfstudio reads it."""
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    scene = generate_unbounded_scene(tmp_path / "capture", CAPTURE_SPEC)
    parser = NerfstudioDataParserConfig(data=scene, downscale_factor=1)
    assert check_scene(scene, parser).images_have_alpha is False
    images = sorted((scene / "images").glob("*.png"))
    Image.open(images[3]).convert("RGBA").save(images[3])
    with pytest.raises(
        SceneDataError, match=f"{images[3].name} has 4 channel\\(s\\) \\(RGBA\\) but .* has 3 \\(RGB\\)"
    ):
        check_scene(scene, parser)
    for image in images:
        Image.open(image).convert("RGBA").save(image)
    assert check_scene(scene, parser).images_have_alpha is nerfstudio_reads_alpha(parser) is True


# --- what nerfstudio's parsers read besides the listed images: images_N/, masks, camera_model ------------


def widen(images: Path, width: int) -> None:
    """Every PNG in ``images`` resized to ``width`` px wide (height kept): photos over nerfstudio's 1600 px."""
    for path in images.glob("*.png"):
        with Image.open(path) as image:
            image.resize((width, image.height), Image.NEAREST).save(path)


def write_downscaled(images: Path, factor: int, keep: Callable[[str], bool] = lambda name: True) -> Path:
    """``images_N/`` beside ``images``: its PNGs at 1/N size (the names ``keep`` accepts); returns the folder."""
    target = images.parent / f"{images.name}_{factor}"
    target.mkdir()
    for path in sorted(images.glob("*.png")):
        if keep(path.name):
            with Image.open(path) as image:
                image.resize((max(image.width // factor, 1), max(image.height // factor, 1))).save(target / path.name)
    return target


def edit_transforms(scene: Path, change: Callable[[dict], None]) -> Path:
    transforms = scene / "transforms.json"
    meta = json.loads(transforms.read_text())
    change(meta)
    transforms.write_text(json.dumps(meta))
    return transforms


def with_masks(scene: Path, images: str) -> Path:
    """Every frame of the capture given ``mask_path`` ``masks/<its image's name>``, an all-white mask of its size."""
    (scene / "masks").mkdir()
    for image in (scene / images).glob("*.png"):
        Image.new("L", Image.open(image).size, 255).save(scene / "masks" / image.name)
    edit_transforms(
        scene, lambda meta: [f.update(mask_path="masks/" + Path(f["file_path"]).name) for f in meta["frames"]]
    )
    return scene


def files_nerfstudio_data_misses(parser) -> bool:
    """Whether nerfstudio-data, set up from ``parser``, fails or names an image or mask that does not exist
    (which ns-train only finds when it loads the images, with a stack trace)."""
    try:
        setup = parser.setup()
        outputs = [setup.get_dataparser_outputs(split) for split in ("train", "val", "test")]
    except (AssertionError, KeyError, FileNotFoundError):
        return True
    named = [path for out in outputs for path in out.image_filenames + (out.mask_filenames or [])]
    return not all(Path(path).is_file() for path in named)


def not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Standard input as under CI or nohup: nerfstudio's colmap parser cannot ask its downscaling question."""
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.StringIO())


def a_terminal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, with_ffmpeg: bool) -> None:
    """Standard input a terminal, and on PATH only a stand-in ``ffmpeg`` (``with_ffmpeg``) or nothing."""
    import io
    import sys

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Terminal())
    tools = tmp_path / "tools"
    tools.mkdir()
    if with_ffmpeg:
        (tools / "ffmpeg").write_text("#!/bin/sh\nexit 0\n")
        (tools / "ffmpeg").chmod(0o755)
    monkeypatch.setenv("PATH", str(tools))


# Each: (photo width, --downscale-factor, images_N folders written: {N: "all" | "first" | "all but one"},
# substrings of the message, or () where the check passes)
NERFSTUDIO_DOWNSCALES = {
    "given-no-folder": (8, 2, {}, ("8 of 8 image(s)", "images_2", "--downscale-factor 2", "nerfstudio-data --downscale-factor 1")),
    "given-complete": (8, 2, {2: "all"}, ()),
    "given-partial": (8, 2, {2: "all but one"}, ("1 of 8 image(s)", "images_2/frame_00005.png", "--downscale-factor 1")),
    "small-photos-no-factor": (8, None, {2: "first"}, ()),
    "chosen-no-folder": (1700, None, {}, ()),  # nerfstudio-data then reads images/ as they are
    "chosen-partial": (1700, None, {2: "first"}, ("7 of 8 image(s)", "images_2", "1600 px", "--downscale-factor 1")),
    "chosen-complete": (1700, None, {2: "all"}, ()),
    "chosen-4-partial": (3300, None, {2: "all", 4: "first"}, ("7 of 8 image(s)", "images_4", "1600 px")),
    "chosen-2-of-3300": (3300, None, {2: "all"}, ()),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(NERFSTUDIO_DOWNSCALES))
def test_nerfstudio_data_downscaled_images_are_checked_as_the_parser_reads_them(tmp_path: Path, case: str):
    """images_N/ for a downscale factor given or chosen (photos over 1600 px with the first frame's image in
    images_N/): the check fails, in one line, exactly where nerfstudio-data would name a missing file."""
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    width, factor, folders, expected = NERFSTUDIO_DOWNSCALES[case]
    scene = generate_unbounded_scene(tmp_path / "capture", CAPTURE_SPEC)
    if width > CAPTURE_SPEC.resolution:
        widen(scene / "images", width)
    keep = {"all": lambda name: True, "first": lambda name: name == "frame_00001.png"}
    keep["all but one"] = lambda name: name != "frame_00005.png"
    for folder_factor, which in folders.items():
        write_downscaled(scene / "images", folder_factor, keep[which])
    parser = NerfstudioDataParserConfig(data=scene, downscale_factor=factor)

    assert files_nerfstudio_data_misses(parser) is bool(expected)
    assert_checked(scene, parser, expected)


def assert_checked(scene: Path, parser, expected) -> None:
    """``check_scene`` passes when nothing is ``expected``, else refuses in one line holding every expected part."""
    if not expected:
        check_scene(scene, parser)
        return
    with pytest.raises(SceneDataError) as raised:
        check_scene(scene, parser)
    message = str(raised.value)
    assert "\n" not in message
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


# Each: (photo width, --downscale-factor, images_N folder: None, "all" or "all but one", substrings or ())
COLMAP_DOWNSCALES = {
    "given-no-folder": (32, 2, None, ("images_2", "--downscale-factor 2", "colmap --downscale-factor 1", "terminal")),
    "given-complete": (32, 2, "all", ()),
    "given-partial": (32, 2, "all but one", ("1 of 8 image(s)", "images_2/r_3.png", "colmap --downscale-factor 1")),
    "chosen-no-folder": (1700, None, None, ("images_2", "1600 px", "colmap --downscale-factor 1")),
    "chosen-partial": (1700, None, "all but one", ("1 of 8 image(s)", "images_2/r_3.png", "1600 px")),
    "chosen-complete": (1700, None, "all", ()),
    "small-photos-no-folder": (32, None, None, ()),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(COLMAP_DOWNSCALES))
def test_colmap_downscaled_images_are_checked_as_the_parser_reads_them(
    tiny_scene: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
):
    """Outside a terminal the colmap parser cannot ask to write a missing images_N/ (its question ends in
    EOFError) and never notices a partial one: the check fails in one line where the parser would."""
    from nerfstudio.data.dataparsers.colmap_dataparser import ColmapDataParserConfig

    width, factor, folder, expected = COLMAP_DOWNSCALES[case]
    scene = colmap_scene(tiny_scene, tmp_path / "capture", model_folder="colmap/sparse/0")
    if width > 32:
        widen(scene / "images", width)
    if folder is not None:
        write_downscaled(scene / "images", 2, lambda name: folder == "all" or name != "r_3.png")
    parser = ColmapDataParserConfig(data=scene, downscale_factor=factor, eval_mode="all")
    not_a_terminal(monkeypatch)

    assert colmap_parser_misses_or_asks(parser) is bool(expected)
    assert_checked(scene, parser, expected)


def colmap_parser_misses_or_asks(parser) -> bool:
    """Whether the colmap parser, set up from ``parser`` with no terminal, fails (its question unanswered)
    or names an image that does not exist."""
    try:
        outputs = parser.setup().get_dataparser_outputs("train")
    except EOFError:
        return True
    return not all(Path(path).is_file() for path in outputs.image_filenames)


@pytest.mark.parametrize("with_ffmpeg", [True, False])
def test_colmap_missing_images_n_is_left_to_nerfstudios_question_in_a_terminal(
    tiny_scene: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_ffmpeg: bool
):
    """In a terminal the colmap parser offers to write images_N/ with ffmpeg: the check lets it ask when
    ffmpeg is there to answer yes with, and otherwise says to install it."""
    from nerfstudio.data.dataparsers.colmap_dataparser import ColmapDataParserConfig

    scene = colmap_scene(tiny_scene, tmp_path / "capture", model_folder="colmap/sparse/0")
    a_terminal(monkeypatch, tmp_path, with_ffmpeg)
    parser = ColmapDataParserConfig(data=scene, downscale_factor=2)
    if with_ffmpeg:
        check_scene(scene, parser)
        return
    with pytest.raises(SceneDataError, match=r"images_2 .*install ffmpeg.*colmap --downscale-factor 1"):
        check_scene(scene, parser)


# Each: transforms.json edit -> substrings of the message, or () where the check passes.
MASK_CASES = {
    "all-present": (lambda scene: None, ()),
    "one-missing": (lambda scene: (scene / "masks" / "frame_00004.png").unlink(), ("1 of 8 mask(s)", "masks/frame_00004.png", "mask_path")),
    "some-frames-without": (
        lambda scene: edit_transforms(scene, lambda meta: meta["frames"][2].pop("mask_path")), ('7 of 8 frames have a "mask_path"', "frame 2", "every frame or none"),
    ),
    "corrupt": (lambda scene: (scene / "masks" / "frame_00002.png").write_bytes(b"no PNG"), ("masks/frame_00002.png", "cannot be decoded")),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(MASK_CASES))
def test_mask_paths_in_transforms_are_checked(tmp_path: Path, case: str):
    """Every frame's ``mask_path`` must name a mask that decodes, and all frames have one or none: the
    check fails where nerfstudio-data would (an assertion or a missing file at load)."""
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    scene = with_masks(generate_unbounded_scene(tmp_path / "capture", CAPTURE_SPEC), "images")
    change, expected = MASK_CASES[case]
    change(scene)
    parser = NerfstudioDataParserConfig(data=scene, downscale_factor=1)

    if case != "corrupt":  # nerfstudio's parser does not open masks; a corrupt one fails at load
        assert files_nerfstudio_data_misses(parser) is bool(expected)
    if not expected:
        check_scene(scene, parser)
        return
    with pytest.raises(SceneDataError) as raised:
        check_scene(scene, parser)
    for part in expected:
        assert part in str(raised.value), f"{part!r} not in {raised.value}"


def test_masks_are_read_from_masks_n_at_a_downscale_factor(tmp_path: Path):
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    scene = generate_unbounded_scene(tmp_path / "capture", CAPTURE_SPEC)
    write_downscaled(scene / "images", 2)
    with_masks(scene, "images")
    parser = NerfstudioDataParserConfig(data=scene, downscale_factor=2)

    with pytest.raises(SceneDataError, match=r"8 of 8 mask\(s\) .* missing from .*masks_2"):
        check_scene(scene, parser)
    write_downscaled(scene / "masks", 2)
    check_scene(scene, parser)
    assert not files_nerfstudio_data_misses(parser)


@pytest.mark.parametrize("camera_model", ["opencv", "KANNALA_BRANDT", None])
def test_unknown_camera_model_is_one_line(tmp_path: Path, camera_model):
    """nerfstudio-data looks ``camera_model`` up in its table (a KeyError at load): the check names the ones
    it knows, and the close one where there is one; every known name passes, as the parser reads it."""
    from nerfstudio.cameras.cameras import CAMERA_MODEL_TO_TYPE
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    scene = generate_unbounded_scene(tmp_path / "capture", CAPTURE_SPEC)
    parser = NerfstudioDataParserConfig(data=scene, downscale_factor=1)
    transforms = edit_transforms(scene, lambda meta: meta.update(camera_model=camera_model))

    assert files_nerfstudio_data_misses(parser)
    with pytest.raises(SceneDataError) as raised:
        check_scene(scene, parser)
    message = str(raised.value)
    assert str(transforms) in message and f"camera_model {camera_model!r}" in message and "OPENCV_FISHEYE" in message
    assert ("did you mean 'OPENCV'" in message) is (camera_model == "opencv")
    for name in CAMERA_MODEL_TO_TYPE:
        edit_transforms(scene, lambda meta: meta.update(camera_model=name))
        check_scene(scene, parser)


@pytest.mark.parametrize("model_folder", ["sparse/0", "colmap/sparse/0"])
def test_colmap_folder_given_to_nerfstudio_data_names_the_colmap_subcommand(
    tiny_scene: Path, tmp_path: Path, model_folder: str
):
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    scene = colmap_scene(tiny_scene, tmp_path / "capture", model_folder=model_folder)
    flag = "" if model_folder == "colmap/sparse/0" else f" --colmap-path {model_folder}"

    with pytest.raises(SceneDataError) as raised:
        check_scene(scene, NerfstudioDataParserConfig())
    message = str(raised.value)
    assert "no transforms.json" in message and str(scene / model_folder) in message
    assert message.endswith(f"add the subcommand: ... colmap{flag} --data {scene}"), message


def nerfstudio_capture(tiny_scene: Path, out: Path) -> Path:
    """A nerfstudio-format capture (train PNGs, transforms.json with intrinsics) of the tiny scene."""
    scene = capture_without_intrinsics(tiny_scene, out)
    edit_transforms(scene, lambda meta: meta.update(fl_x=46.0, fl_y=46.0, cx=16.0, cy=16.0, w=32, h=32))
    return scene


def missing_mask(scene: Path) -> str:
    with_masks(scene, "train")
    (scene / "masks" / "r_1.png").unlink()
    return str(scene / "masks" / "r_1.png")


# Each: (tiny scene, work folder) -> (ns-train arguments after the method flags, substrings of the line).
NS_TRAIN_CASES = {
    "nerfstudio-data-without-images_2": lambda t, w: (
        ("nerfstudio-data", "--data", nerfstudio_capture(t, w / "c"), "--downscale-factor", "2"),
        (str(w / "c" / "images_2"), "--downscale-factor 1"),
    ),
    "colmap-without-images_2": lambda t, w: (
        ("colmap", "--data", colmap_scene(t, w / "c", model_folder="colmap/sparse/0"), "--downscale-factor", "2"),
        (str(w / "c" / "images_2"), "colmap --downscale-factor 1"),
    ),
    "missing-mask": lambda t, w: (("--data", nerfstudio_capture(t, w / "c")), (missing_mask(w / "c"), "mask_path")),
    "unknown-camera-model": lambda t, w: (
        ("--data", nerfstudio_capture(t, w / "c")),
        (str(edit_transforms(w / "c", lambda meta: meta.update(camera_model="pinhole"))), "'pinhole'", "PINHOLE"),
    ),
    "colmap-folder-to-nerfstudio-data": lambda t, w: (
        ("--data", colmap_scene(t, w / "c")), (str(w / "c" / "sparse/0"), f"colmap --colmap-path sparse/0 --data {w / 'c'}"),
    ),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(NS_TRAIN_CASES))
def test_ns_train_stops_in_one_line_before_the_parser_fails(run_cli, tiny_scene: Path, tmp_path: Path, case: str):
    """As the user types it, stdin not a terminal: one ``error:`` line, no stack trace, nothing loaded."""
    parser_args, expected = NS_TRAIN_CASES[case](tiny_scene, tmp_path)

    code, out, err = run_cli("ns-train", "accel-ngp", *NS_TRAIN_FLAGS, "--output-dir", tmp_path / "out", *parser_args)

    print(assert_one_line_error(code, out, err, *expected))
