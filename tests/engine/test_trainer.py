"""AccelTrainer: precision, the non-finite step guard, atomic checkpoints and resume to --max-num-iterations."""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig
from nerfstudio.engine.callbacks import TrainingCallbackLocation

from accel_test_helpers import assert_same_state, make_trainer, run_steps, snapshot
from nerfstudio_accel.engine.build import build_trainer_config
from nerfstudio_accel.engine.trainer import (
    AccelTrainerConfig,
    TrainingStopped,
    partial_checkpoint_dir,
    resolve_precision,
)
from nerfstudio_accel.methods import accel_ngp


def resolved_config(scene: Path, device: str, output_dir: Path = Path("outputs"), configure=None):
    """accel-ngp's config on a Blender-format ``scene`` for ``device``, resolved as ns-train resolves it."""
    return build_trainer_config(
        accel_ngp.config, scene, device, BlenderDataParserConfig(), output_dir=output_dir, configure=configure
    )


@pytest.mark.parametrize(
    "requested, device, expected",
    [
        ("auto", "cpu", "fp32"),
        ("auto", "cuda", "fp16"),
        ("auto", "mps", "fp32"),
        ("bf16", "cpu", "bf16"),
        ("fp32", "cuda", "fp32"),
    ],
)
def test_precision_resolution(requested, device, expected):
    assert resolve_precision(requested, device) == expected


def test_fp16_on_cpu_and_unknown_precision_are_refused_in_one_line():
    with pytest.raises(ValueError, match="needs a CUDA device.*bf16"):
        resolve_precision("fp16", "cpu")
    with pytest.raises(ValueError, match="choose auto, fp32, fp16 or bf16"):
        resolve_precision("fp8", "cpu")  # type: ignore[arg-type]


def test_the_default_device_is_the_one_this_machine_has(monkeypatch):
    """nerfstudio's default, cuda, fails with a driver trace on a machine without a GPU."""
    for has_cuda, expected in ((False, "cpu"), (True, "cuda")):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: has_cuda)
        assert AccelTrainerConfig().machine.device_type == expected


def test_a_device_this_machine_lacks_is_refused_in_one_line(tiny_scene, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as refusal:
        make_trainer(tiny_scene, tmp_path, device="cuda", setup=False)
    message = str(refusal.value)
    assert message.endswith("train with --machine.device-type cpu") and "\n" not in message


def test_multi_gpu_training_without_cuda_is_refused_before_the_launcher(tiny_scene, tmp_path, monkeypatch):
    """ns-train saves config.yml before its launcher starts the ranks, whose workers assert CUDA with a trace."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = build_trainer_config("accel-ngp", tiny_scene, "cpu", BlenderDataParserConfig(), output_dir=tmp_path)
    config.machine.device_type, config.machine.num_devices = "cuda", 2
    with pytest.raises(SystemExit) as refusal:
        config.save_config()
    assert str(refusal.value).startswith("error: --machine.device-type cuda: torch finds no such device")
    assert not config.get_base_dir().exists()


def test_bf16_on_cpu_trains_with_fp32_rendering_and_weights(tiny_scene, tmp_path):
    """bf16 autocast covers the field (its raw outputs are bf16), the renderer's outputs are fp32,
    master weights stay fp32, and the loss goes down."""
    torch.manual_seed(0)
    trainer = make_trainer(tiny_scene, tmp_path, precision="bf16")
    assert trainer.mixed_precision and trainer.precision == "bf16" and not trainer.use_grad_scaler
    losses = run_steps(trainer, 0, 60)
    assert all(math.isfinite(loss) for loss in losses)
    assert sum(losses[-10:]) / 10 < 0.8 * sum(losses[:10]) / 10
    model = trainer.pipeline.model
    assert all(p.dtype == torch.float32 for p in model.parameters())
    ray_bundle, _ = trainer.pipeline.datamanager.next_train(60)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        samples, raw_density, raw_color = model.sample_and_forward(ray_bundle)
        outputs = model.render(samples, raw_density, raw_color)
    assert raw_color.dtype == torch.bfloat16
    for key in ("rgb", "accumulation", "depth"):
        assert outputs[key].dtype == torch.float32, key


def poisoned(grad: torch.Tensor, poison: str) -> torch.Tensor:
    if poison == "nan-everywhere":
        return torch.full_like(grad, float("nan"))
    grad = grad.clone()
    grad.view(-1)[grad.numel() // 2] = float("inf")
    return grad


@pytest.mark.parametrize("poison", ["nan-everywhere", "one-inf-entry"])
def test_nan_gradient_skips_the_step_and_training_continues(tiny_scene, tmp_path, poison):
    """A NaN or inf in one gradient (the hash table's): parameters, optimizer state and learning rate are
    bit-identical after the step, the skip is counted, and the next clean step trains."""
    torch.manual_seed(0)
    trainer = make_trainer(tiny_scene, tmp_path)
    run_steps(trainer, 0, 3)
    before = snapshot(trainer)
    learning_rates = [s.get_last_lr() for s in trainer.optimizers.schedulers.values()]
    param = next(trainer.pipeline.model.field.parameters())
    hook = param.register_hook(lambda grad: poisoned(grad, poison))
    run_steps(trainer, 3, 1)
    hook.remove()
    assert_same_state(before, snapshot(trainer))
    assert [s.get_last_lr() for s in trainer.optimizers.schedulers.values()] == learning_rates
    assert trainer.skipped_steps == 1 and float(trainer.last_metrics["skipped_steps"]) == 1
    run_steps(trainer, 4, 1)
    assert trainer.consecutive_skips == 0
    assert any(not torch.equal(a, b) for a, b in zip(before[0], snapshot(trainer)[0]))


def test_consecutive_non_finite_steps_stop_with_one_line(tiny_scene, tmp_path):
    """After --max-consecutive-skips non-finite steps, training stops naming the step and the last checkpoint."""
    trainer = make_trainer(tiny_scene, tmp_path, max_consecutive_skips=3)
    run_steps(trainer, 0, 2)
    trainer.save_checkpoint(1)
    param = next(trainer.pipeline.model.field.parameters())
    param.register_hook(lambda grad: torch.full_like(grad, float("inf")))
    run_steps(trainer, 2, 2)
    with pytest.raises(TrainingStopped) as stopped:
        run_steps(trainer, 4, 1)
    message = str(stopped.value)
    assert "\n" not in message and message.startswith("error: training stopped at step 4 after 3 consecutive")
    assert str(trainer.checkpoint_dir / "step-000000001.ckpt") in message


def test_only_rank_zero_writes_checkpoints(tiny_scene, tmp_path, monkeypatch):
    from nerfstudio.utils import comms

    trainer = make_trainer(tiny_scene, tmp_path)
    monkeypatch.setattr(comms, "get_rank", lambda: 1)
    trainer.save_checkpoint(1)
    assert not trainer.checkpoint_dir.exists() or not any(trainer.checkpoint_dir.iterdir())
    monkeypatch.setattr(comms, "get_rank", lambda: 0)
    trainer.save_checkpoint(1)
    assert (trainer.checkpoint_dir / "step-000000001.ckpt").exists()


def test_ranks_other_than_zero_start_no_viewer(tiny_scene, tmp_path, monkeypatch):
    """nerfstudio starts a viewer on every machine's local rank 0; AccelTrainer keeps only global rank 0's,
    and the other ranks keep their loggers."""
    from nerfstudio_accel import distributed
    from nerfstudio_accel.engine.trainer import viewer_off

    assert [viewer_off(vis) for vis in ("viewer", "viewer+wandb", "viewer+tensorboard", "viewer_legacy", "wandb")] == [
        "tensorboard",
        "wandb",
        "tensorboard",
        "tensorboard",
        "wandb",
    ]
    monkeypatch.setattr(distributed, "rank", lambda: 1)
    trainer = make_trainer(tiny_scene, tmp_path, setup=False, vis="viewer+wandb")
    assert trainer.config.vis == "wandb" and not trainer.config.is_viewer_enabled()
    monkeypatch.setattr(distributed, "rank", lambda: 0)
    assert make_trainer(tiny_scene, tmp_path, setup=False, vis="viewer").config.is_viewer_enabled()


@pytest.mark.parametrize("rank", [0, 1])
def test_reports_print_once_on_rank_zero(tiny_scene, tmp_path, monkeypatch, capsys, rank):
    """With N ranks the mining report, the skipped-step line and the precision line are printed by rank 0
    alone (every rank holds the same figures and skips the same steps); the other ranks print nothing."""
    from nerfstudio.engine.callbacks import TrainingCallbackAttributes

    from nerfstudio_accel import distributed

    monkeypatch.setattr(distributed, "rank", lambda: rank)
    trainer = make_trainer(tiny_scene, tmp_path, pipeline={"print_every": 1})
    callbacks = trainer.pipeline.get_training_callbacks(
        TrainingCallbackAttributes(
            optimizers=trainer.optimizers, grad_scaler=trainer.grad_scaler, pipeline=trainer.pipeline, trainer=trainer
        )
    )
    run_steps(trainer, 0, 1)
    for callback in callbacks:
        callback.run_callback_at_location(0, location=TrainingCallbackLocation.AFTER_TRAIN_ITERATION)
    trainer.consecutive_skips = 1
    trainer._on_skipped_step(0, calibrating=False)
    printed = capsys.readouterr().out
    expected = ["Training precision", "hard mining, step 0", "step 0: non-finite loss"]
    assert [text in printed for text in expected] == [rank == 0] * len(expected), printed


def test_multi_gpu_ranks_select_their_gpu_never_start_paused_and_close_the_viewer(tiny_scene, tmp_path, monkeypatch):
    """A CUDA rank selects its own GPU (nerfstudio's launcher does not; Triton and tiny-cuda-nn launch on
    the current device); ranks other than 0 ignore --start-paused (only rank 0's viewer could resume
    them); with several ranks rank 0's viewer closes at the end, so no rank waits out the final barrier."""
    from nerfstudio_accel import distributed

    selected = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", selected.append)
    monkeypatch.setattr(distributed, "rank", lambda: 3)

    def no_cuda_probes(config) -> None:
        config.start_paused = True
        config.pipeline.model.hash_backend = config.pipeline.model.implementation = "torch"

    config = resolved_config(tiny_scene, "cuda", tmp_path, no_cuda_probes)
    trainer = config.setup(local_rank=1, world_size=4)
    assert selected == [1] and trainer.device == "cuda:1"
    assert not trainer.config.start_paused and trainer.training_state == "training"
    assert not trainer.config.is_viewer_enabled()

    monkeypatch.setattr(distributed, "rank", lambda: 0)
    with_viewer = lambda config: setattr(config, "vis", "viewer")  # noqa: E731
    config = resolved_config(tiny_scene, "cpu", tmp_path, with_viewer)
    assert config.setup(local_rank=0, world_size=2).config.viewer.quit_on_train_completion
    single = resolved_config(tiny_scene, "cpu", tmp_path, with_viewer)
    assert not single.setup(local_rank=0, world_size=1).config.viewer.quit_on_train_completion


def test_the_viewer_paces_renders_by_every_ranks_rays(tiny_scene, tmp_path):
    """nerfstudio's viewer divides the step's rays by Train Rays / Sec, which counts every rank: with 2 ranks
    it gets twice this rank's batch."""
    from types import SimpleNamespace

    trainer = make_trainer(tiny_scene, tmp_path)
    trainer.config.vis = "viewer"  # after setup: no viewer server, but the viewer update runs
    calls = []
    trainer.viewer_state = SimpleNamespace(update_scene=lambda step, rays: calls.append((step, rays)))
    trainer.world_size = 2
    trainer.pipeline.datamanager.count_rays_per_rank(300.0)
    trainer._update_viewer_state(7)
    assert calls == [(7, 600.0)]


def test_checkpoint_round_trip_restores_scaler_grid_and_mining_state(tiny_scene, tmp_path):
    """Loss scale, occupancy grid, hard-mining tau_hat, parameters and optimizer state survive a save and load."""
    torch.manual_seed(0)
    trainer = make_trainer(tiny_scene, tmp_path)
    trainer.grad_scaler = torch.amp.GradScaler("cpu", init_scale=1234.0)
    run_steps(trainer, 0, 20)
    scale, tau_hat = trainer.grad_scaler.get_scale(), trainer.pipeline.batch_sizer.tau_hat
    assert tau_hat > 1.0 and scale > 0
    trainer.save_checkpoint(19)
    grid = trainer.pipeline.model.sampler.grid
    saved = snapshot(trainer)
    assert not list(partial_checkpoint_dir(trainer.checkpoint_dir).iterdir()), (
        "the temporary file is renamed into place"
    )

    resumed = make_trainer(tiny_scene, tmp_path / "resumed", setup=False, load_dir=trainer.checkpoint_dir)
    resumed.grad_scaler = torch.amp.GradScaler("cpu", init_scale=1.0)
    resumed.setup()
    assert resumed._start_step == 20
    assert resumed.grad_scaler.get_scale() == scale
    assert resumed.pipeline.batch_sizer.tau_hat == pytest.approx(tau_hat, rel=1e-12)
    resumed_grid = resumed.pipeline.model.sampler.grid
    assert torch.equal(resumed_grid.binaries, grid.binaries) and torch.equal(resumed_grid.occs, grid.occs)
    assert bool(resumed.pipeline.model.sampler.warmed_up) == bool(trainer.pipeline.model.sampler.warmed_up)
    assert_same_state(saved, snapshot(resumed))


def test_resume_stops_at_max_num_iterations(tiny_scene, tmp_path):
    """Trained to 10 steps, resumed with --max-num-iterations 14: steps 10-13 run, the last checkpoint is step 13."""
    first = make_trainer(tiny_scene, tmp_path, max_num_iterations=10, steps_per_save=1000)
    first.train()
    assert sorted(p.name for p in first.checkpoint_dir.glob("step-*.ckpt")) == ["step-000000009.ckpt"]

    resumed = make_trainer(
        tiny_scene, tmp_path / "b", max_num_iterations=14, steps_per_save=1000, load_dir=first.checkpoint_dir
    )
    steps = []
    train_iteration = resumed.train_iteration
    resumed.train_iteration = lambda step: steps.append(step) or train_iteration(step)
    resumed.train()
    assert steps == [10, 11, 12, 13]
    assert resumed.config.max_num_iterations == 14
    assert (resumed.checkpoint_dir / "step-000000013.ckpt").is_file()


@pytest.fixture(scope="module")
def ten_step_run(tiny_scene: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkpoint folder of a 10-step run (its one checkpoint: step 9). Copy it to damage it."""
    first = make_trainer(tiny_scene, tmp_path_factory.mktemp("ten_steps"), max_num_iterations=10, steps_per_save=1000)
    first.train()
    return first.checkpoint_dir


@pytest.mark.parametrize("damage", ["cut short", "empty"])
def test_resume_passes_over_a_newest_checkpoint_that_cannot_be_read(tiny_scene, tmp_path, ten_step_run, capsys, damage):
    """A newest checkpoint cut short (a full disk) or empty: --load-dir names it and resumes from the older one."""
    load_dir = tmp_path / "nerfstudio_models"
    shutil.copytree(ten_step_run, load_dir)
    data = (load_dir / "step-000000009.ckpt").read_bytes()
    (load_dir / "step-000000012.ckpt").write_bytes(data[: len(data) // 2] if damage == "cut short" else b"")
    resumed = make_trainer(tiny_scene, tmp_path / "b", max_num_iterations=12, steps_per_save=1000, load_dir=load_dir)
    assert resumed._start_step == 10 and resumed.last_checkpoint == load_dir / "step-000000009.ckpt"
    assert "Passed over checkpoints that cannot be read: step-000000012.ckpt (" in capsys.readouterr().out


def test_resume_with_no_readable_checkpoint_stops_in_one_line(tiny_scene, tmp_path):
    load_dir = tmp_path / "nerfstudio_models"
    load_dir.mkdir()
    (load_dir / "step-000000009.ckpt").write_bytes(b"")
    with pytest.raises(SystemExit) as stopped:
        make_trainer(tiny_scene, tmp_path / "b", max_num_iterations=12, load_dir=load_dir)
    message = str(stopped.value.code)
    assert message.startswith("error: no checkpoint in") and "step-000000009.ckpt" in message
    assert "\n" not in message


@pytest.mark.slow
def test_sigkill_during_checkpoint_write_keeps_previous_checkpoint(run_cli, tiny_scene, tmp_path):
    """ns-train killed while a checkpoint is being written: every step-*.ckpt still loads, and a resume
    from them ends exactly at --max-num-iterations."""
    output = tmp_path / "out"
    checkpoints = output / "exp" / "accel-ngp" / "run" / "nerfstudio_models"
    common = [
        "--machine.device-type",
        "cpu",
        "--vis",
        "tensorboard",
        "--experiment-name",
        "exp",
        "--timestamp",
        "run",
        "--output-dir",
        str(output),
        "--steps-per-eval-image",
        "100000",
        "--steps-per-eval-batch",
        "100000",
        "--save-only-latest-checkpoint",
        "True",
        "--steps-per-save",
        "1",
    ]
    command = [
        str(Path(sys.executable).parent / "ns-train"),
        "accel-ngp",
        *common,
        "--max-num-iterations",
        "100000",
        "blender-data",
        "--data",
        str(tiny_scene),
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    killed_during_write = False
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if list(partial_checkpoint_dir(checkpoints).glob("*.ckpt.*")) and list(checkpoints.glob("step-*.ckpt")):
                process.send_signal(signal.SIGKILL)
                killed_during_write = True
                break
            time.sleep(0.0005)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
    assert killed_during_write, "never saw a checkpoint being written"
    complete = sorted(checkpoints.glob("step-*.ckpt"))
    assert complete, "the previous checkpoint must survive"
    for path in complete:
        state = torch.load(path, map_location="cpu")  # default weights_only load, as ns-eval does
        assert "pipeline" in state and "optimizers" in state
    last_step = max(int(p.stem.split("-")[1]) for p in complete)

    target = last_step + 4
    code, out, err = run_cli(
        "ns-train",
        "accel-ngp",
        *common,
        "--max-num-iterations",
        str(target),
        "--load-dir",
        str(checkpoints),
        "blender-data",
        "--data",
        str(tiny_scene),
        timeout=300,
    )
    assert code == 0, err[-3000:]
    assert not list(partial_checkpoint_dir(checkpoints).iterdir()), "the interrupted write is cleaned up"
    assert [path.name for path in checkpoints.iterdir()] == [f"step-{target - 1:09d}.ckpt"], (
        "nerfstudio's tools parse every name here"
    )
    final = sorted(checkpoints.glob("step-*.ckpt"))
    assert [p.name for p in final] == [f"step-{target - 1:09d}.ckpt"]
    assert torch.load(final[0], map_location="cpu")["step"] == target - 1


def test_step_without_gradients_leaves_the_loss_scaler_alone(tiny_scene, tmp_path):
    """fp16's scaler (simulated by an enabled CPU GradScaler) on a mined step that marches no sample: no
    parameter gets a gradient, so there is nothing to unscale, and GradScaler.update() would raise
    "No inf checks were recorded". The step passes, the scale is unchanged, the next real step updates it."""
    torch.manual_seed(0)
    trainer = make_trainer(tiny_scene, tmp_path)
    trainer.use_grad_scaler = True
    trainer.grad_scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1)
    run_steps(trainer, 0, 1)  # with the first grid update
    scale = trainer.grad_scaler.get_scale()
    grid = trainer.pipeline.model.sampler.grid
    occupied = grid.binaries.clone()
    grid.binaries.zero_()  # every ray misses: B = 0
    loss, _, metrics = trainer.train_iteration(1)
    assert float(metrics["hard_mining_B"]) == 0 and math.isfinite(float(loss))
    assert trainer.grad_scaler.get_scale() == scale and trainer.skipped_steps == 0
    grid.binaries.copy_(occupied)
    _, _, metrics = trainer.train_iteration(2)
    assert float(metrics["hard_mining_b"]) > 0
    assert trainer.grad_scaler.get_scale() == 2 * scale, "a step with gradients updates the scale (growth_interval 1)"


def test_step_whose_loss_has_no_graph_is_not_backpropagated(tiny_scene, tmp_path):
    """Ordinary training on an empty grid: the field is never called, the loss has no graph, and the
    trainer takes no optimizer step instead of failing in backward()."""
    trainer = make_trainer(tiny_scene, tmp_path, pipeline={"hard_mining": False})
    trainer.pipeline.model.sampler.grid.binaries.zero_()
    before = snapshot(trainer)
    loss, _, _ = trainer.train_iteration(0)
    assert not loss.requires_grad and math.isfinite(float(loss))
    assert_same_state(before, snapshot(trainer))


@pytest.mark.parametrize("saved_with_scaler", [False, True], ids=["fp32-then-fp16", "fp16-then-fp32"])
def test_resume_under_another_precision(tiny_scene, tmp_path, saved_with_scaler):
    """A checkpoint saved without loss scaling (fp32, bf16, CPU: an empty scaler state) resumes with fp16's
    scaler, which starts fresh; one saved with it resumes without. Training goes on in both."""
    torch.manual_seed(0)
    first = make_trainer(tiny_scene, tmp_path / "a", setup=False)
    if saved_with_scaler:
        first.use_grad_scaler, first.grad_scaler = True, torch.amp.GradScaler("cpu", init_scale=512.0)
    first.setup()
    run_steps(first, 0, 2)
    first.save_checkpoint(1)
    saved_scaler = torch.load(first.checkpoint_dir / "step-000000001.ckpt", map_location="cpu")["scalers"]
    assert bool(saved_scaler) == saved_with_scaler

    resumed = make_trainer(tiny_scene, tmp_path / "b", setup=False, load_dir=first.checkpoint_dir)
    if not saved_with_scaler:
        resumed.use_grad_scaler, resumed.grad_scaler = True, torch.amp.GradScaler("cpu", init_scale=256.0)
    resumed.setup()
    assert resumed._start_step == 2
    if not saved_with_scaler:
        assert resumed.grad_scaler.get_scale() == 256.0
    losses = run_steps(resumed, 2, 2)
    assert all(math.isfinite(loss) for loss in losses)


def test_autocast_runs_on_the_training_device(tiny_scene, monkeypatch):
    """bf16 on MPS opens autocast on "mps" (an autocast on "cpu" would leave MPS kernels in fp32 while the
    log says bf16). Built without set-up on a machine that says it has MPS, so no MPS device is needed."""
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    config = resolved_config(tiny_scene, "mps", configure=lambda config: setattr(config, "precision", "bf16"))
    trainer = config.setup(local_rank=0, world_size=1)
    region = trainer.autocast()
    assert (region.device, region.fast_dtype, trainer.precision) == ("mps", torch.bfloat16, "bf16")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_tiny_cuda_nn_keeps_loss_scaling_in_every_precision(tiny_scene, precision):
    """tiny-cuda-nn computes in fp16 whatever the autocast: a run that uses it keeps loss scaling."""

    def tcnn_in(precision: str, implementation: str):
        def configure(config) -> None:
            config.precision, config.pipeline.model.implementation = precision, implementation

        return configure

    config = resolved_config(tiny_scene, "cpu", configure=tcnn_in(precision, "tcnn"))
    trainer = config.setup(local_rank=0, world_size=1)  # the model (which would refuse tcnn on CPU) is not built
    assert trainer.use_grad_scaler and trainer.grad_scaler.is_enabled() and trainer.precision == precision
    assert (
        not resolved_config(tiny_scene, "cpu", configure=tcnn_in(precision, "torch"))
        .setup(local_rank=0, world_size=1)
        .use_grad_scaler
    )
    config.pipeline.model.hash_backend = "tcnn"  # tiny-cuda-nn's encoding alone also computes in fp16
    config.pipeline.model.implementation = "torch"
    assert config.pipeline.model.uses_tcnn()


def test_checkpoint_folder_is_synced_before_older_checkpoints_go(tiny_scene, tmp_path, monkeypatch):
    """The rename of a new checkpoint reaches the disk (fsync of its folder) before older ones are deleted."""
    trainer = make_trainer(tiny_scene, tmp_path, save_only_latest_checkpoint=True)
    trainer.save_checkpoint(0)
    events = []
    real_fsync, real_unlink = os.fsync, Path.unlink

    def fsync(handle):
        target = os.readlink(f"/proc/self/fd/{handle}")
        events.append(("fsync", "folder" if os.path.isdir(target) else Path(target).name))
        return real_fsync(handle)

    def unlink(path, *args, **kwargs):
        events.append(("unlink", path.name))
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(Path, "unlink", unlink)
    trainer.save_checkpoint(1)
    assert ("unlink", "step-000000000.ckpt") in events
    assert ("fsync", "folder") in events
    assert events.index(("fsync", "folder")) < events.index(("unlink", "step-000000000.ckpt"))
