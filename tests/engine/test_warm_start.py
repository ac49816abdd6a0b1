"""Warm start (--pipeline.model.init-from): which tensors load from another run, and what is reported."""

from __future__ import annotations

import shutil

import pytest
import torch

from accel_test_helpers import make_trainer, run_steps
from nerfstudio_accel.engine.warm_start import checkpoint_of, network_tensor_names, warm_start
from nerfstudio_accel.errors import CheckpointError


@pytest.fixture(scope="module")
def source_run(tiny_scene, tmp_path_factory):
    """A run folder trained 3 steps on the tiny scene, with config.yml and a checkpoint; and its model's state."""
    torch.manual_seed(0)
    trainer = make_trainer(tiny_scene, tmp_path_factory.mktemp("source"))
    run_steps(trainer, 0, 3)
    trainer.config.save_config()
    trainer.save_checkpoint(2)
    state = {name: tensor.clone() for name, tensor in trainer.pipeline.model.state_dict().items()}
    return trainer.base_dir, state


def test_same_scene_loads_every_tensor_and_a_fresh_optimizer(tiny_scene, source_run, tmp_path, capsys):
    run_folder, source_state = source_run
    torch.manual_seed(1)
    trainer = make_trainer(tiny_scene, tmp_path, model={"init_from": run_folder})
    state = trainer.pipeline.model.state_dict()
    assert state.keys() == source_state.keys()
    for name, tensor in state.items():
        assert torch.equal(tensor, source_state[name]), name
    assert all(not optimizer.state for optimizer in trainer.optimizers.optimizers.values())
    printed = capsys.readouterr().out.replace("\n", "")
    assert "Warm start from" in printed and "same scene" in printed and f"loaded {len(state)} tensors" in printed


def test_another_scene_loads_the_networks_only(tiny_scene, source_run, tmp_path, capsys):
    """A copy of the scene in another folder counts as another scene: the MLPs load; the hash table,
    occupancy grid, scene box and per-image tensors keep this run's own values."""
    run_folder, source_state = source_run
    other_scene = tmp_path / "other_scene"
    shutil.copytree(tiny_scene, other_scene)
    torch.manual_seed(1)
    trainer = make_trainer(other_scene, tmp_path / "run", model={"init_from": run_folder})
    model = trainer.pipeline.model
    networks = network_tensor_names(model)
    assert any(name.startswith("field.density_mlp.") for name in networks)
    assert "field.position_encoding.table" not in networks
    state = model.state_dict()
    for name, tensor in state.items():
        if name in networks:
            assert torch.equal(tensor, source_state[name]), name
    assert not torch.equal(state["field.position_encoding.table"], source_state["field.position_encoding.table"])
    printed = capsys.readouterr().out.replace("\n", "")
    assert "another scene: networks only" in printed and f"loaded {len(networks)} tensors" in printed
    assert "scene tensors" in printed


def test_a_checkpoint_file_of_another_shape_skips_what_does_not_fit(tiny_scene, source_run, tmp_path):
    """A .ckpt given directly; a model with a smaller hash table loads the MLPs and says why the table did not."""
    run_folder, _ = source_run
    checkpoint = checkpoint_of(run_folder)
    assert checkpoint.suffix == ".ckpt" and checkpoint_of(checkpoint) == checkpoint
    trainer = make_trainer(tiny_scene, tmp_path, model={"log2_hashmap_size": 10})
    datamanager = trainer.config.pipeline.datamanager
    report = warm_start(trainer.pipeline.model, checkpoint, datamanager.data)
    assert report.same_scene and report.step == 2
    assert report.skipped["field.position_encoding.table"] == "of another shape"
    assert "field.density_mlp.layers.0.weight" in report.loaded
    assert "\n" not in report.line()


def test_a_path_without_checkpoint_is_refused_in_one_line(tiny_scene, tmp_path):
    with pytest.raises(CheckpointError) as refused:
        checkpoint_of(tmp_path)
    message = str(refused.value)
    assert "\n" not in message and str(tmp_path) in message and "init-from" in message
