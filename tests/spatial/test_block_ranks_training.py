"""A split scene trained one block per rank, as nerfstudio's launcher runs ``--machine.num-devices 2`` (its
per-rank ``train_loop`` on 2 gloo processes), against the same 2 blocks trained in one process: the same
weights (an object scene with occupancy grids, and a capture with each block's proposal fields and the shared
camera optimizer), one ordinary checkpoint, and a run that ``ns-eval`` opens on one process."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig
from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig
from nerfstudio.scripts.train import train_loop

from accel_test_helpers import gloo_train_loop
from nerfstudio_accel.encodings.hash_encoding import INIT_RANGE
from nerfstudio_accel.engine.trainer import AccelTrainerConfig
from nerfstudio_accel.methods import accel_ngp
from nerfstudio_accel.scenes.unbounded_scene import UnboundedSceneSpec, generate_unbounded_scene

STEPS = 6
CAPTURE_STEPS = 2


def blocks_config(scene: Path, out: Path, devices: int) -> AccelTrainerConfig:
    """accel-ngp in 2 blocks, small, on CPU, with its training randomness on (stratified jitter, random
    backgrounds), grid updates every 2 steps after 2 warm-up steps, no mining, batches prepared on the training
    thread, a checkpoint at the end only."""
    config = copy.deepcopy(accel_ngp.config)
    config.machine.device_type, config.machine.num_devices = "cpu", devices
    config.vis = "tensorboard"
    config.output_dir, config.experiment_name, config.timestamp = out, "exp", "run"
    config.max_num_iterations, config.steps_per_save = STEPS, 10**6
    config.steps_per_eval_batch = config.steps_per_eval_image = config.steps_per_eval_all_images = 10**6
    config.pipeline.datamanager.dataparser = BlenderDataParserConfig(data=scene)
    config.pipeline.spatial_blocks, config.pipeline.hard_mining = 2, False
    config.pipeline.datamanager.prefetch_batches = 0  # as ranks with blocks prepare them: the same batch sizes
    model = config.pipeline.model
    model.occupancy.resolution, model.log2_hashmap_size = 32, 14
    model.occupancy.update_every, model.occupancy.warmup_steps = 2, 2
    return config


def capture_blocks_config(scene: Path, out: Path, devices: int) -> AccelTrainerConfig:
    """:func:`blocks_config` on a capture: contracted, each block with its own small proposal fields, the camera
    optimizer on (shared by the blocks)."""
    config = blocks_config(scene, out, devices)
    config.pipeline.datamanager.dataparser = NerfstudioDataParserConfig(data=scene)
    config.max_num_iterations = CAPTURE_STEPS
    model = config.pipeline.model
    model.proposal.max_res, model.proposal.log2_hashmap_size, model.proposal.anneal_steps = (32,), 12, 4
    return config


def final_checkpoint(config: AccelTrainerConfig) -> dict:
    (path,) = (config.output_dir / "exp" / "accel-ngp" / "run" / "nerfstudio_models").glob("step-*.ckpt")
    return torch.load(path, map_location="cpu", weights_only=False)


@pytest.fixture(scope="module")
def two_runs(tiny_scene, tmp_path_factory):
    return train_both(blocks_config, tiny_scene, tmp_path_factory.mktemp("block_ranks"))


def train_both(config_of, scene: Path, out: Path):
    """The same config trained on 2 ranks and in one process; their configs."""
    ranks = config_of(scene, out / "ranks", devices=2)
    ranks.save_config()  # as ns-train does before its launcher starts the ranks
    mp.spawn(gloo_train_loop, args=(str(out / "init"), ranks), nprocs=2, join=True)
    one = config_of(scene, out / "one", devices=1)
    one.save_config()
    train_loop(0, 1, one)
    return ranks, one


def assert_trained_alike(split: dict, whole: dict) -> None:
    """A K-rank run's checkpoint ``split`` against a one-process run's ``whole``.

    Tolerance, from float reduction order (each block's part of a ray is summed on its rank and the blocks then
    composited; optical depths summed in float64): grids to 1e-6; a hash-table entry whose gradient is near zero can
    take another Adam step when its rounding differs (at most the learning rate, 1e-2), so at most 1 in 10^4 entries
    may differ by more than 1e-5; networks, which read those entries, to 1e-5 (measured 2.1e-6 at most)."""
    assert split["step"] == whole["step"]
    assert split["pipeline"].keys() == whole["pipeline"].keys()
    assert any(".field.fields.1." in name for name in split["pipeline"])
    for name, value in whole["pipeline"].items():
        got = split["pipeline"][name]
        if value.dtype == torch.bool:
            assert torch.equal(got, value), name
        elif name.endswith("position_encoding.table"):
            assert value.abs().max() > 100 * INIT_RANGE, f"{name} did not train"
            differing = (got - value).abs() > 1e-5
            assert differing.float().mean() <= 1e-4 and (got - value).abs().max() <= 1e-2, name
        else:
            torch.testing.assert_close(got, value, rtol=0.0, atol=1e-6 if "occs" in name else 1e-5, msg=name)
    (group,) = whole["optimizers"]["fields"]["param_groups"]
    assert split["optimizers"]["fields"]["param_groups"][0]["params"] == group["params"]
    for index, state in whole["optimizers"]["fields"]["state"].items():
        assert split["optimizers"]["fields"]["state"][index]["step"] == state["step"], index
        assert split["optimizers"]["fields"]["state"][index]["exp_avg"].shape == state["exp_avg"].shape, index


def test_two_ranks_train_the_weights_one_process_trains(two_runs):
    """Rank 0's checkpoint holds both blocks in the one-process form, and after 6 steps (3 grid updates) they
    equal the one-process run's: the same rays, jitter and backgrounds on every rank, and each block's samples,
    composite and gradient as in one process."""
    ranks, one = two_runs
    split, whole = final_checkpoint(ranks), final_checkpoint(one)
    assert split["step"] == STEPS - 1
    assert_trained_alike(split, whole)


def test_two_ranks_train_a_captures_blocks_and_proposal_fields_as_one_process(tmp_path):
    """A capture's blocks on 2 ranks: each rank's proposal fields learn from its samples' weights after the block in
    front (from the composite's all-gather), its jitter comes from its block's own generator, the camera optimizer's
    and the shared appearance embedding's gradients are summed over the ranks, and the regulariser counted once
    (rank 0's).

    Tolerance, after 2 steps (the second with pose corrections, so the regulariser acts): camera poses to 1e-5;
    every other tensor to 1e-2 (the fields' learning rate), all but 1% of its entries to 1e-6. Proposal sampling
    spreads samples through empty space, where gradients are near zero, and Adam (eps 1e-15) turns a rounding
    difference there into a step of up to the learning rate: measured 2.3e-4 at most on an Intel host, 3.2e-3 on an
    AMD one (0.43% and 0.19% of a table's entries). Counting the regulariser on both ranks moves the poses by 1.6e-3
    and fails this."""
    spec = UnboundedSceneSpec(num_train=8, num_val=2, num_test=2, resolution=24, seed=4)
    scene = generate_unbounded_scene(tmp_path / "capture", spec)
    ranks, one = train_both(capture_blocks_config, scene, tmp_path)
    assert one.pipeline.model.sampler == "proposal" and one.pipeline.model.camera_optimizer.mode != "off"
    split, whole = final_checkpoint(ranks), final_checkpoint(one)
    assert split["step"] == whole["step"] == CAPTURE_STEPS - 1
    assert split["pipeline"].keys() == whole["pipeline"].keys()
    assert any(".sampler.samplers.1.fields." in name for name in whole["pipeline"])
    assert "_model.field.appearance.weight" in whole["pipeline"]
    for name, value in whole["pipeline"].items():
        difference = (split["pipeline"][name].float() - value.float()).abs()
        if "camera_optimizer" in name:
            assert value.abs().max() > 1e-4 and difference.max() <= 1e-5, name
        elif value.numel():
            assert difference.max() <= 1e-2 and (difference > 1e-6).float().mean() <= 0.01, name


def test_two_ranks_resume_from_their_checkpoint_as_one_process_does(two_runs, tmp_path):
    """``--load-dir`` on 2 ranks gives each rank its part of the one-process checkpoint (weights, grid, optimizer
    state) and trains on to the one-process resumed run's weights."""
    resumed = []
    for config in two_runs:
        again = copy.deepcopy(config)
        again.load_dir = config.output_dir / "exp" / "accel-ngp" / "run" / "nerfstudio_models"
        again.output_dir, again.max_num_iterations = tmp_path / again.output_dir.name, STEPS + 3
        again.save_config()
        if again.machine.num_devices == 2:
            mp.spawn(gloo_train_loop, args=(str(tmp_path / "init"), again), nprocs=2, join=True)
        else:
            train_loop(0, 1, again)
        resumed.append(final_checkpoint(again))
    assert resumed[0]["step"] == STEPS + 2
    assert_trained_alike(*resumed)


@pytest.mark.slow
def test_a_two_rank_run_opens_in_ns_eval(run_cli, two_runs, tmp_path):
    ranks, _ = two_runs
    config = ranks.output_dir / "exp" / "accel-ngp" / "run" / "config.yml"
    assert "num_devices: 2" in config.read_text()
    out = tmp_path / "eval.json"
    code, stdout, stderr = run_cli("ns-eval", "--load-config", str(config), "--output-path", str(out), timeout=300)
    assert code == 0 and "Traceback" not in stderr, (stdout + stderr)[-3000:]
    assert json.loads(out.read_text())["results"]["psnr"] > 5.0
