"""The command line end to end: ns-accel-scene, ns-train accel-ngp, ns-eval, and one-line errors for bad input.

Tests marked ``slow`` start ns-train / ns-eval in a subprocess (seconds to tens of seconds each on a CPU);
``pytest -m "not slow"`` leaves the in-process checks and the scene CLI.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple

import pytest
from PIL import Image

from accel_test_helpers import assert_one_line_error
from nerfstudio_accel.data.scene_checks import check_blender_scene, check_nerfstudio_scene
from nerfstudio_accel.errors import SceneDataError

METHOD = "accel-ngp"
MAX_ITERATIONS = 30
FINAL_CHECKPOINT = f"step-{MAX_ITERATIONS - 1:09d}.ckpt"  # nerfstudio saves at the last step, 0-based
TRAIN_FLAGS = (
    "--machine.device-type",
    "cpu",
    "--vis",
    "tensorboard",
    "--max-num-iterations",
    str(MAX_ITERATIONS),
    "--steps-per-eval-image",
    "100000",
    "--steps-per-eval-batch",
    "100000",
    "--steps-per-save",
    "100000",
    "--experiment-name",
    "exp",
    "--timestamp",
    "run",
)
LOADING_STARTED = "Setting up training dataset"  # nerfstudio prints this when it starts reading images
WEIGHTS_ONLY_ENV = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"


def run_dir(output_dir: Path) -> Path:
    return output_dir / "exp" / METHOD / "run"


def ns_train(run_cli, output_dir: Path, method_args: Sequence[str], parser_args: Sequence[str], timeout: float = 300):
    """ns-train accel-ngp TRAIN_FLAGS --output-dir OUT METHOD_ARGS PARSER_ARGS -> (code, stdout, stderr)."""
    return run_cli(
        "ns-train", METHOD, *TRAIN_FLAGS, "--output-dir", str(output_dir), *method_args, *parser_args, timeout=timeout
    )


def checkpoints(output_dir: Path) -> List[Path]:
    return sorted(output_dir.rglob("*.ckpt"))


# --- ns-accel-scene ----------------------------------------------------------------------------


def test_ns_accel_scene_writes_a_blender_scene(run_cli, tmp_path: Path) -> None:
    out_dir = tmp_path / "scene"
    code, out, err = run_cli(
        "ns-accel-scene",
        out_dir,
        "--num-train",
        "3",
        "--num-val",
        "1",
        "--num-test",
        "2",
        "--resolution",
        "16",
        "--supersample",
        "1",
        timeout=60,
    )

    assert code == 0, err
    assert "wrote 6 views (3 train / 1 val / 2 test) at 16x16" in out
    for split, count in {"train": 3, "val": 1, "test": 2}.items():
        frames = json.loads((out_dir / f"transforms_{split}.json").read_text())["frames"]
        assert len(frames) == count
        assert sorted(p.name for p in (out_dir / split).iterdir()) == [f"r_{i}.png" for i in range(count)]
        with Image.open(out_dir / split / "r_0.png") as image:
            assert image.size == (16, 16) and image.mode == "RGBA"
    check_blender_scene(out_dir, ("train", "val", "test"))

    # A second run into the now non-empty folder refuses, in one line, unless --force.
    code, out, err = run_cli("ns-accel-scene", out_dir, "--resolution", "16", timeout=60)
    assert_one_line_error(code, out, err, str(out_dir), "--force")
    assert code == 2


# --- training and evaluation -------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained_run(run_cli, tiny_scene: Path, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, object]:
    """One short ns-train run on the tiny scene, shared by the tests below."""
    output_dir = tmp_path_factory.mktemp("train")
    code, out, err = ns_train(
        run_cli, output_dir, ("--pipeline.print-every", "10"), ("blender-data", "--data", str(tiny_scene))
    )
    return {"code": code, "out": out, "err": err, "output_dir": output_dir, "run_dir": run_dir(output_dir)}


@pytest.mark.slow
def test_ns_train_saves_the_final_checkpoint(trained_run) -> None:
    out, err = trained_run["out"], trained_run["err"]
    assert trained_run["code"] == 0, err[-3000:]
    assert "Traceback" not in out + err
    run = trained_run["run_dir"]
    assert (run / "config.yml").is_file()
    assert checkpoints(trained_run["output_dir"]) == [run / "nerfstudio_models" / FINAL_CHECKPOINT]

    import torch

    # our own checkpoint from this test run, so a full (non weights-only) load is safe
    state = torch.load(run / "nerfstudio_models" / FINAL_CHECKPOINT, map_location="cpu", weights_only=False)
    assert state["step"] == MAX_ITERATIONS - 1
    assert any(key.startswith("_model.field.") for key in state["pipeline"])
    assert any(key.startswith("_model.sampler.") for key in state["pipeline"])  # the occupancy grid is saved


def tensorboard_scalars(run: Path) -> Dict[str, List[float]]:
    """Every scalar series in the run's tensorboard event files: tag -> values in step order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    series: Dict[str, List[float]] = {}
    for events in sorted(run.glob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            series.setdefault(tag, []).extend(event.value for event in accumulator.Scalars(tag))
    return series


@pytest.mark.slow
def test_hard_mining_stats_reach_terminal_and_tensorboard(trained_run) -> None:
    """accel-ngp mines by default: b, B, b/B, tau_hat and pass times are logged to tensorboard at every
    log step and printed at --pipeline.print-every."""
    assert trained_run["code"] == 0, trained_run["err"][-3000:]
    scalars = tensorboard_scalars(trained_run["run_dir"])
    names = ("B", "b", "fraction", "tau_hat", "scoring_ms", "graph_forward_ms")
    for name in names:
        assert scalars.get(f"Train Metrics Dict/hard_mining_{name}"), (
            f"hard_mining_{name} not logged; tags: {sorted(scalars)}"
        )
    b_values, big_b_values = scalars["Train Metrics Dict/hard_mining_b"], scalars["Train Metrics Dict/hard_mining_B"]
    assert all(0 < b <= big_b for b, big_b in zip(b_values, big_b_values))
    printed = [line for line in trained_run["out"].splitlines() if line.startswith("hard mining, step")]
    assert len(printed) >= 2 and "b/B" in printed[0] and "tau_hat" in printed[0], trained_run["out"][-2000:]
    stalls = scalars.get("Train Metrics Dict/input_stall_fraction")  # the wait for each batch, logged at every depth
    assert stalls and all(0.0 <= value <= 1.0 for value in stalls)


@pytest.mark.slow
def test_hard_mining_off_is_one_flag(run_cli, tiny_scene: Path, tmp_path: Path) -> None:
    """--pipeline.hard-mining False (the ablation) trains ordinarily: no mining stats anywhere. (Also without
    the pipelined input sampler, whose stall is then the whole batch preparation.)"""
    code, out, err = run_cli(
        "ns-train",
        METHOD,
        *TRAIN_FLAGS[:4],
        "--max-num-iterations",
        "12",
        "--experiment-name",
        "exp",
        "--timestamp",
        "run",
        "--output-dir",
        str(tmp_path),
        "--pipeline.hard-mining",
        "False",
        "--pipeline.print-every",
        "5",
        "--pipeline.datamanager.prefetch-batches",
        "0",
        "blender-data",
        "--data",
        str(tiny_scene),
        timeout=300,
    )
    assert code == 0, err[-3000:]
    assert "hard mining, step" not in out
    scalars = tensorboard_scalars(run_dir(tmp_path))
    assert "Train Metrics Dict/psnr" in scalars and all(
        value > 0 for value in scalars["Train Metrics Dict/input_wait_ms"]
    )
    assert not any("hard_mining" in tag for tag in scalars)


def run_ns_eval(run_cli, trained_run, **kwargs) -> Tuple[int, str, str, Path]:
    if trained_run["code"] != 0:
        pytest.skip("training failed; see test_ns_train_saves_the_final_checkpoint")
    eval_json = trained_run["output_dir"] / f"eval-{len(list(trained_run['output_dir'].glob('eval-*')))}.json"
    code, out, err = run_cli(
        "ns-eval",
        "--load-config",
        trained_run["run_dir"] / "config.yml",
        "--output-path",
        eval_json,
        timeout=300,
        **kwargs,
    )
    return code, out, err, eval_json


@pytest.mark.slow
def test_ns_eval_reports_psnr_and_ssim_without_lpips(run_cli, trained_run) -> None:
    """ns-eval loads the checkpoint with torch's default weights-only loader (no numpy scalars in the
    optimizer/scheduler state) and reports psnr/ssim, leaving LPIPS out offline."""
    code, out, err, eval_json = run_ns_eval(run_cli, trained_run, drop_env=(WEIGHTS_ONLY_ENV,))

    assert code == 0, err[-3000:]
    assert "Traceback" not in out + err
    report = json.loads(eval_json.read_text())
    assert report["method_name"] == METHOD
    assert report["checkpoint"].endswith(FINAL_CHECKPOINT)
    results = report["results"]
    assert math.isfinite(results["psnr"]) and results["psnr"] > 5.0, results
    assert math.isfinite(results["ssim"]) and 0.0 < results["ssim"] <= 1.0, results
    assert not [key for key in results if "lpips" in key.lower()], results  # no AlexNet weights offline
    assert "LPIPS disabled" in out + err  # ... and the run says so instead of failing


@pytest.mark.slow
def test_ns_render_writes_rgba_images(run_cli, trained_run, tmp_path: Path) -> None:
    """ns-render dataset --rendered-output-names rgba --image-format png: images with the object's opacity
    as alpha (ns-render's default format, jpeg, has no alpha channel)."""
    if trained_run["code"] != 0:
        pytest.skip("training failed; see test_ns_train_saves_the_final_checkpoint")
    code, out, err = run_cli(
        "ns-render",
        "dataset",
        "--load-config",
        trained_run["run_dir"] / "config.yml",
        "--output-path",
        tmp_path / "renders",
        "--split",
        "test",
        "--rendered-output-names",
        "rgba",
        "--image-format",
        "png",
        timeout=300,
    )
    assert code == 0, (out + err)[-3000:]
    images = sorted((tmp_path / "renders").rglob("*.png"))
    assert len(images) == 2, images  # the tiny scene's two test views
    with Image.open(images[0]) as image:
        assert image.mode == "RGBA"
        alpha = image.getchannel("A")
        assert alpha.getextrema()[1] > 0, "something is opaque"


# --- bad input: ns-train fails fast with one line ----------------------------------------------


def copy_scene(tiny_scene: Path, tmp_path: Path) -> Path:
    scene = tmp_path / "scene"
    shutil.copytree(tiny_scene, scene)
    return scene


def corrupt_png(scene: Path) -> str:
    bad = scene / "train" / "r_3.png"
    bad.write_bytes(b"this is not a PNG file\x00\x01\x02")
    return str(bad)


def empty_frames(scene: Path, name: str = "transforms_train.json") -> str:
    transforms = scene / name
    meta = json.loads(transforms.read_text())
    meta["frames"] = []
    transforms.write_text(json.dumps(meta))
    return str(transforms)


# Each case: scene folder -> (ns-train arguments after the method flags, substrings the error line must name).
BadCase = Callable[[Path], Tuple[Tuple[str, ...], Tuple[str, ...]]]
BAD_INPUTS: Dict[str, BadCase] = {
    "missing-folder": lambda scene: (
        ("blender-data", "--data", str(scene.parent / "no-such-scene")),
        (str(scene.parent / "no-such-scene"), "does not exist", "--data"),
    ),
    "corrupt-png": lambda scene: (
        ("blender-data", "--data", str(scene)),
        (corrupt_png(scene), "cannot be decoded"),
    ),
    "empty-frames": lambda scene: (
        ("blender-data", "--data", str(scene)),
        (empty_frames(scene), "frames"),
    ),
    "blender-scene-to-nerfstudio-parser": lambda scene: (
        ("--data", str(scene)),
        (str(scene), "Blender-format", f"blender-data --data {scene}"),
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_ns_train_rejects_bad_scene_in_one_line(run_cli, tiny_scene: Path, tmp_path: Path, case: str) -> None:
    parser_args, expected = BAD_INPUTS[case](copy_scene(tiny_scene, tmp_path))
    output_dir = tmp_path / "out"

    code, out, err = ns_train(run_cli, output_dir, (), parser_args, timeout=180)

    assert_one_line_error(code, out, err, *expected)
    assert LOADING_STARTED not in out + err  # rejected before nerfstudio reads any image
    assert checkpoints(output_dir) == []


@pytest.mark.slow
def test_ns_train_refuses_a_hash_table_size_out_of_range_in_one_line(run_cli, tiny_scene: Path, tmp_path: Path) -> None:
    output_dir = tmp_path / "out"
    code, out, err = ns_train(
        run_cli, output_dir, ("--pipeline.model.log2-hashmap-size", "40"), ("blender-data", "--data", str(tiny_scene))
    )
    assert_one_line_error(code, out, err, "--pipeline.model.log2-hashmap-size 40 is out of range", "1 to 30")
    assert not list(output_dir.rglob("config.yml"))  # refused before anything is written


def test_ns_train_rejects_unknown_sampler_backend(run_cli, tiny_scene: Path, tmp_path: Path) -> None:
    output_dir = tmp_path / "out"
    code, out, err = ns_train(
        run_cli,
        output_dir,
        ("--pipeline.model.occupancy.backend", "bogus"),
        ("blender-data", "--data", str(tiny_scene)),
        timeout=180,
    )

    both = out + err
    assert code != 0
    assert "Traceback" not in both, both[-3000:]
    assert "bogus" in both and "--pipeline.model.occupancy.backend" in both
    for choice in ("'auto'", "'nerfacc'", "'torch'"):  # tyro's box: Expected one of ('auto', 'nerfacc', 'torch')
        assert choice in both, both[-3000:]
    assert not output_dir.exists()  # rejected while parsing, before anything is written


@pytest.mark.slow
def test_ns_train_nerfacc_backend_on_cpu_fails_in_one_line(run_cli, tiny_scene: Path, tmp_path: Path) -> None:
    output_dir = tmp_path / "out"
    code, out, err = ns_train(
        run_cli,
        output_dir,
        ("--pipeline.model.occupancy.backend", "nerfacc"),
        ("blender-data", "--data", str(tiny_scene)),
        timeout=180,
    )

    assert_one_line_error(
        code, out, err, "'nerfacc' cannot run here", "cpu", "--pipeline.model.occupancy.backend torch"
    )
    assert checkpoints(output_dir) == []


@pytest.mark.slow
def test_ns_train_names_the_new_flag_of_a_moved_one(run_cli, tiny_scene: Path, tmp_path: Path) -> None:
    """A sampler option under its old flat name stops ns-train in one line naming its new one."""
    output_dir = tmp_path / "out"
    code, out, err = ns_train(
        run_cli,
        output_dir,
        ("--pipeline.model.grid-resolution=32",),
        ("blender-data", "--data", str(tiny_scene)),
        timeout=180,
    )

    assert_one_line_error(
        code, out, err, "--pipeline.model.grid-resolution is now --pipeline.model.occupancy.resolution"
    )
    assert not output_dir.exists()


# --- the same checks in process ----------------------------------------------------------------


def invalid_json(scene: Path, name: str) -> str:
    path = scene / name
    path.write_text('{"camera_angle_x": 0.69, "frames": [')
    return str(path)


def missing_image(scene: Path) -> str:
    path = scene / "train" / "r_2.png"
    path.unlink()
    return str(path)


def truncated_png(scene: Path) -> str:
    path = scene / "train" / "r_1.png"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return str(path)


def resized_png(scene: Path) -> str:
    """One train view at half size: the blender parser shares one camera size and would crash stacking."""
    from PIL import Image

    path = scene / "train" / "r_4.png"
    with Image.open(path) as image:
        image.resize((image.width // 2, image.height // 2)).save(path)
    return str(path)


def png_suffix_in_file_paths(scene: Path) -> str:
    """file_path "./train/r_0.png": the blender parser appends .png and would read r_0.png.png."""
    transforms = scene / "transforms_train.json"
    meta = json.loads(transforms.read_text())
    for frame in meta["frames"]:
        frame["file_path"] += ".png"
    transforms.write_text(json.dumps(meta))
    return meta["frames"][0]["file_path"]


def frame_without_pose(scene: Path) -> str:
    transforms = scene / "transforms_train.json"
    meta = json.loads(transforms.read_text())
    del meta["frames"][1]["transform_matrix"]
    transforms.write_text(json.dumps(meta))
    return str(transforms)


def edit_json(transforms: Path, change: Callable[[dict], None]) -> str:
    """Apply ``change`` to the json's content in place; returns the file's path as a message names it."""
    meta = json.loads(transforms.read_text())
    change(meta)
    transforms.write_text(json.dumps(meta))
    return str(transforms)


def broken_pose(scene: Path, transforms_name: str, pose) -> str:
    """Frame 1's transform_matrix replaced by ``pose`` (a callable of the old one); returns its file_path."""
    transforms = scene / transforms_name
    frames = json.loads(transforms.read_text())["frames"]
    edit_json(transforms, lambda meta: meta["frames"][1].update(transform_matrix=pose(frames[1]["transform_matrix"])))
    return f"frame 1 ({frames[1]['file_path']})"


def nan_pose(matrix):
    return [
        [float("nan") if (row, col) == (0, 3) else value for col, value in enumerate(line)]
        for row, line in enumerate(matrix)
    ]


def scaled_pose(matrix):
    return [
        [value * 2 if col < 3 and row < 3 else value for col, value in enumerate(line)]
        for row, line in enumerate(matrix)
    ]


def grayscale_png(scene: Path) -> str:
    path = scene / "train" / "r_3.png"
    Image.open(path).convert("L").save(path)
    return str(path)


def as_nerfstudio_capture(scene: Path) -> Path:
    """Turn the Blender scene copy into a nerfstudio-format capture: transforms.json listing the train PNGs."""
    meta = json.loads((scene / "transforms_train.json").read_text())
    frames = [
        {"file_path": frame["file_path"].lstrip("./") + ".png", "transform_matrix": frame["transform_matrix"]}
        for frame in meta["frames"]
    ]
    capture = scene.parent / "capture"
    shutil.copytree(scene / "train", capture / "train")
    (capture / "transforms.json").write_text(
        json.dumps({"fl_x": 46.0, "fl_y": 46.0, "cx": 16.0, "cy": 16.0, "w": 32, "h": 32, "frames": frames})
    )
    return capture


def blender_cases() -> Dict[str, Callable[[Path], Tuple[Path, Tuple[str, ...], Tuple[str, ...]]]]:
    """name -> scene copy -> (folder to check, splits, substrings of the message)."""
    return {
        "missing-folder": lambda s: (s / "nope", ("train",), (str(s / "nope"), "does not exist", "--data")),
        "json-as-data": lambda s: (
            s / "transforms_train.json",
            ("train",),
            (f"--data names the file {s / 'transforms_train.json'}", f"pass --data {s}"),
        ),
        "corrupt-png": lambda s: (s, ("train",), (corrupt_png(s), "cannot be decoded", "replace or remove")),
        "truncated-png": lambda s: (s, ("train",), (truncated_png(s), "cannot be decoded")),
        "mismatched-size": lambda s: (s, ("train",), (resized_png(s), "16x16", "resize")),
        "missing-png": lambda s: (s, ("train",), ("1 image(s)", "missing", missing_image(s))),
        "empty-frames": lambda s: (s, ("train",), (empty_frames(s), "lists no frames", '"frames"')),
        "invalid-json": lambda s: (s, ("train",), (invalid_json(s, "transforms_train.json"), "not valid JSON")),
        "frame-without-pose": lambda s: (s, ("train",), (frame_without_pose(s), "frame 1", "transform_matrix")),
        "nan-pose": lambda s: (s, ("train",), (broken_pose(s, "transforms_train.json", nan_pose), "NaN")),
        "3x3-pose": lambda s: (
            s,
            ("train",),
            (broken_pose(s, "transforms_train.json", lambda m: [row[:3] for row in m[:3]]), "is 3x3", "4x4"),
        ),
        "scaled-pose": lambda s: (s, ("train",), (broken_pose(s, "transforms_train.json", scaled_pose), "not a rigid")),
        "grayscale-png": lambda s: (s, ("train",), (grayscale_png(s), "1 channel(s) (L)", "4 (RGBA)", "same channels")),
        "bad-camera-angle": lambda s: (
            s,
            ("train",),
            (edit_json(s / "transforms_train.json", lambda m: m.update(camera_angle_x=-1)), "camera_angle_x is -1"),
        ),
        "png-suffix-in-file-path": lambda s: (
            s,
            ("train",),
            (png_suffix_in_file_paths(s), "appends .png", "drop the extension"),
        ),
        "empty-val-split": lambda s: (s, ("train", "val"), (empty_frames(s, "transforms_val.json"), "frames")),
        "no-val-split": lambda s: (
            (s / "transforms_val.json").unlink() or s,
            ("train", "val"),
            ("transforms_val.json", "blender-data"),
        ),
        "nerfstudio-capture": lambda s: (
            as_nerfstudio_capture(s),
            ("train",),
            ("transforms_train.json", "use nerfstudio-data"),
        ),
    }


@pytest.mark.parametrize("case", sorted(blender_cases()))
def test_check_blender_scene_rejects_in_one_line(tiny_scene: Path, tmp_path: Path, case: str) -> None:
    folder, splits, expected = blender_cases()[case](copy_scene(tiny_scene, tmp_path))

    with pytest.raises(SceneDataError) as raised:
        check_blender_scene(folder, splits)

    message = str(raised.value)
    assert "\n" not in message
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


def nerfstudio_cases() -> Dict[str, Callable[[Path], Tuple[Path, Tuple[str, ...]]]]:
    """name -> scene copy -> (path to check, substrings of the message)."""

    def capture_with(change: Callable[[Path], str], *also: str) -> Callable[[Path], Tuple[Path, Tuple[str, ...]]]:
        def build(scene: Path) -> Tuple[Path, Tuple[str, ...]]:
            capture = as_nerfstudio_capture(scene)
            return capture, (change(capture), *also)

        return build

    return {
        "missing-folder": lambda s: (s / "nope", (str(s / "nope"), "does not exist", "--data")),
        "blender-scene": lambda s: (s, (str(s), "Blender-format", f"blender-data --data {s}")),
        "no-transforms": lambda s: ((s / "train"), (str(s / "train"), "no transforms.json", "ns-process-data")),
        "empty-frames": capture_with(lambda c: empty_frames(c, "transforms.json"), "lists no frames"),
        "invalid-json": capture_with(lambda c: invalid_json(c, "transforms.json"), "not valid JSON"),
        "corrupt-png": capture_with(corrupt_png, "cannot be decoded"),
        "missing-png": capture_with(missing_image, "missing"),
        "nan-pose": capture_with(lambda c: broken_pose(c, "transforms.json", nan_pose), "NaN"),
        "negative-focal-length": capture_with(
            lambda c: edit_json(c / "transforms.json", lambda m: m.update(fl_x=-100)), "fl_x is -100", "positive"
        ),
        "principal-point-outside": capture_with(
            lambda c: edit_json(c / "transforms.json", lambda m: m["frames"][2].update(cx=50.0)),
            "frame 2",
            "cx is 50.0, outside the image (0 to w = 32)",
        ),
    }


@pytest.mark.parametrize("case", sorted(nerfstudio_cases()))
def test_check_nerfstudio_scene_rejects_in_one_line(tiny_scene: Path, tmp_path: Path, case: str) -> None:
    path, expected = nerfstudio_cases()[case](copy_scene(tiny_scene, tmp_path))

    with pytest.raises(SceneDataError) as raised:
        check_nerfstudio_scene(path)

    message = str(raised.value)
    assert "\n" not in message
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


def test_blender_check_reads_the_files_the_parser_reads(tiny_scene: Path, tmp_path: Path) -> None:
    """The blender parser reads file_path + ".png" even when file_path has a dot in its name: so does the check."""
    scene = copy_scene(tiny_scene, tmp_path)
    (scene / "train" / "r_0.png").rename(scene / "train" / "r_0.v2.png")
    transforms = scene / "transforms_train.json"
    meta = json.loads(transforms.read_text())
    assert meta["frames"][0]["file_path"] == "./train/r_0"
    meta["frames"][0]["file_path"] = "./train/r_0.v2"
    transforms.write_text(json.dumps(meta))
    check_blender_scene(scene, ("train",))


def test_valid_scenes_pass_the_checks(tiny_scene: Path, tmp_path: Path) -> None:
    check_blender_scene(tiny_scene, ("train", "val", "test"))
    capture = as_nerfstudio_capture(copy_scene(tiny_scene, tmp_path))
    check_nerfstudio_scene(capture)
    check_nerfstudio_scene(capture / "transforms.json")  # --data may name the json itself
    assert issubclass(SceneDataError, ValueError)
