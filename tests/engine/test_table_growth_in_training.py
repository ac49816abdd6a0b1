"""--pipeline.model.table-growth-step: a run trains with half its hash table's rows a level, grows the table at the
step, and every checkpoint, saved before the growth or after, opens through nerfstudio's set-up and resumes."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import yaml
from nerfstudio.utils.eval_utils import eval_setup

from accel_test_helpers import make_trainer, run_steps, train_run
from nerfstudio_accel.errors import ConfigError
from nerfstudio_accel.models.accel_ngp import AccelNGPModelConfig

GROWING = {"log2_hashmap_size": 12, "table_growth_step": 3}


def rows(model) -> int:
    return model.field.position_encoding.layout.log2_hashmap_size


def test_a_run_grows_its_table_at_the_step_with_adams_moments(tiny_scene, tmp_path, capsys):
    trainer = make_trainer(tiny_scene, tmp_path, model=GROWING)
    model = trainer.pipeline.model
    table = model.field.position_encoding.table
    optimizer = trainer.optimizers.optimizers["fields"]
    run_steps(trainer, 0, 3)
    assert rows(model) == 11 and optimizer.state[table]["exp_avg"].numel() == table.numel()
    run_steps(trainer, 3, 2)
    assert rows(model) == 12 and model.field.position_encoding.table is table
    assert table.numel() == model.field.position_encoding.layout.num_params
    assert optimizer.state[table]["exp_avg"].shape == table.shape
    assert "Step 3: hash table grown to 2^12 rows per level" in " ".join(capsys.readouterr().out.split())


def test_checkpoints_before_and_after_the_growth_open_in_eval_setup_and_resume(tiny_scene, tmp_path):
    early = train_run(tiny_scene, tmp_path / "early", steps=2, model=GROWING)
    _, pipeline, _, step = eval_setup(early.base_dir / "config.yml", test_mode="test")
    assert step == 1 and rows(pipeline.model) == 11
    assert torch.equal(pipeline.model.field.position_encoding.table, early.pipeline.model.field.position_encoding.table)

    resumed = train_run(
        tiny_scene, tmp_path / "resumed", steps=5, model=GROWING, load_dir=early.checkpoint_dir
    )  # resumes at step 2 at 2^11 rows, grows at 3
    assert rows(resumed.pipeline.model) == 12
    _, pipeline, _, step = eval_setup(resumed.base_dir / "config.yml", test_mode="test")
    assert step == 4 and rows(pipeline.model) == 12
    assert torch.equal(
        pipeline.model.field.position_encoding.table, resumed.pipeline.model.field.position_encoding.table
    )

    again = make_trainer(tiny_scene, tmp_path / "again", model=GROWING, load_dir=resumed.checkpoint_dir)
    assert again._start_step == 5 and rows(again.pipeline.model) == 12


@pytest.fixture(scope="module")
def grown_run(tiny_scene, tmp_path_factory):
    """A run trained past its growth step (2^12 rows a level from step 3)."""
    return train_run(tiny_scene, tmp_path_factory.mktemp("grown"), steps=4, model=GROWING)


def test_a_warm_start_from_a_grown_run_starts_at_its_rows_and_its_checkpoints_open(
    tiny_scene, grown_run, tmp_path, capsys
):
    """The table loads at the source's rows before the run's growth step; a checkpoint saved then holds 2^12 rows a
    level, which eval_setup and a resume open (the rows follow the saved table, not the step)."""
    capsys.readouterr()
    trainer = make_trainer(tiny_scene, tmp_path / "run", model={**GROWING, "init_from": grown_run.base_dir})
    encoding = trainer.pipeline.model.field.position_encoding
    assert encoding.layout.log2_hashmap_size == 12
    assert torch.equal(encoding.table, grown_run.pipeline.model.field.position_encoding.table)
    assert "carried whole: field (HashGridField), sampler (OccupancySampler)" in " ".join(
        capsys.readouterr().out.split()
    )
    run_steps(trainer, 0, 2)
    trainer.config.save_config()
    trainer.save_checkpoint(1)
    _, pipeline, _, step = eval_setup(trainer.base_dir / "config.yml", test_mode="test")
    assert step == 1 and rows(pipeline.model) == 12
    assert torch.equal(pipeline.model.field.position_encoding.table, encoding.table)
    resumed = make_trainer(tiny_scene, tmp_path / "resumed", model=GROWING, load_dir=trainer.checkpoint_dir)
    assert resumed._start_step == 2 and rows(resumed.pipeline.model) == 12
    run_steps(resumed, 2, 2)  # the growth step finds the table grown already
    assert rows(resumed.pipeline.model) == 12


def test_a_warm_start_from_another_scene_leaves_the_table_at_half_its_rows(tiny_scene, grown_run, tmp_path):
    """Another scene carries the networks only: the table is not loaded, so it is not grown either."""
    other = tmp_path / "other"
    shutil.copytree(tiny_scene, other)
    transforms = json.loads((other / "transforms_train.json").read_text())
    transforms["camera_angle_x"] *= 1.1
    (other / "transforms_train.json").write_text(json.dumps(transforms))
    trainer = make_trainer(other, tmp_path / "run", model={**GROWING, "init_from": grown_run.base_dir})
    assert rows(trainer.pipeline.model) == 11


def test_by_default_a_run_has_all_its_rows_from_the_start(tiny_scene, tmp_path):
    trainer = make_trainer(tiny_scene, tmp_path, model={"log2_hashmap_size": 12})
    assert trainer.config.pipeline.model.table_growth_step == 0 and rows(trainer.pipeline.model) == 12


@pytest.mark.parametrize(
    "model, pipeline, message",
    [
        ({"table_growth_step": -1}, {}, "table-growth-step -1: choose a step, or 0 for no growth"),
        ({"table_growth_step": 3, "log2_hashmap_size": 1}, {}, "has no half to start from; set it to 0"),
        ({"table_growth_step": 3}, {"spatial_blocks": 2}, "a spatial block's hash table keeps its rows; set it to 0"),
    ],
)
def test_growth_that_cannot_run_is_refused_in_one_line(tiny_scene, tmp_path, model, pipeline, message):
    with pytest.raises(ConfigError, match=message):
        make_trainer(tiny_scene, tmp_path, setup=False, model=model, pipeline=pipeline)


def test_a_growing_table_keeps_auto_off_tiny_cuda_nn_and_refuses_it_explicitly():
    """tiny-cuda-nn's grid has fixed rows: ``auto`` skips it for a growing table (on CUDA it would pick it), and an
    explicit choice is refused with the flag to use instead."""
    config = AccelNGPModelConfig(log2_hashmap_size=12, table_growth_step=3, hash_backend="tcnn")
    assert not config.field_tcnn_builds()
    assert AccelNGPModelConfig(log2_hashmap_size=12).field_tcnn_builds()
    with pytest.raises(ConfigError, match="use --pipeline.model.hash-backend auto"):
        config._check_table_growth()


def test_a_config_written_before_growth_existed_grows_nothing():
    """An older config.yml has no ``table_growth_step``: read as nerfstudio reads config.yml (yaml's Loader, through
    the config's ``__setstate__``), it opens with 0."""
    text = yaml.dump(AccelNGPModelConfig(log2_hashmap_size=17, table_growth_step=5))
    older = "\n".join(line for line in text.splitlines() if "table_growth_step" not in line)
    assert older != text
    config = yaml.load(older, Loader=yaml.Loader)
    assert config.table_growth_step == 0 and config.table_log2_at(0) == 17
