"""accel-ngp in blocks as users reach it: a 2-block run trains in one process with hard mining and per-block grid
updates, a 2-block capture with each block's own proposal fields, their checkpoints open in ns-eval from config.yml
alone, and a split the run cannot take stops first."""

from __future__ import annotations

import json
import math

import pytest
import torch
from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

from accel_test_helpers import make_trainer, run_steps, train_run
from nerfstudio_accel.errors import ConfigError
from nerfstudio_accel.fields.hash_grid_field import HashGridField
from nerfstudio_accel.models import accel_ngp as accel_ngp_model
from nerfstudio_accel.scenes.unbounded_scene import UnboundedSceneSpec, generate_unbounded_scene
from nerfstudio_accel.spatial.block_field import BlockFields
from nerfstudio_accel.spatial.block_proposal_sampler import BlockProposalSampler


@pytest.fixture(scope="module")
def tiny_capture(tmp_path_factory):
    spec = UnboundedSceneSpec(num_train=12, num_val=2, num_test=2, resolution=32, seed=3)
    return generate_unbounded_scene(tmp_path_factory.mktemp("capture"), spec)


def capture_trainer(scene, output_dir, **options):
    return make_trainer(
        scene,
        output_dir,
        dataparser=NerfstudioDataParserConfig(),
        test_mode="test",
        pipeline={"spatial_blocks": 2},
        **options,
    )


def test_two_blocks_train_with_mining_and_their_own_grid_updates(tiny_scene, tmp_path):
    trainer = make_trainer(tiny_scene, tmp_path, pipeline={"spatial_blocks": 2}, model={"occupancy.update_every": 2})
    model = trainer.pipeline.model
    assert isinstance(model.field, BlockFields) and model.field.cells.shape == (2, 2, 3)
    one_model = trainer.config.pipeline.model.log2_hashmap_size
    config = trainer.config.pipeline.model
    whole = HashGridField.grid_layout(config.num_levels, config.max_res, one_model)
    for field in model.field.field_list():  # one model's lattice and dense levels, half its hashed rows
        layout = field.position_encoding.layout
        assert layout.log2_hashmap_size == one_model - 1 and torch.equal(field.aabb, model.scene_box.aabb)
        for level in range(layout.num_levels):
            assert layout.level_is_dense(level) == whole.level_is_dense(level)
            rows = whole.level_entries(level) if whole.level_is_dense(level) else whole.level_entries(level) // 2
            assert layout.level_entries(level) == rows
    assert trainer.pipeline.mines_hard_samples()
    tables = [field.position_encoding.table.detach().clone() for field in model.field.field_list()]
    losses = run_steps(trainer, 0, 6)
    assert all(math.isfinite(loss) for loss in losses)
    assert all(
        not torch.equal(field.position_encoding.table, before)
        for field, before in zip(model.field.field_list(), tables)
    )
    assert model.sampler.state_version() == 2 * 3, "each block's grid updated on steps 0, 2 and 4"
    assert model.sampler.figures()["kept"] > 0


@pytest.mark.slow
def test_a_two_block_run_opens_in_ns_eval(run_cli, tiny_scene, tmp_path):
    """ns-eval rebuilds the blocks from config.yml and the checkpoint alone (ns-render and ns-export build the model
    through the same nerfstudio set-up, eval_setup)."""
    trainer = train_run(tiny_scene, tmp_path, steps=4, pipeline={"spatial_blocks": 2})
    config = trainer.base_dir / "config.yml"
    assert "spatial_blocks: 2" in config.read_text()
    out = tmp_path / "eval.json"
    code, stdout, stderr = run_cli("ns-eval", "--load-config", str(config), "--output-path", str(out), timeout=300)
    assert code == 0 and "Traceback" not in stderr, (stdout + stderr)[-3000:]
    assert json.loads(out.read_text())["results"]["psnr"] > 5.0


def test_a_two_block_capture_trains_each_blocks_field_and_proposal_fields(tiny_capture, tmp_path):
    """Unbounded outer cells, each block's hash grid over the part of the contracted grid its cell maps into, and its
    own proposal fields, which learn from the interlevel loss of its samples; one appearance embedding, which every
    block's samples train, in its own optimizer group."""
    trainer = capture_trainer(tiny_capture, tmp_path)
    model = trainer.pipeline.model
    assert model.field.appearance is not None and all(field.appearance is None for field in model.field.field_list())
    names = model.state_dict().keys()
    assert "field.appearance.weight" in names and not any(".fields." in n and "appearance" in n for n in names)
    assert trainer.optimizers.parameters["appearance"] == [model.field.appearance.weight]
    appearance = model.field.appearance.weight.detach().clone()
    assert isinstance(model.sampler, BlockProposalSampler) and float(model.field.cells.abs().max()) > 1e5
    regions = [field.grid_region for field in model.field.field_list()]
    assert all(region is not None for region in regions) and not torch.equal(regions[0], regions[1])
    before = [[p.detach().clone() for p in block.parameters()] for block in model.sampler.sampler_list()]
    tables = [field.position_encoding.table.detach().clone() for field in model.field.field_list()]
    losses = run_steps(trainer, 0, 4)
    assert all(math.isfinite(loss) for loss in losses)
    for field, table in zip(model.field.field_list(), tables):
        assert not torch.equal(field.position_encoding.table, table)
    assert not torch.equal(model.field.appearance.weight, appearance), "the shared embedding learns"
    for block, parameters in zip(model.sampler.sampler_list(), before):
        assert any(not torch.equal(p, old) for p, old in zip(block.parameters(), parameters)), "proposal fields learn"
    figures = model.sampler.figures()
    assert figures["samples_per_ray_block_0"] > 0 and figures["samples_per_ray_block_1"] > 0


@pytest.mark.slow
def test_a_two_block_capture_opens_in_ns_eval(run_cli, tiny_capture, tmp_path):
    trainer = train_run(
        tiny_capture,
        tmp_path,
        steps=4,
        pipeline={"spatial_blocks": 2},
        dataparser=NerfstudioDataParserConfig(),
        test_mode="test",
    )
    config = trainer.base_dir / "config.yml"
    out = tmp_path / "eval.json"
    code, stdout, stderr = run_cli("ns-eval", "--load-config", str(config), "--output-path", str(out), timeout=300)
    assert code == 0 and "Traceback" not in stderr, (stdout + stderr)[-3000:]
    assert json.loads(out.read_text())["results"]["psnr"] > 5.0


@pytest.mark.parametrize(
    "devices, pipeline, trainer, message",
    [
        (3, {}, {}, "needs as many devices as blocks"),
        (2, {"hard_mining": True}, {}, "hard-mining True with one block per rank"),
        (2, {}, {"max_grad_norm": 1.0}, "--max-grad-norm with one block per rank"),
        (2, {}, {"gradient_accumulation_steps": {"fields": 2}}, "--gradient-accumulation-steps with one block"),
    ],
)
def test_blocks_on_ranks_that_cannot_work_stop_before_training(
    tiny_scene, tmp_path, devices, pipeline, trainer, message
):
    with pytest.raises(ConfigError, match=message):
        make_trainer(
            tiny_scene,
            tmp_path,
            setup=False,
            pipeline={"spatial_blocks": 2, **pipeline},
            **{"machine.num_devices": devices, **trainer},
        )


def test_an_object_scenes_blocks_take_no_tiny_cuda_nn_grid(tiny_scene, tmp_path, monkeypatch):
    """tiny-cuda-nn's grid cannot hold a block's table (one model's dense levels above a smaller hash table): auto
    skips it, and asking for it stops in one line (its availability simulated: no CUDA here)."""
    monkeypatch.setattr(accel_ngp_model, "check_hash_backend", lambda backend, device_type: None)
    with pytest.raises(ConfigError, match="use --pipeline.model.hash-backend auto"):
        make_trainer(tiny_scene, tmp_path, setup=False, pipeline={"spatial_blocks": 2}, model={"hash_backend": "tcnn"})
    trainer = make_trainer(tiny_scene, tmp_path, setup=False, model={"hash_backend": "tcnn"})
    assert trainer.config.pipeline.model.hash_backend == "tcnn"  # one model keeps it
    cuda_tables = {"hash_backend": "tcnn", "log2_hashmap_size": 19}  # no dense level outgrows a block's 2^18 rows
    trainer = make_trainer(tiny_scene, tmp_path, setup=False, pipeline={"spatial_blocks": 2}, model=cuda_tables)
    assert trainer.config.pipeline.model.hash_backend == "tcnn"


def test_blocks_on_as_many_ranks_resolve_without_mining_and_prefetching(tiny_scene, tmp_path):
    """No hard mining, and batches prepared on the training thread (a producer thread would size them when it gets
    to them, differently on each rank)."""
    trainer = make_trainer(
        tiny_scene,
        tmp_path,
        setup=False,
        pipeline={"spatial_blocks": 2, "datamanager.prefetch_batches": 2},
        **{"machine.num_devices": 2},
    )
    assert trainer.config.blocks_on_ranks() and trainer.config.pipeline.hard_mining is False
    assert trainer.config.pipeline.datamanager.prefetch_batches == 0
