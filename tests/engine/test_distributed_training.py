"""Data-parallel training for real: 2 processes on the gloo backend (CPU), each running nerfstudio's own
per-rank function ``train_loop(local_rank, world_size, config, global_rank)``, as its launcher does for
``--machine.num-devices 2`` (the launcher itself asserts CUDA)."""

from __future__ import annotations

import copy
import operator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Type

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig

from accel_test_helpers import gloo_train_loop, make_trainer
from nerfstudio_accel.engine.trainer import AccelTrainer, AccelTrainerConfig
from nerfstudio_accel.methods import accel_nerfacto, accel_ngp


@dataclass
class RecordingTrainerConfig(AccelTrainerConfig):
    _target: Type = field(default_factory=lambda: RecordingTrainer)
    record_dir: Path = Path(".")
    simulated_fp16_scaler: bool = False
    """Train with fp16's loss scaling, simulated by an enabled CPU GradScaler."""
    rank_whose_first_step_misses: int = -1
    """On this rank the first step's rays all miss the grid: no hard sample, a loss without a graph."""


class RecordingTrainer(AccelTrainer):
    """AccelTrainer that saves, per rank, the state each step started from, the batches it drew, the
    averaged gradients of the first step, and the final state."""

    config: RecordingTrainerConfig

    def setup(self, test_mode="val") -> None:
        super().setup(test_mode)
        if self.config.simulated_fp16_scaler:
            self.use_grad_scaler = True
            self.grad_scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1)
        self.record = {"batches": [], "start_states": [], "scales": [], "hard_samples": [], "producers": []}
        next_train = self.pipeline.datamanager.next_train

        def recording_next_train(step):
            ray_bundle, batch = next_train(step)
            self.record["batches"].append({key: value.clone() for key, value in batch.items()})
            self.record["producers"].append(self.pipeline.datamanager._prefetcher is not None)
            return ray_bundle, batch

        self.pipeline.datamanager.next_train = recording_next_train

    def train_iteration(self, step):
        self.record["start_states"].append(copy.deepcopy(self.pipeline.state_dict()))
        if step == 0 and dist.get_rank() == self.config.rank_whose_first_step_misses:
            grid = self.pipeline.model.sampler.grid
            occupied = grid.binaries.clone()
            grid.binaries.zero_()
            result = super().train_iteration(step)
            grid.binaries.copy_(occupied)
        else:
            result = super().train_iteration(step)
        self.record["scales"].append(self.grad_scaler.get_scale() if self.use_grad_scaler else None)
        self.record["hard_samples"].append(float(result[2]["hard_mining_b"]) if "hard_mining_b" in result[2] else None)
        if step == 0:
            self.record["first_grads"] = {
                name: p.grad.clone() for name, p in self.pipeline.model.named_parameters() if p.grad is not None
            }
        return result

    def train(self) -> None:
        super().train()
        model = self.pipeline.model
        self.record.update(
            final_state={name: value.clone() for name, value in self.pipeline.state_dict().items()},
            tau_hat=self.pipeline.batch_sizer.tau_hat,
            grid_updates=getattr(getattr(model, "sampler", None), "updates", None),
            last_checkpoint=self.last_checkpoint,
            prefetcher_closed=self.pipeline.datamanager._prefetcher is None,
        )
        torch.save(self.record, self.config.record_dir / f"rank{dist.get_rank()}.pt")


def recording(method: AccelTrainerConfig, out: Path) -> RecordingTrainerConfig:
    """``method``'s config (as ns-train builds it) for the recording trainer, on CPU, saving into ``out``."""
    base = copy.deepcopy(method)
    config = RecordingTrainerConfig(
        **{name: getattr(base, name) for name in base.__dataclass_fields__ if name != "_target"}, record_dir=out
    )
    config.machine.device_type = "cpu"
    config.vis = "tensorboard"
    config.output_dir, config.experiment_name, config.timestamp = out, "exp", "run"
    config.steps_per_eval_batch = config.steps_per_eval_image = config.steps_per_eval_all_images = 10**6
    return config


def distributed_config(scene: Path, out: Path, steps: int, min_hard_fraction: float) -> RecordingTrainerConfig:
    """accel-ngp, small, deterministic given its batches (white background, no stratified jitter), grid
    updates every 2 steps after 4 warm-up steps, a checkpoint every 3 steps."""
    config = recording(accel_ngp.config, out)
    config.max_num_iterations, config.steps_per_save = steps, 3
    config.pipeline.datamanager.dataparser = BlenderDataParserConfig(data=scene)
    config.pipeline.min_hard_fraction = min_hard_fraction
    model = config.pipeline.model
    model.background, model.stratified_sampling = "white", False
    model.occupancy.resolution, model.log2_hashmap_size = 32, 14
    model.occupancy.update_every, model.occupancy.warmup_steps = 2, 4
    return config


def train_two_ranks(config: RecordingTrainerConfig) -> list:
    """Both ranks' records after ``config``'s training on 2 gloo processes."""
    folder = config.record_dir
    folder.mkdir(parents=True, exist_ok=True)
    config.save_config()  # as ns-train does before its launcher starts the ranks (it makes the run's folder)
    mp.spawn(gloo_train_loop, args=(str(folder / "init"), config), nprocs=2, join=True)
    return [torch.load(folder / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]


@pytest.mark.parametrize("hard_mining", [True, False], ids=["mining b=B", "ordinary"])
def test_one_step_gradient_equals_the_gradient_over_both_ranks_batches(tiny_scene, tmp_path, hard_mining):
    """After one 2-rank step both ranks hold the same gradient, and it is the single-process gradient of the
    loss over the union of both ranks' rays (ranks drew different rays), from the same starting state."""
    config = distributed_config(tiny_scene, tmp_path / "ranks", steps=1, min_hard_fraction=1.0)
    config.pipeline.hard_mining = hard_mining
    rank0, rank1 = train_two_ranks(config)
    assert (rank0["tau_hat"] != 1.0) == hard_mining, "the ranks trained another path than asked"
    first0, first1 = rank0["batches"][0], rank1["batches"][0]
    assert not torch.equal(first0["indices"], first1["indices"]), "ranks drew the same rays"
    for name in rank0["first_grads"]:
        assert torch.equal(rank0["first_grads"][name], rank1["first_grads"][name]), name

    reference = make_trainer(
        tiny_scene,
        tmp_path / "reference",
        device="cpu",
        pipeline={"min_hard_fraction": 1.0, "hard_mining": hard_mining},
        model={
            name: operator.attrgetter(name)(config.pipeline.model)
            for name in ("background", "stratified_sampling", "occupancy.resolution", "log2_hashmap_size")
        },
    )
    reference.pipeline.load_state_dict(rank0["start_states"][0])  # rank 0's weights and grid, as both ranks had them
    datamanager = reference.pipeline.datamanager
    union = {key: torch.cat([first0[key], first1[key]]) for key in first0}
    datamanager.next_train = lambda step: (datamanager.train_ray_generator(union["indices"]), union)
    reference.train_iteration(0)
    grads = {name: p.grad for name, p in reference.pipeline.model.named_parameters() if p.grad is not None}
    assert grads.keys() == rank0["first_grads"].keys()
    for name, grad in grads.items():
        assert grad.abs().sum() > 0, name
        torch.testing.assert_close(rank0["first_grads"][name], grad, rtol=1e-4, atol=1e-7, msg=name)


def test_ranks_stay_bit_identical_and_only_rank_zero_saves(tiny_scene, tmp_path):
    """Seven mined steps with grid updates during and after warm-up: parameters, the grid and tau-hat are
    bit-identical on both ranks (which trained on different rays), only rank 0 wrote a checkpoint, and
    each rank's input prefetcher was stopped when training ended."""
    config = distributed_config(tiny_scene, tmp_path, steps=7, min_hard_fraction=0.0)
    config.pipeline.datamanager.prefetch_batches = 2  # the GPUs' default (the CPU's is 0): each rank runs a producer
    rank0, rank1 = train_two_ranks(config)
    assert rank0["grid_updates"] == rank1["grid_updates"] == 4  # steps 0, 2, 4, 6
    state0, state1 = rank0["final_state"], rank1["final_state"]
    assert state0.keys() == state1.keys()
    for name in state0:
        assert torch.equal(state0[name], state1[name]), name
    initial = rank0["start_states"][0]
    assert not torch.equal(initial["_model.sampler.grid.occs"], state0["_model.sampler.grid.occs"])
    assert rank0["tau_hat"] == rank1["tau_hat"] != 1.0
    assert not torch.equal(rank0["batches"][-1]["indices"], rank1["batches"][-1]["indices"])
    assert rank1["last_checkpoint"] is None
    assert rank0["last_checkpoint"] is not None and rank0["last_checkpoint"].is_file()
    assert [path.name for path in rank0["last_checkpoint"].parent.iterdir()] == [rank0["last_checkpoint"].name]
    assert all(rank0["producers"]) and all(rank1["producers"])  # each rank's batches came from its producer thread
    assert rank0["prefetcher_closed"] and rank1["prefetcher_closed"]


def test_accel_nerfacto_ranks_stay_bit_identical(tiny_scene, tmp_path):
    """accel-nerfacto (proposal networks, camera optimizer, mined main field): after four 2-rank steps every
    parameter and tau-hat are bit-identical on both ranks."""
    config = recording(accel_nerfacto.config, tmp_path)
    config.max_num_iterations = 4
    config.pipeline.hard_mining = True  # off by default for accel-nerfacto
    config.pipeline.datamanager.dataparser = BlenderDataParserConfig(data=tiny_scene)
    rank0, rank1 = train_two_ranks(config)
    for name, value in rank0["final_state"].items():
        assert torch.equal(value, rank1["final_state"][name]), name
    start = rank0["start_states"][0]
    assert any(not torch.equal(start[name], value) for name, value in rank0["final_state"].items() if name in start), (
        "nothing trained"
    )
    assert rank0["tau_hat"] == rank1["tau_hat"] != 1.0


def test_fp16_ranks_take_the_same_scaler_path_when_one_rank_has_no_graph(tiny_scene, tmp_path):
    """fp16's loss scaler (simulated) on 2 ranks where rank 1's first step draws no hard sample, so its loss
    has no graph: every rank still starts its scaler, unscales the shared gradients and steps alike (no
    "Attempted unscale_ but _scale is None" on one rank while the other waits in the next collective),
    and the ranks stay bit-identical with the same loss scale."""
    config = distributed_config(tiny_scene, tmp_path, steps=3, min_hard_fraction=0.0)
    config.simulated_fp16_scaler, config.rank_whose_first_step_misses = True, 1
    rank0, rank1 = train_two_ranks(config)
    assert rank1["hard_samples"][0] == 0 and rank0["hard_samples"][0] > 0
    assert (
        rank0["scales"] == rank1["scales"] == [2048.0, 4096.0, 8192.0]
    )  # a step with gradients on every rank grows it
    for name, value in rank0["final_state"].items():
        assert torch.equal(value, rank1["final_state"][name]), name


def test_ranks_grow_their_tables_at_the_same_step_and_stay_bit_identical(tiny_scene, tmp_path):
    """``--pipeline.model.table-growth-step 3`` on 2 ranks: both lay their tables out from 2^13 to 2^14 rows a level at
    step 3 (the gradient's all-reduce follows the new size) and hold bit-identical parameters after five steps."""
    config = distributed_config(tiny_scene, tmp_path, steps=5, min_hard_fraction=0.0)
    config.pipeline.model.table_growth_step = 3
    rank0, rank1 = train_two_ranks(config)
    table = "_model.field.position_encoding.table"
    start, final = rank0["start_states"][0][table], rank0["final_state"][table]
    assert final.numel() > start.numel()
    for name, value in rank0["final_state"].items():
        assert torch.equal(value, rank1["final_state"][name]), name
