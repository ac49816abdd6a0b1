"""Training from Python through nerfstudio's own ``train_loop``, as nerfstudio's test suite, notebooks and wrapper
scripts do: a method's config taken from ``all_methods``, changed in code and never saved, is resolved where the
trainer sets up; a config.yml from before choices were resolved is still refused where a model is opened; runs
one after another in one process each log to their own folder."""

from __future__ import annotations

import copy
import re
import shutil
from pathlib import Path

import pytest
import yaml
from nerfstudio.configs.method_configs import all_methods
from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig
from nerfstudio.scripts.train import train_loop
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nerfstudio_accel.engine.trainer import AccelTrainerConfig


def config_in_code(method: str, scene: Path, output_dir: Path) -> AccelTrainerConfig:
    """``all_methods[method]`` changed in code as a script would: blender data, CPU, a few rays, 2 steps."""
    config = copy.deepcopy(all_methods[method])
    config.pipeline.datamanager.dataparser = BlenderDataParserConfig(data=scene)
    config.pipeline.datamanager.train_num_rays_per_batch = 64
    config.pipeline.target_num_samples = 1 << 10
    config.pipeline.model.eval_num_rays_per_chunk = 1 << 10
    config.machine.device_type = "cpu"
    config.max_num_iterations = 2
    config.steps_per_save = 1
    config.vis = "tensorboard"
    config.output_dir = output_dir
    config.experiment_name, config.timestamp = "exp", "run"
    return config


@pytest.mark.parametrize("method", ["accel-ngp", "accel-nerfacto"])
def test_a_config_built_in_code_trains_through_train_loop(method, tiny_scene, tmp_path):
    config = config_in_code(method, tiny_scene, tmp_path)
    assert not config.pipeline.model.resolved
    train_loop(local_rank=0, world_size=1, config=config)
    assert config.pipeline.model.resolved and config.precision == "fp32"
    assert sorted(path.name for path in config.get_checkpoint_dir().glob("step-*.ckpt"))[-1] == "step-000000001.ckpt"


def test_a_config_yml_from_before_resolution_is_refused_in_one_line(tiny_scene, tmp_path, run_cli):
    """A config.yml written before choices were resolved (no ``resolved`` field) cannot say which sizes its
    checkpoint has: ns-eval stops in one line, naming no version that never was."""
    config = config_in_code("accel-ngp", tiny_scene, tmp_path)
    text = yaml.dump(config)
    assert "resolved: false" in text
    old = tmp_path / "config.yml"
    old.write_text(re.sub(r"\n *resolved: false", "", text))
    code, _, err = run_cli("ns-eval", "--load-config", old, "--output-path", tmp_path / "eval.json")
    assert code == 1 and "Traceback" not in err
    message = err.strip().splitlines()[-1]
    assert message.startswith("error: this AccelNGPModelConfig was never resolved"), err[-2000:]
    assert "0.2" not in message


def logged_tags(run_folder: Path) -> set:
    """The tensorboard tags on disk in a run folder's event files."""
    tags = set()
    for events in run_folder.glob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        tags.update(tag for kind in accumulator.Tags().values() if isinstance(kind, list) for tag in kind)
    return tags


def test_runs_one_after_another_in_one_process_each_log_their_own_events(tiny_scene, tmp_path):
    """As a notebook trains scene after scene: when ``train_loop`` returns, the run's events are on disk; the next
    run logs only to its own folder, also after the first run's folder was deleted."""
    first = config_in_code("accel-ngp", tiny_scene, tmp_path / "first")
    train_loop(local_rank=0, world_size=1, config=first)
    assert {"Train Loss", "ETA (time)"} <= logged_tags(first.get_base_dir())
    shutil.rmtree(tmp_path / "first")

    second = config_in_code("accel-ngp", tiny_scene, tmp_path / "second")
    second.max_num_iterations = 3
    train_loop(local_rank=0, world_size=1, config=second)
    assert not (tmp_path / "first").exists()
    assert {"Train Loss", "ETA (time)"} <= logged_tags(second.get_base_dir())
