"""nerfstudio's own tools on an accel run folder as a user has it: after a save that crashed, without the
photos, on a device the run's sampler backend cannot use, and where the scene is checked.

One small run is trained in process on a nerfstudio-data capture (the occupancy sampler, so the sampler
backend matters); ``ns-eval``, ``ns-render`` and ``ns-viewer`` then run as the console scripts."""

from __future__ import annotations

import json
import logging
import math
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml
from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig
from nerfstudio.utils.eval_utils import eval_setup

from accel_test_helpers import make_trainer
from conftest import cli_env, console_script
from nerfstudio_accel import distributed
from nerfstudio_accel.data import scene_checks
from nerfstudio_accel.engine import trainer as trainer_module
from nerfstudio_accel.scenes.unbounded_scene import UnboundedSceneSpec, generate_unbounded_scene

pytestmark = pytest.mark.slow

SPEC = UnboundedSceneSpec(num_train=6, num_val=1, num_test=2, resolution=24, seed=0)


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    return generate_unbounded_scene(tmp_path_factory.mktemp("capture"), SPEC)


def train(scene: Path, output_dir: Path, steps: int = 3, **model):
    """A short accel-ngp run as ns-train makes it: config.yml saved before the data is read, then training."""
    trainer = make_trainer(
        scene,
        output_dir,
        setup=False,
        dataparser=NerfstudioDataParserConfig(),
        max_num_iterations=steps,
        steps_per_save=1000,
        model={"sampler": "occupancy", **model},
        resolve=False,
    )
    trainer.setup()
    trainer.train()
    return trainer


@pytest.fixture(scope="module")
def crashed_run(capture, tmp_path_factory):
    """A run whose last save crashed between writing the checkpoint and renaming it into place."""
    trainer = train(capture, tmp_path_factory.mktemp("run"))
    monkeypatch = pytest.MonkeyPatch()

    def power_cut(source, target):
        raise OSError("simulated crash during the rename")

    monkeypatch.setattr(trainer_module.os, "replace", power_cut)
    try:
        with pytest.raises(OSError, match="simulated crash"):
            trainer.save_checkpoint(3)
    finally:
        monkeypatch.undo()
    return trainer


def run_tool(*args: str, timeout: float = 300.0):
    """A nerfstudio console script to completion: ``(code, stdout + stderr)``."""
    done = subprocess.run(
        [console_script(args[0]), *map(str, args[1:])],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
    )
    return done.returncode, done.stdout + done.stderr


def test_a_crashed_save_leaves_a_partial_file_outside_the_checkpoint_folder(crashed_run):
    """The checkpoint folder holds complete checkpoints only (nerfstudio's tools parse every name in it);
    the interrupted write sits beside it, and a resume clears it."""
    checkpoints = crashed_run.checkpoint_dir
    assert [path.name for path in checkpoints.iterdir()] == ["step-000000002.ckpt"]
    partial = trainer_module.partial_checkpoint_dir(checkpoints)
    assert [path.name.split(".ckpt")[0] for path in partial.iterdir()] == ["step-000000003"]
    assert partial.parent == checkpoints.parent, "same folder tree, so the rename stays on one filesystem"


def test_ns_eval_ns_render_and_ns_viewer_open_a_run_after_a_crashed_save(crashed_run, tmp_path):
    config = crashed_run.base_dir / "config.yml"
    code, output = run_tool("ns-eval", "--load-config", config, "--output-path", tmp_path / "eval.json")
    assert code == 0, output[-3000:]
    assert (tmp_path / "eval.json").is_file()

    code, output = run_tool(
        "ns-render",
        "dataset",
        "--load-config",
        config,
        "--output-path",
        tmp_path / "renders",
        "--split",
        "test",
        "--rendered-output-names",
        "rgb",
        "num_samples_per_ray",
    )
    assert code == 0, output[-3000:]
    for name in ("rgb", "num_samples_per_ray"):
        assert len(list((tmp_path / "renders" / "test" / name).rglob("*.jpg"))) == SPEC.num_test, (
            f"no {name} renders\n{output[-2000:]}"
        )

    assert_ns_viewer_serves(config)


def assert_ns_viewer_serves(config: Path, timeout: float = 240.0) -> None:
    """ns-viewer loads the checkpoint, starts its server and keeps running (it serves until stopped)."""
    process = subprocess.Popen(
        [console_script("ns-viewer"), "--load-config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
    )
    output = []
    watchdog = threading.Timer(timeout, process.kill)  # a silent hang ends the loop below instead of the test run
    watchdog.start()
    try:
        assert process.stdout is not None
        for line in process.stdout:  # ends when the process exits
            output.append(line)
            if "Done loading checkpoint" in line:
                break
        assert any("Done loading checkpoint" in line for line in output), (
            "ns-viewer did not load the checkpoint\n" + "".join(output)[-3000:]
        )
        time.sleep(5.0)  # scene set-up and the first render happen next; a failure there ends the process
        assert process.poll() is None, "ns-viewer exited\n" + "".join(output)[-3000:] + process.stdout.read()[-3000:]
    finally:
        watchdog.cancel()
        process.kill()
        process.wait()


@pytest.mark.skipif(
    shutil.which("ffmpeg") is None, reason="ns-render camera-path needs ffmpeg on PATH (.ci/run installs Debian's)"
)
def test_ns_render_works_from_config_and_checkpoint_without_the_photos(capture, tmp_path):
    """Rendering a camera path needs the run folder, not the images: nerfstudio's inference mode reads
    none, and neither may the accel pipeline."""
    scene = shutil.copytree(capture, tmp_path / "capture")
    trainer = train(scene, tmp_path / "run")
    shutil.rmtree(scene / "images")
    camera = trainer.pipeline.datamanager.train_dataset.cameras[0]
    height, width = int(camera.height), int(camera.width)
    pose = torch.cat([camera.camera_to_worlds, torch.tensor([[0.0, 0.0, 0.0, 1.0]])]).flatten().tolist()
    view = {
        "camera_to_world": pose,
        "fov": math.degrees(2 * math.atan(height / (2 * float(camera.fy)))),
        "aspect": width / height,
    }
    path = {
        "camera_type": "perspective",
        "render_height": height,
        "render_width": width,
        "seconds": 1.0,
        "camera_path": [view, view],
    }
    (tmp_path / "camera_path.json").write_text(json.dumps(path))
    code, output = run_tool(
        "ns-render",
        "camera-path",
        "--load-config",
        trainer.base_dir / "config.yml",
        "--camera-path-filename",
        tmp_path / "camera_path.json",
        "--output-path",
        tmp_path / "frames",
        "--output-format",
        "images",
    )
    assert code == 0, output[-3000:]
    assert len(list((tmp_path / "frames").glob("*.jpg"))) == 2, output[-3000:]


def test_the_scene_is_checked_once_before_config_yml_is_written(capture, tmp_path, monkeypatch):
    """Every image is verified once, as ns-train saves config.yml (before it starts the ranks); building a
    pipeline to render or evaluate verifies none, and neither does a rank setting up from the saved config."""
    verified = []
    check_images = scene_checks._check_images

    def counting_check_images(paths, *args, **kwargs):
        paths = list(paths)
        verified.extend(paths)
        return check_images(paths, *args, **kwargs)

    monkeypatch.setattr(scene_checks, "_check_images", counting_check_images)
    trainer = train(capture, tmp_path / "run", steps=1)
    assert len(verified) == SPEC.num_train + SPEC.num_val + SPEC.num_test  # transforms.json lists every split

    verified.clear()
    for test_mode in ("test", "inference"):
        eval_setup(trainer.base_dir / "config.yml", test_mode=test_mode)
    assert verified == []

    monkeypatch.setattr(distributed, "rank", lambda: 1)
    rank_config = yaml.load((trainer.base_dir / "config.yml").read_text(), Loader=yaml.Loader)
    rank_config.output_dir = tmp_path / "rank1"
    rank_config.setup(local_rank=0, world_size=1).setup()
    assert verified == []


def test_a_run_trained_with_nerfacc_opens_on_a_cpu(crashed_run, tmp_path):
    """config.yml as a CUDA run with ``--pipeline.model.occupancy.backend nerfacc`` saves it: ns-eval on this
    CPU marches the same grid with auto's pick there, after one warning."""
    config = yaml.load((crashed_run.base_dir / "config.yml").read_text(), Loader=yaml.Loader)
    config.pipeline.model.occupancy.backend = "nerfacc"
    saved = tmp_path / "config.yml"
    saved.write_text(yaml.dump(config), "utf8")
    code, output = run_tool("ns-eval", "--load-config", saved, "--output-path", tmp_path / "eval.json")
    assert code == 0, output[-3000:]
    assert output.count("sampler backend nerfacc cannot run on cpu") == 1, output[-3000:]


def test_a_config_yml_with_the_flat_sampler_options_of_older_runs_opens(crashed_run, tmp_path):
    """config.yml as runs saved it before the occupancy options had their own group (``sampler_backend``,
    ``grid_resolution``, ... on the model config): ns-eval opens it with the values moved, here a backend
    this CPU cannot run, which it warns about once and replaces."""
    config = yaml.load((crashed_run.base_dir / "config.yml").read_text(), Loader=yaml.Loader)
    model = config.pipeline.model
    occupancy = vars(model).pop("occupancy")
    del vars(model)["proposal"]
    vars(model).update(
        sampler_backend="nerfacc",
        grid_resolution=occupancy.resolution,
        max_samples_per_ray=occupancy.max_samples_per_ray,
        grid_update_every=occupancy.update_every,
    )
    saved = tmp_path / "config.yml"
    saved.write_text(yaml.dump(config), "utf8")
    assert "grid_resolution: " in saved.read_text() and "occupancy:" not in saved.read_text()
    code, output = run_tool("ns-eval", "--load-config", saved, "--output-path", tmp_path / "eval.json")
    assert code == 0, output[-3000:]
    assert output.count("sampler backend nerfacc cannot run on cpu") == 1, output[-3000:]


def test_config_yml_holds_the_background_the_data_decided(crashed_run):
    """``--pipeline.model.background auto`` on RGB photos trains on white, written into config.yml."""
    config = yaml.load((crashed_run.base_dir / "config.yml").read_text(), Loader=yaml.Loader)
    assert config.pipeline.model.background == "white"
    assert crashed_run.pipeline.model.background_mode == "white"


@pytest.mark.parametrize(
    "asked, data, trained_on, warned",
    [
        ("auto", "rgb", "white", False),
        ("random", "rgb", "white", True),
        ("auto", "rgba", "random", False),
    ],
)
def test_the_background_follows_the_data_and_warns_only_when_asked_for(
    capture, tiny_scene, tmp_path, caplog, asked, data, trained_on, warned
):
    """Captures have no alpha: the default trains on white without a word; an explicit ``random`` says why
    it cannot apply; images with alpha train on random backgrounds."""
    with caplog.at_level(logging.WARNING):
        if data == "rgb":
            trainer = train(capture, tmp_path, steps=1, background=asked)
        else:
            trainer = make_trainer(tiny_scene, tmp_path, model={"background": asked})
    assert trainer.config.pipeline.model.background == trainer.pipeline.model.background_mode == trained_on
    warnings = [record.getMessage() for record in caplog.records if "background" in record.getMessage()]
    assert len(warnings) == int(warned), warnings
