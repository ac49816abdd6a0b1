"""nerfstudio's entry points on every kind of run this package makes, as a user reaches them.

Each kind of run (accel-ngp with its defaults, accel-ngp with every non-default model technique on, accel-nerfacto)
is trained once by ``ns-train`` on a generated scene; then ``ns-eval``, ``ns-render`` (a camera path and
``interpolate``), ``ns-export`` (``pointcloud``, ``poisson``, ``tsdf``, ``cameras``), ``ns-viewer``, a resume with
``--load-dir`` and a warm start with ``--pipeline.model.init-from`` run on it as console scripts. Training from
Python through nerfstudio's ``train_loop`` is tests/engine/test_train_loop.py's.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import List, Tuple

import pytest
import yaml

from conftest import cli_env, console_script, ns_export_missing_reason, run_cli
from headless_browser import WatchedTraining, chromium_missing_reason, first_frame_at_least, free_port, viewer_port

pytestmark = pytest.mark.slow

RUNS = {
    "accel-ngp": ("accel-ngp", []),
    "accel-ngp-techniques": (
        "accel-ngp",
        [
            "--pipeline.model.coarse-to-fine-steps",
            "4",
            "--pipeline.model.gradient-checkpointing",
            "True",
            "--pipeline.model.occupancy.culling-first-samples",
            "8",
            "--pipeline.model.table-growth-step",
            "3",
        ],
    ),
    "accel-nerfacto": ("accel-nerfacto", []),
}
"""Kind of run -> (method, flags added to ns-train's)."""

STEPS = 4
NOISE = (
    "Traceback",
    "Mixed precision is disabled",
    "GradScaler",
    "non-tuple sequence",
    "requires_grad=True to a scalar",
    "step skipped",
)
"""What a clean training run never prints."""


def ns_train(method: str, output_dir: Path, scene: Path, *flags: str, steps: int = STEPS) -> Tuple[int, str]:
    """``ns-train METHOD ... blender-data`` on CPU as a user types it: ``(exit code, stdout + stderr)``."""
    code, out, err = run_cli(
        "ns-train",
        method,
        "--data",
        scene,
        "--output-dir",
        output_dir,
        "--experiment-name",
        "surface",
        "--timestamp",
        "run",
        "--max-num-iterations",
        steps,
        "--steps-per-save",
        2,
        "--vis",
        "tensorboard",
        *flags,
        "blender-data",
        timeout=300,
    )
    return code, out + err


@pytest.fixture(scope="module", params=list(RUNS))
def run(request, tiny_scene, tmp_path_factory) -> Tuple[str, List[str], Path, str]:
    """``(method, flags, run folder, ns-train's output)`` of one kind of run."""
    method, flags = RUNS[request.param]
    output_dir = tmp_path_factory.mktemp(request.param)
    code, output = ns_train(method, output_dir, tiny_scene, *flags)
    assert code == 0, output[-4000:]
    return method, flags, output_dir / "surface" / method / "run", output


def tool(*args, timeout: float = 300.0) -> str:
    """A nerfstudio console script that must succeed: its output."""
    code, out, err = run_cli(*map(str, args), timeout=timeout)
    assert code == 0 and "Traceback" not in err, (out + err)[-4000:]
    return out + err


def test_ns_train_trains_and_says_nothing_alarming(run):
    _, _, folder, output = run
    assert (folder / "config.yml").is_file()
    assert sorted(path.name for path in (folder / "nerfstudio_models").glob("step-*.ckpt"))[-1] == "step-000000003.ckpt"
    assert [noise for noise in NOISE if noise in output] == [], output[-4000:]


def test_ns_eval_scores_the_test_views(run, tmp_path):
    _, _, folder, _ = run
    tool("ns-eval", "--load-config", folder / "config.yml", "--output-path", tmp_path / "eval.json")
    results = json.loads((tmp_path / "eval.json").read_text())["results"]
    assert math.isfinite(results["psnr"]) and 0.0 < results["ssim"] <= 1.0


def test_ns_render_interpolate_and_a_camera_path(run, tmp_path, tiny_scene):
    _, _, folder, _ = run
    config = folder / "config.yml"
    tool(
        "ns-render",
        "interpolate",
        "--load-config",
        config,
        "--output-path",
        tmp_path / "interpolated",
        "--output-format",
        "images",
        "--interpolation-steps",
        1,
        "--pose-source",
        "train",
    )
    assert len(list((tmp_path / "interpolated").glob("*.jpg"))) >= 2
    frames = json.loads((tiny_scene / "transforms_test.json").read_text())
    view = {
        "camera_to_world": [value for row in frames["frames"][0]["transform_matrix"] for value in row],
        "fov": math.degrees(frames["camera_angle_x"]),
        "aspect": 1.0,
    }
    path = {"camera_type": "perspective", "render_height": 24, "render_width": 24, "seconds": 1.0}
    (tmp_path / "path.json").write_text(json.dumps({**path, "camera_path": [view, view]}))
    tool(
        "ns-render",
        "camera-path",
        "--load-config",
        config,
        "--camera-path-filename",
        tmp_path / "path.json",
        "--output-path",
        tmp_path / "path_frames",
        "--output-format",
        "images",
    )
    assert len(list((tmp_path / "path_frames").glob("*.jpg"))) == 2


SMALL_TEXTURE = ["--target-num-faces", 500, "--num-pixels-per-side", 128]
"""Mesh exports texture their mesh by rendering it: with nerfstudio's defaults (the whole mesh, 2048 px) that
alone ran past 6 minutes on this 2-core CPU."""
TSDF_BOX = {"accel-nerfacto": ["--bounding-box-min", -128, -128, -128, "--bounding-box-max", 128, 128, 128]}
"""Method -> the box ``ns-export tsdf`` meshes (its default: [-1, 1]^3). A 4-step accel-nerfacto run renders its depth
about 80 units out (nerfacto's contracted far space, still untrained), so inside the default box its TSDF holds no
surface and scikit-image's marching cubes refuses it; an 8-unit-voxel box around that depth meshes it."""


@pytest.mark.skipif(bool(ns_export_missing_reason()), reason=ns_export_missing_reason() or "ok")
@pytest.mark.parametrize(
    "export, flags, written",
    [
        ("pointcloud", ["--num-points", 2000, "--remove-outliers", "False"], "point_cloud.ply"),
        ("poisson", ["--num-points", 2000, "--remove-outliers", "False", *SMALL_TEXTURE], "poisson_mesh.ply"),
        ("tsdf", ["--resolution", 32, "--downscale-factor", 1, "--batch-size", 4, *SMALL_TEXTURE], "tsdf_mesh.ply"),
        ("cameras", [], "transforms_train.json"),
    ],
)
def test_ns_export_writes_its_file(run, tmp_path, export, flags, written):
    method, _, folder, _ = run
    if export == "tsdf":
        flags = [*flags, *TSDF_BOX.get(method, [])]
    tool("ns-export", export, "--load-config", folder / "config.yml", "--output-dir", tmp_path, *flags)
    assert (tmp_path / written).is_file() and (tmp_path / written).stat().st_size > 0


@pytest.mark.skipif(bool(chromium_missing_reason()), reason=chromium_missing_reason() or "ok")
def test_ns_viewer_serves_a_frame_to_a_page(run, tmp_path):
    """ns-viewer on the run, its page opened in headless Chromium: a rendered frame arrives."""
    _, _, folder, _ = run
    port, log = free_port(), tmp_path / "ns-viewer.log"
    command = [console_script("ns-viewer"), "--load-config", str(folder / "config.yml")]
    command += ["--viewer.websocket-port", str(port), "--viewer.websocket-host", "127.0.0.1"]
    with log.open("w") as sink:
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env=cli_env(), start_new_session=True
        )
    with WatchedTraining(process, port) as viewer:
        viewer.port = viewer_port(log, process, timeout=180)
        _, (width, height) = first_frame_at_least(viewer.open_page(), 1, timeout=240)
    assert width > 0 and height > 0, log.read_text()[-3000:]


def test_resume_with_load_dir_continues_to_the_total(run, tmp_path, tiny_scene):
    method, flags, folder, _ = run
    resumed = tmp_path / "resumed"
    code, output = ns_train(
        method, resumed, tiny_scene, *flags, "--load-dir", folder / "nerfstudio_models", steps=STEPS + 2
    )
    assert code == 0, output[-4000:]
    assert f"Resuming from {folder / 'nerfstudio_models' / 'step-000000003.ckpt'}" in " ".join(output.split())
    checkpoints = sorted(
        path.name for path in (resumed / "surface" / method / "run" / "nerfstudio_models").glob("*.ckpt")
    )
    assert checkpoints[-1] == f"step-{STEPS + 1:09d}.ckpt"


def test_warm_start_from_the_run(run, tmp_path, tiny_scene):
    method, flags, folder, _ = run
    code, output = ns_train(method, tmp_path, tiny_scene, *flags, "--pipeline.model.init-from", folder, steps=2)
    assert code == 0, output[-4000:]
    line = " ".join(output.split())
    assert f"Warm start from {folder / 'nerfstudio_models' / 'step-000000003.ckpt'}" in line
    config = yaml.load((tmp_path / "surface" / method / "run" / "config.yml").read_text(), Loader=yaml.Loader)
    assert Path(config.pipeline.model.init_from) == folder
