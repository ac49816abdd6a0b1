"""Input checks for captured scenes: a COLMAP folder as nerfstudio's ``colmap`` parser reads it, and a
nerfstudio ``transforms.json`` without camera intrinsics. Each bad input stops ``ns-train`` with one line
naming what is wrong and the fix; a real phone capture (``../shared/data/fruit``) passes. ``check_scene``
picks the check by the parser config and tells whether the first training image nerfstudio reads has alpha.
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
    assert check_scene(blender, BlenderDataParserConfig()) == SceneFacts(bounded=True, images_have_alpha=True)
    assert check_scene(blender, BlenderDataParserConfig(), eval_split="inference") == SceneFacts(
        bounded=True, images_have_alpha=True
    )
    with pytest.raises(SceneDataError, match="has no transforms_test.json, which blender-data needs"):
        check_scene(blender, BlenderDataParserConfig(), eval_split="test")
    # nerfstudio-data on a Blender folder: the nerfstudio check, which names the other subcommand
    with pytest.raises(SceneDataError, match="is a Blender-format scene"):
        check_scene(blender, NerfstudioDataParserConfig())
    # colmap: with the parser's colmap_path, images_path and load_3D_points
    with pytest.raises(SceneDataError, match="--colmap-path sparse/0"):
        check_scene(colmap, ColmapDataParserConfig())
    assert check_scene(colmap, ColmapDataParserConfig(colmap_path=Path("sparse/0"))) == SceneFacts(
        bounded=False, images_have_alpha=False
    )
    (colmap / "images").rename(colmap / "photos")
    with pytest.raises(SceneDataError, match="--images-path images"):
        check_scene(colmap, ColmapDataParserConfig(colmap_path=Path("sparse/0")))
    (colmap / "sparse/0/points3D.txt").unlink()
    with pytest.raises(SceneDataError, match="no points3D.bin or points3D.txt"):
        check_scene(colmap, ColmapDataParserConfig(colmap_path=Path("sparse/0"), images_path=Path("photos")))
    no_points = ColmapDataParserConfig(colmap_path=Path("sparse/0"), images_path=Path("photos"), load_3D_points=False)
    assert check_scene(colmap, no_points) == SceneFacts(bounded=False, images_have_alpha=False)
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


@pytest.mark.parametrize("split_by", ["filenames", "fraction", "interval"])
def test_images_have_alpha_looks_at_the_first_training_image_in_nerfstudio_order(tmp_path: Path, split_by: str):
    """Photos of a capture given alpha one at a time: only the first training image in nerfstudio's order
    (frames sorted by path, then ``train_filenames`` or the ``eval_mode`` split) sets the fact, and it is the
    image nerfstudio loads first."""
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    scene = generate_unbounded_scene(tmp_path / "capture", CAPTURE_SPEC)
    meta = json.loads((scene / "transforms.json").read_text())
    meta["frames"].reverse()  # the parser sorts frames by path: the json's order does not count
    parser = NerfstudioDataParserConfig(data=scene, downscale_factor=1)
    if split_by == "filenames":
        meta["train_filenames"].remove("images/frame_00001.png")
    else:
        for split in ("train", "val", "test"):
            del meta[f"{split}_filenames"]
        parser.eval_mode = split_by  # interval: frame 0 is an eval frame
    (scene / "transforms.json").write_text(json.dumps(meta))
    first = {"filenames": "frame_00002.png", "fraction": "frame_00001.png", "interval": "frame_00002.png"}[split_by]

    assert check_scene(scene, parser).images_have_alpha is False
    with_alpha = []
    for image in sorted((scene / "images").glob("*.png")):
        rgb = image.read_bytes()
        Image.open(image).convert("RGBA").save(image)
        facts = check_scene(scene, parser)
        assert facts.images_have_alpha is nerfstudio_reads_alpha(parser)
        if facts.images_have_alpha:
            with_alpha.append(image.name)
        image.write_bytes(rgb)
    assert with_alpha == [first]
