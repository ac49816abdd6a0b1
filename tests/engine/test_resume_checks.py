"""Resuming (``--load-dir``) from a checkpoint of another model stops in one line that names what differs, before
anything is loaded: nerfstudio would load what fits, drop the rest and fail in the optimizer's load."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from accel_test_helpers import make_trainer, snapshot, train_run
from nerfstudio_accel.methods import accel_nerfacto
from nerfstudio_accel.models.accel_ngp import AutoCameraOptimizerConfig


def refusal(scene: Path, output_dir: Path, load_dir: Path, **kwargs) -> str:
    """The one line a resume from ``load_dir`` stops with."""
    resumed = make_trainer(scene, output_dir, setup=False, load_dir=load_dir, **kwargs)
    with pytest.raises(SystemExit) as stop:
        resumed.setup()
    message = str(stop.value)
    assert message.startswith("error: ") and "\n" not in message, message
    return message


POSE_REFINEMENT = {"camera_optimizer": AutoCameraOptimizerConfig(mode="SO3xR3")}


def test_resume_with_pose_refinement_switched_off_names_the_flag(tiny_scene, tmp_path):
    source = train_run(tiny_scene, tmp_path / "a", 2, model=POSE_REFINEMENT)
    message = refusal(tiny_scene, tmp_path / "b", source.checkpoint_dir)
    assert "--pipeline.model.camera-optimizer.mode SO3xR3 (this run: off)" in message


def test_resume_of_another_methods_run_names_the_method(tiny_scene, tmp_path):
    source = train_run(tiny_scene, tmp_path / "a", 2, method=accel_nerfacto.config)
    message = refusal(tiny_scene, tmp_path / "b", source.checkpoint_dir)
    assert "accel-nerfacto" in message and f"ns-train accel-nerfacto --load-dir {source.checkpoint_dir}" in message


def tcnn_checkpoint(source, folder: Path) -> Path:
    """``source``'s run as a tiny-cuda-nn run leaves it (simulated on CPU): each MLP's layers one flat
    ``tcnn_encoding.params`` tensor, ``implementation: tcnn`` in config.yml."""
    run = folder / "run"
    (run / "nerfstudio_models").mkdir(parents=True)
    state = torch.load(next(source.checkpoint_dir.glob("step-*.ckpt")), map_location="cpu")
    pipeline = {}
    for key, value in state["pipeline"].items():
        if ".layers." in key:
            prefix = key.split(".layers.")[0]
            pipeline[f"{prefix}.tcnn_encoding.params"] = torch.zeros(8)
        else:
            pipeline[key] = value
    state["pipeline"] = pipeline
    torch.save(state, run / "nerfstudio_models" / "step-000000001.ckpt")
    config = yaml.load((source.checkpoint_dir.parent / "config.yml").read_text(), Loader=yaml.Loader)
    config.pipeline.model.implementation = "tcnn"
    (run / "config.yml").write_text(yaml.dump(config))
    return run / "nerfstudio_models"


def test_resume_of_a_tiny_cuda_nn_run_on_cpu_names_the_implementation(tiny_scene, tmp_path):
    source = train_run(tiny_scene, tmp_path / "a", 2)
    message = refusal(tiny_scene, tmp_path / "b", tcnn_checkpoint(source, tmp_path / "gpu"))
    assert "--pipeline.model.implementation tcnn (this run: torch)" in message


def test_a_checkpoint_without_its_config_still_stops_in_one_line(tiny_scene, tmp_path):
    source = train_run(tiny_scene, tmp_path / "a", 2, model=POSE_REFINEMENT)
    (source.checkpoint_dir.parent / "config.yml").unlink()
    message = refusal(tiny_scene, tmp_path / "b", source.checkpoint_dir)
    assert "camera_optimizer.pose_adjustment" in message


def test_a_matching_resume_loads(tiny_scene, tmp_path):
    source = train_run(tiny_scene, tmp_path / "a", 2)
    saved = snapshot(source)
    resumed = make_trainer(tiny_scene, tmp_path / "b", load_dir=source.checkpoint_dir)
    assert resumed._start_step == 2
    for before, after in zip(saved[0], snapshot(resumed)[0]):
        assert torch.equal(before, after)


def test_a_block_count_is_named_by_its_pipeline_flag():
    import copy

    from nerfstudio_accel.engine.resume_checks import model_flag_differences
    from nerfstudio_accel.methods import accel_ngp

    saved, current = copy.deepcopy(accel_ngp.config.pipeline.model), copy.deepcopy(accel_ngp.config.pipeline.model)
    saved.spatial_blocks = 2
    assert model_flag_differences(saved, current) == ["--pipeline.spatial-blocks 2 (this run: 1)"]


def test_a_split_run_whose_tables_have_another_layout_says_to_train_again(tiny_scene, tmp_path):
    """A split object scene saved before its blocks kept one model's lattice (simulated: its block tables cut to
    another size, the flags the same) stops in one line that says so, not by asking for flags it already has."""
    source = train_run(tiny_scene, tmp_path / "a", 2, pipeline={"spatial_blocks": 2})
    run = tmp_path / "old" / "run"
    (run / "nerfstudio_models").mkdir(parents=True)
    state = torch.load(next(source.checkpoint_dir.glob("step-*.ckpt")), map_location="cpu")
    tables = [key for key in state["pipeline"] if key.endswith(".field.fields.0.position_encoding.table")]
    assert tables, "the run holds block 0's table"
    for key in state["pipeline"]:
        if key.endswith(".position_encoding.table") and ".field.fields." in key:
            state["pipeline"][key] = state["pipeline"][key][:-16]
    torch.save(state, run / "nerfstudio_models" / "step-000000001.ckpt")
    (run / "config.yml").write_text((source.checkpoint_dir.parent / "config.yml").read_text())
    message = refusal(tiny_scene, tmp_path / "b", run / "nerfstudio_models", pipeline={"spatial_blocks": 2})
    assert "another layout" in message and "train it again" in message
