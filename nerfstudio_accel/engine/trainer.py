"""AccelTrainer: nerfstudio's Trainer with explicit precision, a non-finite step guard, atomic
checkpoints and resume that stops at ``--max-num-iterations``.

- ``--precision {auto,fp32,fp16,bf16}``: autocast covers the model's forward; accel renderers run in
  fp32 whatever the autocast (see :mod:`nerfstudio_accel.rendering`); parameters stay fp32. fp16
  uses a GradScaler whose scale is logged as ``loss_scale``, and so does any precision when the
  model runs tiny-cuda-nn (whose kernels compute in fp16 whatever the autocast). ``auto`` is fp16
  on CUDA and fp32 elsewhere.
- ``--machine.device-type`` defaults to the machine's device: cuda where torch sees a GPU, else cpu
  (nerfstudio's default, cuda, fails with a driver trace on a machine without one). Asking for a device
  torch cannot use stops with one line.
- Every ``auto`` choice (precision, the pipeline's and model's defaults from the device and the scene) is
  resolved once, from ``--machine.device-type`` and the scene folder, before nerfstudio writes config.yml
  (:meth:`AccelTrainerConfig.resolve`), so the saved config rebuilds the same model on any device
  (``ns-eval`` picks CUDA whenever it exists). A config built in code and given to nerfstudio's
  ``train_loop`` (never saved) is resolved where the trainer is made, before anything is built.
- A step whose loss or gradients are not finite is skipped: no optimizer or scheduler step, so
  parameters and optimizer state are untouched. Skips are counted and logged; after
  ``--max-consecutive-skips`` in a row training stops with one line naming the step and the last
  good checkpoint.
- Checkpoints are written to a temporary file beside the checkpoint folder (nerfstudio's tools parse
  every name inside it), flushed, renamed into place and the folder synced before older checkpoints
  are deleted, so neither a crash nor a power loss during a save leaves no checkpoint or a folder
  that ``ns-eval``, ``ns-viewer`` and ``ns-render`` cannot open.
- A split scene on as many ranks as blocks (``--pipeline.spatial-blocks K --machine.num-devices K``) trains one
  block per rank: every rank seeded alike (the same rays), shared parameters' gradients summed, no viewer or
  evaluation during training, and rank 0 writing every block into one ordinary checkpoint (docs/spatial_blocks.md).
- A resumed run (``--load-dir`` / ``--load-checkpoint``) starts from the newest checkpoint that can be read (the
  ones passed over are named), continues at the saved step and ends at
  ``--max-num-iterations`` in total (nerfstudio 1.1.5 would train that many more). It may change
  ``--precision``: a checkpoint without loss-scaler state starts a fresh scaler.
- On the CPU, through numba kernels and started without an OpenMP wait policy, it says how to start with one
  (:mod:`~nerfstudio_accel.openmp_wait`).
- Ctrl-C or SIGTERM in a one-process run finishes the step under way, saves it as a checkpoint, prints one line
  saying how to resume and exits with the signal's status (130 for Ctrl-C); a second one stops at once
  (:mod:`~nerfstudio_accel.engine.stop_requests`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import random
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Tuple, Type

import numpy
import torch
import tyro
from nerfstudio.configs.base_config import MachineConfig
from nerfstudio.engine.callbacks import TrainingCallback, TrainingCallbackLocation
from nerfstudio.engine.trainer import Trainer, TrainerConfig
from nerfstudio.utils import comms
from nerfstudio.utils.decorators import check_main_thread, check_viewer_enabled
from nerfstudio.utils.rich_utils import CONSOLE

from nerfstudio_accel import distributed
from nerfstudio_accel.data.prefetching_datamanager import AccelDataManagerConfig
from nerfstudio_accel.encodings.hash_encoding import grow_to_fit_checkpoint
from nerfstudio_accel.engine.event_writers import release_event_writers
from nerfstudio_accel.engine.resume_checks import check_resumable, model_tensors
from nerfstudio_accel.engine.run_claim import CHECKPOINT_GLOB, claim_run_folder
from nerfstudio_accel.engine.stop_requests import (
    SIGNAL_NAMES,
    StoppedAtOnce,
    StopRequests,
    TrainingInterrupted,
    exit_status,
)
from nerfstudio_accel.engine.warm_start import warm_start
from nerfstudio_accel.errors import AccelError, CheckpointError, ConfigError, exit_message
from nerfstudio_accel.openmp_wait import wait_policy_hint
from nerfstudio_accel.pipelines.accel_pipeline import AccelPipeline, AccelPipelineConfig
from nerfstudio_accel.pipelines.hard_mining import HardSampleMiningPipelineConfig
from nerfstudio_accel.spatial import block_ranks
from nerfstudio_accel.step_phases import phase
from nerfstudio_accel.viewer.accel_panel import AccelPanel
from nerfstudio_accel.viewer.training_stats import TrainingStats
from nerfstudio_accel.viewer.training_viewer import TrainingViewer

Precision = Literal["auto", "fp32", "fp16", "bf16"]


class TrainingStopped(SystemExit):
    """Training gave up (e.g. too many non-finite steps); the message is one line for the user."""


def resolve_precision(requested: Precision, device_type: str) -> Literal["fp32", "fp16", "bf16"]:
    """The precision to train in on ``device_type``; raises :class:`~nerfstudio_accel.errors.ConfigError` (one line) when it cannot run there."""
    if requested not in ("auto", "fp32", "fp16", "bf16"):
        raise ConfigError(f"unknown precision {requested!r}; choose auto, fp32, fp16 or bf16")
    if requested == "auto":
        return "fp16" if device_type == "cuda" else "fp32"
    if requested == "fp16" and device_type != "cuda":
        raise ConfigError(f"--precision fp16 needs a CUDA device (this run is on {device_type}); use bf16 or fp32")
    if requested == "bf16" and device_type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError("--precision bf16 is not supported by this GPU; use fp16 or fp32")
    return requested


def machine_device_type() -> Literal["cuda", "cpu"]:
    """The device this machine trains on by default: cuda where torch sees a CUDA GPU, else cpu."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def require_device(device_type: str) -> None:
    """Raise :class:`~nerfstudio_accel.errors.ConfigError` (one line) when torch cannot use ``device_type`` here."""
    missing = (device_type == "cuda" and not torch.cuda.is_available()) or (
        device_type == "mps" and not torch.backends.mps.is_available()
    )
    if missing:
        raise ConfigError(
            f"--machine.device-type {device_type}: torch finds no such device on this machine; "
            f"train with --machine.device-type {machine_device_type()}"
        )


@dataclass
class AccelTrainerConfig(TrainerConfig):
    """nerfstudio TrainerConfig plus precision, gradient clipping and the non-finite step guard."""

    _target: Type = field(default_factory=lambda: AccelTrainer)
    machine: MachineConfig = field(default_factory=lambda: MachineConfig(device_type=machine_device_type()))
    precision: Precision = "auto"
    """Autocast precision of the model forward: fp16 (with loss scaling) on CUDA for auto, fp32 elsewhere."""
    mixed_precision: tyro.conf.Suppress[bool] = False
    """Set from --precision (kept for nerfstudio code that reads it)."""
    use_grad_scaler: tyro.conf.Suppress[bool] = False
    """Set from --precision: loss scaling exactly for fp16."""
    max_grad_norm: Optional[float] = None
    """Clip the global gradient norm (after unscaling) to this; None: no clipping."""
    max_consecutive_skips: int = 20
    """Stop training after this many steps in a row with non-finite loss or gradients."""
    viewer_opens_at_training_camera: bool = True
    """Open each web-viewer page beside the first training camera, clear of its frustum (nerfstudio opens it
    at viser's default spot, inside most scenes, where renders cost the most); it moves freely from there."""
    accel_panel_every: int = 10
    """With the web viewer: steps between refreshes of its Accel panel (each reads the step's metrics from
    the device); 0: no panel. Without a viewer there is no panel and no cost."""
    overwrite_checkpoints: bool = False
    """Train anew into a run folder that holds an earlier run's checkpoints, deleting them (without it such a
    folder is refused; --load-dir resumes it instead)."""

    def resolve(self, eval_split: str = "val") -> None:
        """Resolve every ``auto`` choice (precision, the pipeline's and model's, from ``machine.device_type``
        and the scene folder, whose training and ``eval_split`` views are checked), in place, and the
        autocast and loss-scaling switches that follow. Raises :class:`~nerfstudio_accel.errors.AccelError`
        (one line): bad data, a precision or kernel the device lacks. Called once, before config.yml is
        written; idempotent."""
        if not isinstance(self.pipeline, AccelPipelineConfig):
            raise ConfigError(f"AccelTrainer trains accel pipelines only, not {type(self.pipeline).__name__}")
        device_type = self.machine.device_type
        if self.blocks_on_ranks():
            self._check_blocks_on_ranks()
        self.precision = resolve_precision(self.precision, device_type)
        self.pipeline.resolve(device_type, eval_split)
        self.mixed_precision = self.precision != "fp32"
        self.use_grad_scaler = self.precision == "fp16" or self.pipeline.model.uses_tcnn()

    def blocks_on_ranks(self) -> bool:
        """Whether a split scene trains one block per rank (``--pipeline.spatial-blocks K`` on several ranks)."""
        return self.pipeline.spatial_blocks > 1 and self.machine.num_devices * self.machine.num_machines > 1

    def _check_blocks_on_ranks(self) -> None:
        """As many ranks as blocks; no hard mining (a rank's mined subset would need the other blocks'
        importances; ``--pipeline.hard-mining auto`` becomes False), no gradient clipping or accumulation (a rank
        holds one block's gradients); batches prepared on the training thread (a producer thread reads the dynamic
        batch size when it gets to it, which differs between ranks, so their rays would differ)."""
        blocks, ranks = self.pipeline.spatial_blocks, self.machine.num_devices * self.machine.num_machines
        if ranks != blocks:
            raise ConfigError(
                f"--pipeline.spatial-blocks {blocks} on {ranks} devices: one block per rank needs as many devices as "
                f"blocks; use --machine.num-devices {blocks}, or 1 to train the blocks in one process"
            )
        clipped = [
            f"--optimizers.{g}.optimizer.max-norm" for g, c in self.optimizers.items() if c["optimizer"].max_norm
        ]
        clipped += ["--max-grad-norm"] if self.max_grad_norm is not None else []
        if clipped or any(steps > 1 for steps in self.gradient_accumulation_steps.values()):
            what = clipped[0] if clipped else "--gradient-accumulation-steps"
            raise ConfigError(
                f"{what} with one block per rank ({blocks} devices) is not built (each rank holds one block's "
                f"gradients); leave it unset, or train with --machine.num-devices 1"
            )
        datamanager = self.pipeline.datamanager
        if isinstance(datamanager, AccelDataManagerConfig):
            datamanager.resolve(self.machine.device_type)
            if datamanager.prefetch_batches > 0:
                datamanager.prefetch_batches = 0
                CONSOLE.print(
                    "One block per rank: batches are prepared on the training thread (--pipeline.datamanager."
                    "prefetch-batches 0), so every rank draws the same rays"
                )
        if isinstance(self.pipeline, HardSampleMiningPipelineConfig):
            if self.pipeline.hard_mining is True:
                raise ConfigError(
                    f"--pipeline.hard-mining True with one block per rank ({blocks} devices) is not built; "
                    f"use --pipeline.hard-mining False, or --machine.num-devices 1"
                )
            self.pipeline.hard_mining = False

    def save_config(self) -> None:
        """nerfstudio's config.yml, written after the device check and :meth:`resolve` (ns-train's entry into
        this package, before its launcher starts any rank: a problem exits with one line)."""
        with one_line_exit():
            require_device(self.machine.device_type)
            self.resolve()
            self.claim_run_folder()
        super().save_config()

    def claim_run_folder(self) -> None:
        """This process's claim on the run folder (:mod:`~nerfstudio_accel.engine.run_claim`): no other ns-train
        trains there, and no earlier run's checkpoints are there unless this run resumes or replaces them."""
        resumes = self.load_dir is not None or self.load_checkpoint is not None
        claim_run_folder(self.get_base_dir(), self.get_checkpoint_dir(), resumes, self.overwrite_checkpoints)


CPU_MIXED_PRECISION_NOTE = "Mixed precision is disabled for CPU training."
"""What nerfstudio's Trainer prints on every CPU run, whatever the precision (this trainer prints its own)."""


@contextlib.contextmanager
def nerfstudio_precision_notes_silenced():
    """Within: nerfstudio's Trainer set-up says nothing of precision. It prints :data:`CPU_MIXED_PRECISION_NOTE`
    (wrong for bf16) and builds a CUDA-only GradScaler, which warns when deprecated or off CUDA; the accel
    trainer replaces the scaler and prints one line of its own."""
    console_print = CONSOLE.print

    def without_the_note(*objects, **kwargs):
        if objects != (CPU_MIXED_PRECISION_NOTE,):
            console_print(*objects, **kwargs)

    CONSOLE.print = without_the_note  # type: ignore[method-assign]
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*GradScaler")
            yield
    finally:
        CONSOLE.print = console_print  # type: ignore[method-assign]


@contextlib.contextmanager
def one_line_exit():
    """Turn an :class:`~nerfstudio_accel.errors.AccelError` into a one-line exit (at ns-train's entries)."""
    try:
        yield
    except AccelError as error:
        raise SystemExit(exit_message(error)) from None


def seed_every_generator(seed: int) -> None:
    """Seed python's, numpy's and torch's generators (CPU and every GPU) with ``seed``, as nerfstudio's launcher
    seeds a rank (with ``seed + rank``)."""
    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)


def to_cpu(value: Any) -> Any:
    """``value`` (nested dicts, lists and tuples of tensors) with every tensor copied to the CPU."""
    if torch.is_tensor(value):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {key: to_cpu(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(item) for item in value)
    return value


def training_step(trainer: Trainer, step: int):
    """One step as nerfstudio's training loop runs it, without its timers, viewer updates and logging: the
    pipeline in training mode, the callbacks before the iteration (grid updates, annealing),
    ``train_iteration``, the callbacks after. For any nerfstudio ``Trainer``; returns
    ``(loss, loss_dict, metrics)``."""
    trainer.pipeline.train()
    for callback in trainer.callbacks:
        callback.run_callback_at_location(step, location=TrainingCallbackLocation.BEFORE_TRAIN_ITERATION)
    result = trainer.train_iteration(step)
    for callback in trainer.callbacks:
        callback.run_callback_at_location(step, location=TrainingCallbackLocation.AFTER_TRAIN_ITERATION)
    return result


def viewer_off(vis: str) -> str:
    """``--vis`` without the viewer: a rank other than 0 renders nothing (nerfstudio starts a viewer on every
    machine's local rank 0, which in a multi-machine run slows that rank and so every rank). Its loggers
    stay: nerfstudio's writers write on rank 0 only."""
    if vis in ("viewer", "viewer_legacy"):
        return "tensorboard"
    return vis.split("+", 1)[1] if vis.startswith("viewer+") else vis


def sync_directory(directory: Path) -> None:
    """Flush a folder's entries (a rename into it) to disk; a no-op where folders cannot be opened (Windows)."""
    if os.name != "posix":
        return
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def partial_checkpoint_dir(checkpoint_dir: Path) -> Path:
    """Where checkpoints are written before their rename into ``checkpoint_dir``: a hidden folder beside it
    (same filesystem, so the rename is atomic), outside the folder nerfstudio's tools list and parse."""
    return checkpoint_dir.parent / f".{checkpoint_dir.name}-partial"


def newest_readable_checkpoint(candidates: List[Path]) -> Tuple[Path, Dict[str, Any]]:
    """The first of ``candidates`` (newest first) that torch can read, with its state; each one passed over is
    named with the reason. Raises :class:`CheckpointError` when none can be read."""
    unreadable = []
    for candidate in candidates:
        try:
            state = torch.load(candidate, map_location="cpu")
        except (EOFError, RuntimeError, OSError, pickle.UnpicklingError) as error:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            unreadable.append(f"{candidate.name} ({reason})")
            continue
        if unreadable:
            CONSOLE.print(f"Passed over checkpoints that cannot be read: {'; '.join(unreadable)}", soft_wrap=True)
        return candidate, state
    raise CheckpointError(
        f"no checkpoint in {candidates[0].parent} can be read: {'; '.join(unreadable)}; resume from another "
        f"checkpoint or train from scratch"
    )


class AccelTrainer(Trainer):
    """See the module docstring."""

    config: AccelTrainerConfig
    pipeline: AccelPipeline

    def __init__(self, config: AccelTrainerConfig, local_rank: int = 0, world_size: int = 1) -> None:
        if config.machine.device_type == "cuda" and torch.cuda.is_available():
            # nerfstudio's launcher never selects the rank's GPU: kernels that launch on the current device
            # (Triton, tiny-cuda-nn) would run every rank's work on GPU 0
            torch.cuda.set_device(local_rank)
        self.blocks_on_ranks = world_size > 1 and config.blocks_on_ranks()
        if self.blocks_on_ranks:
            seed_every_generator(config.machine.seed)  # every rank draws the same rays, jitter and backgrounds
            config.vis = viewer_off(config.vis)  # a view renders every block: all ranks together, never rank 0 alone
            config.start_paused = False  # no viewer could resume it
            if distributed.rank() == 0:
                CONSOLE.print(
                    f"One block per rank ({world_size} blocks): no viewer and no evaluation during training (both "
                    f"need every block); open the finished run with ns-viewer or ns-eval"
                )
        if distributed.rank() != 0:
            config.vis = viewer_off(config.vis)
            config.start_paused = False  # only rank 0's viewer could resume it; the others wait at the all-reduce
        if world_size > 1 and config.is_viewer_enabled() and not config.viewer.quit_on_train_completion:
            # rank 0's viewer would keep it running after training while the other ranks wait at the
            # launcher's final barrier, which times out after 30 minutes and takes the job down
            config.viewer.quit_on_train_completion = True
            CONSOLE.print(
                "Multi-GPU training: the viewer closes when training completes (--viewer.quit-on-train-completion)"
            )
        with one_line_exit():
            require_device(config.machine.device_type)
            if not config.pipeline.model.resolved:  # built in code and given to train_loop: never saved
                config.resolve()
        with nerfstudio_precision_notes_silenced():
            super().__init__(config, local_rank, world_size)
        device_type = str(self.device).split(":")[0]
        self.precision: Literal["fp32", "fp16", "bf16"] = config.precision  # type: ignore[assignment]
        self.autocast_device = device_type
        self.mixed_precision, self.use_grad_scaler = config.mixed_precision, config.use_grad_scaler
        self.grad_scaler = torch.amp.GradScaler(device_type, enabled=self.use_grad_scaler)
        self.skipped_steps = 0
        self.consecutive_skips = 0
        self.peers_stepped = False
        """With one block per rank: whether any rank had gradients this step (a rank whose block had no samples
        still steps its schedulers with the others)."""
        self.stepped = False
        """Whether an optimizer step was taken in this process: until then, with loss scaling, skipped steps with a
        finite loss calibrate the scale (said once, not per step)."""
        self.last_checkpoint: Optional[Path] = None
        self.own_checkpoints: List[Path] = []
        """The checkpoints of this run in its checkpoint folder (written, or resumed from there): the only ones
        --save-only-latest-checkpoint deletes."""
        self.stop_requests = StopRequests(on_first=self._leave_pause, on_second=self._last_checkpoint_note)
        self.training_viewer: Optional[TrainingViewer] = None
        scaling = " with loss scaling" if self.use_grad_scaler else ""
        why = " (tiny-cuda-nn runs in fp16)" if self.use_grad_scaler and self.precision != "fp16" else ""
        if distributed.rank() == 0:
            CONSOLE.print(f"Training precision: {self.precision}{scaling} on {device_type}{why}")
            hint = wait_policy_hint(os.environ, device_type == "cpu" and config.pipeline.model.runs_numba_kernels())
            if hint is not None:
                CONSOLE.print(hint)

    def autocast(self) -> contextlib.AbstractContextManager:
        """The autocast region of a training forward in this run's precision (a no-op for fp32)."""
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(device_type=self.autocast_device, dtype=dtype, enabled=self.mixed_precision)

    # --- set-up ---------------------------------------------------------------------------------------

    def setup(self, test_mode: Literal["test", "val", "inference"] = "val") -> None:
        """nerfstudio's set-up; a problem the user fixes (e.g. a checkpoint that does not fit) exits with one line."""
        release_event_writers()  # an earlier run's in this process: this run's events go to this run's log only
        with one_line_exit():
            if self.world_size == 1:  # with several ranks, ns-train's own process holds the claim
                self.config.claim_run_folder()
            super().setup(test_mode)
            self._warm_start()
        # first of all callbacks: a stop asked for during the last step ends training before this one begins
        stop_check = TrainingCallback([TrainingCallbackLocation.BEFORE_TRAIN_ITERATION], self.stop_requests.check)
        self.callbacks.insert(0, stop_check)

    def _warm_start(self) -> None:
        """``--pipeline.model.init-from``: the model starts from that run's matching tensors, unless this run
        resumed from its own checkpoint (which wins)."""
        init_from = self.config.pipeline.model.init_from
        if init_from is None:
            return
        if self.last_checkpoint is not None:
            CONSOLE.print(f"Resumed from {self.last_checkpoint}: --pipeline.model.init-from {init_from} is not used")
            return
        report = warm_start(self.pipeline.model, init_from, self.config.pipeline.scene_data_path())
        if distributed.rank() == 0:
            CONSOLE.print(report.line())

    # --- the web viewer -------------------------------------------------------------------------

    def _init_viewer_state(self) -> None:
        """nerfstudio's viewer scene, then this package's additions to it (none without a viewer or with the
        legacy one)."""
        super()._init_viewer_state()
        if self.viewer_state is None or self.config.is_viewer_legacy_enabled():
            return
        stats = TrainingStats(max_steps=self.config.max_num_iterations + self._start_step, precision=self.precision)
        self.training_viewer = TrainingViewer.attach(
            self.viewer_state,
            self.pipeline,
            self.autocast_device,
            self.config.viewer_opens_at_training_camera,
            self.config.accel_panel_every,
            stats,
            self.train_lock,
        )

    @property
    def accel_panel(self) -> Optional[AccelPanel]:
        """The viewer's Accel panel, when a viewer runs with one."""
        return self.training_viewer.panel if self.training_viewer is not None else None

    @check_viewer_enabled
    def _update_viewer_state(self, step: int) -> None:
        """nerfstudio's viewer update, paced by every rank's rays (the Train Rays / Sec it divides by counts
        them all)."""
        assert self.viewer_state is not None
        if self.training_viewer is not None:
            self.training_viewer.before_update()
        rays_per_step = self.pipeline.datamanager.get_train_rays_per_batch() * self.world_size
        try:
            self.viewer_state.update_scene(step, rays_per_step)
        except RuntimeError:
            time.sleep(0.03)
            CONSOLE.log("Viewer failed. Continuing training.")

    # --- one step --------------------------------------------------------------------------------

    def train_iteration(self, step: int):
        started = time.perf_counter()
        loss, loss_dict, metrics_dict = self._train_iteration(step)
        seconds = time.perf_counter() - started
        waited = self.pipeline.datamanager.last_wait_seconds  # the pipelined input sampler's figure of merit
        metrics_dict["input_wait_ms"] = torch.tensor(1000.0 * waited)
        metrics_dict["input_stall_fraction"] = torch.tensor(waited / max(seconds, 1e-9))
        if self.training_viewer is not None:
            self.training_viewer.after_step(step, seconds, loss, metrics_dict)
        return loss, loss_dict, metrics_dict

    def _train_iteration(self, step: int):
        groups = list(self.optimizers.parameters.keys())
        accumulation = self.gradient_accumulation_steps
        self.optimizers.zero_grad_some([g for g in groups if step % accumulation[g] == 0])
        logged = step % max(self.config.logging.steps_per_log, 1) == 0
        with self.autocast():
            _, loss_dict, metrics_dict = self.pipeline.get_train_loss_dict(step=step, timed=logged)
        loss = functools.reduce(torch.add, [value.float() for value in loss_dict.values()])
        scaled = self.grad_scaler.scale(
            loss
        )  # on every rank, graph or not: the scaler's state starts at the first call
        if loss.requires_grad:  # a step with no sample to learn from (e.g. every ray misses) has no graph
            with phase("backward"):
                scaled.backward()
        losses_finite = self._share_gradients(loss, groups)
        with phase("optimizer"):
            finite = self._optimizer_step(step, loss, groups, losses_finite, metrics_dict)
        metrics_dict["skipped_steps"] = torch.tensor(self.skipped_steps)
        if not finite:
            self._on_skipped_step(
                step, calibrating=self.use_grad_scaler and not self.stepped and loss.isfinite().item()
            )
        return loss.detach(), {name: value.detach() for name, value in loss_dict.items()}, metrics_dict

    def _optimizer_step(
        self, step: int, loss: torch.Tensor, groups: List[str], losses_finite: bool, metrics_dict
    ) -> bool:
        """Unscale, check, clip and step the groups whose accumulation ends at ``step``, then the scaler and
        the schedulers; a non-finite loss or gradient skips the step instead. Returns whether it was finite."""
        accumulation = self.gradient_accumulation_steps
        stepping = [
            g
            for g in groups
            if step % accumulation[g] == accumulation[g] - 1
            and any(p.grad is not None for p in self.optimizers.parameters[g])
        ]
        for group in stepping:
            self.grad_scaler.unscale_(self.optimizers.optimizers[group])
        finite = losses_finite and self._finite(loss, groups)
        if finite:
            self._clip_gradients(stepping, metrics_dict)
            for group in stepping:
                self.grad_scaler.step(self.optimizers.optimizers[group])
            self.consecutive_skips = 0
        else:
            self.optimizers.zero_grad_some(groups)  # nothing of a poisoned step survives into accumulation
            self.skipped_steps += 1
            self.consecutive_skips += 1
        if self.use_grad_scaler:
            metrics_dict["loss_scale"] = torch.tensor(self.grad_scaler.get_scale())
        if stepping:  # the scaler updates from the inf checks of its unscale_ calls: none, nothing to update
            self.grad_scaler.update()
        if finite and (stepping or self.peers_stepped):
            self.optimizers.scheduler_step_all(step)
            if not self.stepped and self.skipped_steps and distributed.rank() == 0:
                CONSOLE.print(
                    f"Loss scale calibrated: {self.grad_scaler.get_scale():g} after {self.skipped_steps} skipped steps"
                )
            self.stepped = True
        return finite

    def _share_gradients(self, loss: torch.Tensor, groups: List[str]) -> bool:
        """Under torch.distributed, average every rank's gradients weighted by its batch's rays (one
        all-reduce, :func:`~nerfstudio_accel.distributed.average_gradients`) and return whether every rank's
        loss was finite; the rays per rank go to the datamanager for nerfstudio's Train Rays / Sec. In one
        process: gradients untouched, True (the step guard checks this rank's loss)."""
        rays = self.pipeline.rays_in_last_batch
        losses_finite, rays_per_rank = True, float(rays)
        if self.blocks_on_ranks:  # every rank trained on the same rays
            owned = self.pipeline.model.rank_owned_parameters()
            assert owned is not None, "one block per rank: the model holds one block"
            owned_ids = {id(p) for p in owned}
            shared = [p for g in groups for p in self.optimizers.parameters[g] if id(p) not in owned_ids]
            sync = distributed.sum_shared_gradients(shared, owned, loss)
            losses_finite, rays_per_rank = sync.finite, rays / self.world_size
            mine = any(p.grad is not None for p in owned)
            self.peers_stepped = sync.ranks_with_gradients > 0
            if self.use_grad_scaler and self.peers_stepped and not mine:
                for p in owned:  # a scaler steps only with gradients to check; Adam then moves this block (one process
                    p.grad = torch.zeros_like(p)  # would leave a block without samples alone)
        elif self.world_size > 1:
            params = [p for g in groups for p in self.optimizers.parameters[g]]
            sync = distributed.average_gradients(params, weight=rays, loss=loss)
            losses_finite, rays_per_rank = sync.losses_finite, sync.total_weight / self.world_size
        self.pipeline.datamanager.count_rays_per_rank(rays_per_rank)
        return losses_finite

    def _clip_gradients(self, groups: List[str], metrics_dict) -> None:
        """Per-group ``max_norm`` of nerfstudio's optimizer configs, then the global ``--max-grad-norm``."""
        for group in groups:
            max_norm = self.optimizers.config[group]["optimizer"].max_norm
            if max_norm is not None:
                torch.nn.utils.clip_grad_norm_(self.optimizers.parameters[group], max_norm)
        if self.config.max_grad_norm is not None and groups:
            params = [p for g in groups for p in self.optimizers.parameters[g]]
            metrics_dict["grad_norm"] = torch.nn.utils.clip_grad_norm_(params, self.config.max_grad_norm)

    def _finite(self, loss: torch.Tensor, groups: List[str]) -> bool:
        """Whether the loss and every gradient of the given parameter groups are finite (one device sync).
        A sum is non-finite when any term is, and costs one read of each gradient (``isfinite(t).all()``
        writes a mask the size of the hash table first)."""
        grads = [p.grad for g in groups for p in self.optimizers.parameters[g] if p.grad is not None]
        return bool(torch.isfinite(torch.stack([t.sum(dtype=torch.float32) for t in (loss, *grads)])).all())

    def _on_skipped_step(self, step: int, calibrating: bool) -> None:
        """Say so (once for the loss scale's calibration: a finite loss whose scaled gradients overflow before the
        first step), and stop after ``--max-consecutive-skips`` in a row."""
        last = str(self.last_checkpoint) if self.last_checkpoint is not None else "none saved yet"
        if distributed.rank() == 0:  # every rank skips the same steps (they agree in the gradient all-reduce)
            if not calibrating:
                CONSOLE.print(
                    f"[yellow]step {step}: non-finite loss or gradients, step skipped ({self.consecutive_skips} in a row)"
                )
            elif self.skipped_steps == 1:
                CONSOLE.print(
                    "Calibrating the loss scale: steps whose scaled gradients overflow are skipped until it fits"
                )
        if self.consecutive_skips >= self.config.max_consecutive_skips:
            raise TrainingStopped(
                f"error: training stopped at step {step} after {self.consecutive_skips} consecutive steps with "
                f"non-finite loss or gradients; last good checkpoint: {last}"
            )

    @check_main_thread
    def eval_iteration(self, step: int) -> None:
        """nerfstudio's evaluation, on rank 0 only (the others would evaluate the same weights; their
        results were never logged). The other ranks wait for it at the next step's all-reduce. None with one
        block per rank (rank 0 holds one block)."""
        if not self.blocks_on_ranks:
            super().eval_iteration(step)

    # --- checkpoints and resume ------------------------------------------------------------------

    def save_checkpoint(self, step: int) -> None:
        """nerfstudio's checkpoint, written to a temporary file and renamed into place (atomic); the folder
        is synced before older checkpoints go, so a power loss cannot leave none. Written by rank 0 only, as in
        nerfstudio (other ranks would write and delete the same files); with one block per rank, every rank
        calls it and rank 0 writes every block in the one-process form
        (:mod:`~nerfstudio_accel.spatial.block_ranks`)."""
        if not self.blocks_on_ranks and not comms.is_main_process():  # nerfstudio's main-process guard
            return
        state = {
            "step": step,
            "pipeline": self.pipeline.state_dict(),  # never DDP-wrapped (see AccelPipeline)
            "optimizers": {k: v.state_dict() for k, v in self.optimizers.optimizers.items()},
            "schedulers": {k: v.state_dict() for k, v in self.optimizers.schedulers.items()},
            "scalers": self.grad_scaler.state_dict(),
        }
        if self.blocks_on_ranks:
            parts = distributed.gather_to_first(
                {"pipeline": to_cpu(state["pipeline"]), "optimizers": to_cpu(state["optimizers"])}
            )
            if parts is None:
                return
            state["pipeline"] = block_ranks.merged_state([part["pipeline"] for part in parts])
            for group in self._block_groups():
                state["optimizers"][group] = block_ranks.merged_optimizer_state(
                    [part["optimizers"][group] for part in parts]
                )
        self._write_checkpoint(step, state)

    def _block_groups(self) -> List[str]:
        """With one block per rank, the optimizer groups of this rank's block (the others are shared)."""
        owned = {id(p) for p in self.pipeline.model.rank_owned_parameters() or []}
        return [g for g, params in self.optimizers.parameters.items() if params and id(params[0]) in owned]

    def _write_checkpoint(self, step: int, state: Dict[str, Any]) -> None:
        """Write ``state`` as ``step``'s checkpoint (see :meth:`save_checkpoint`)."""
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        final = self.checkpoint_dir / f"step-{step:09d}.ckpt"
        partial_dir = partial_checkpoint_dir(self.checkpoint_dir)
        partial_dir.mkdir(exist_ok=True)
        partial = partial_dir / f"{final.name}.{os.getpid()}"
        with open(partial, "wb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, final)
        sync_directory(self.checkpoint_dir)
        self.last_checkpoint = final
        if self.config.save_only_latest_checkpoint:
            for old in self.own_checkpoints:
                if old != final:
                    old.unlink(missing_ok=True)
            self.own_checkpoints = [final]
        elif final not in self.own_checkpoints:
            self.own_checkpoints.append(final)

    def _load_checkpoint(self) -> None:
        """Resume from the newest checkpoint of ``--load-dir`` that loads (one that does not, say a file cut short
        by a full disk, is named and passed over), or from ``--load-checkpoint``."""
        path = self.config.load_checkpoint
        if self.config.load_dir is not None and path is None:
            load_dir = Path(self.config.load_dir)
            # saves interrupted by a crash (every rank clears them: the first wins)
            for stale in partial_checkpoint_dir(load_dir).glob("*.ckpt.*"):
                stale.unlink(missing_ok=True)
            steps = sorted(int(checkpoint.stem.split("-")[1]) for checkpoint in load_dir.glob(CHECKPOINT_GLOB))
            if self.config.load_step is not None:
                steps = [s for s in steps if s == self.config.load_step]
            if not steps:
                raise CheckpointError(f"no checkpoint to resume from in {load_dir}; train without --load-dir")
            path, state = newest_readable_checkpoint([load_dir / f"step-{step:09d}.ckpt" for step in reversed(steps)])
        elif path is None:
            CONSOLE.print("No checkpoint to load: training from scratch.")
            return
        elif not Path(path).is_file():
            raise CheckpointError(f"checkpoint {path} does not exist; check --load-checkpoint")
        else:
            path, state = newest_readable_checkpoint([Path(path)])
        if self.blocks_on_ranks:  # this rank's part of the one-process checkpoint: rank r holds block r
            state["pipeline"] = block_ranks.own_part_of_state(state["pipeline"], distributed.rank())
        grow_to_fit_checkpoint(self.pipeline.model, model_tensors(state["pipeline"]))  # a table grown in training
        check_resumable(self.pipeline.model, self.config, Path(path), state["pipeline"])
        if self.blocks_on_ranks:
            for group in self._block_groups():
                state["optimizers"][group] = block_ranks.own_part_of_optimizer_state(
                    state["optimizers"][group], distributed.rank(), self.world_size
                )
        self._start_step = state["step"] + 1
        self.pipeline.load_pipeline(state["pipeline"], state["step"])
        try:
            self.optimizers.load_optimizers(state["optimizers"])
        except (KeyError, ValueError) as error:
            raise CheckpointError(
                f"the optimizer state in {path} does not fit this run's parameter groups ({error!r}); resume "
                f"with the optimizer settings of the run that saved it"
            ) from None
        if "schedulers" in state and self.config.load_scheduler:
            self.optimizers.load_schedulers(state["schedulers"])
        self._load_scaler(state.get("scalers", {}))
        self.last_checkpoint = Path(path)
        if Path(path).parent.absolute() == self.checkpoint_dir.absolute():
            self.own_checkpoints.append(Path(path))
        CONSOLE.print(f"Resuming from {path} (step {state['step']})", soft_wrap=True)  # a path to copy: unwrapped

    def _stop_with_checkpoint(self, interrupted: TrainingInterrupted) -> None:
        """Save the last complete step (the one before ``interrupted.step``) and exit with the signal's status,
        saying in one line where the checkpoint is and how to resume."""
        name, done = SIGNAL_NAMES[interrupted.signum], interrupted.step - 1
        if done >= self._start_step:
            self.save_checkpoint(done)
            saved = f"stopped after step {done}; saved {self.last_checkpoint}"
        else:
            saved = f"stopped before the first step; {self._last_checkpoint_note()}"
        if self.last_checkpoint is not None:
            saved += f". Resume: the same ns-train command with --load-dir {self.last_checkpoint.parent}"
        CONSOLE.print(f"{name}: {saved}", soft_wrap=True)
        raise SystemExit(exit_status(interrupted.signum))

    def _leave_pause(self) -> None:
        """A run paused in the viewer goes on, so that the next step's start can stop it."""
        if self.training_state == "paused":
            self.training_state = "training"

    def _last_checkpoint_note(self) -> str:
        """Where this run's last checkpoint is, for a message."""
        if self.last_checkpoint is None:
            return "no checkpoint saved"
        return f"the last checkpoint is {self.last_checkpoint}"

    def _after_train(self) -> None:
        """nerfstudio's end of training (the final checkpoint, the summary, the viewer's wait) with nerfstudio's
        Ctrl-C back; a stop asked for during the last step needs no more waiting for the viewer."""
        self.stop_requests.restore()
        if self.stop_requests.signum is not None:
            self.config.viewer.quit_on_train_completion = True
        super()._after_train()

    def _load_scaler(self, scaler_state: Dict[str, Any]) -> None:
        """The checkpoint's loss-scaler state; a run without loss scaling saved none (an empty dict), so a
        resume with fp16 starts a fresh scaler, and a resume without loss scaling ignores a saved one."""
        if self.use_grad_scaler and not scaler_state:
            CONSOLE.print(
                "The checkpoint has no loss-scaler state (it trained without loss scaling): starting a fresh scaler."
            )
            return
        self.grad_scaler.load_state_dict(scaler_state)

    def train(self) -> None:
        """Train until ``--max-num-iterations`` steps in total, counting those before a resume; in a one-process
        run, Ctrl-C or SIGTERM saves the last complete step and exits with the signal's status."""
        total = self.config.max_num_iterations
        try:
            if self._start_step >= total:
                CONSOLE.print(f"Already trained {self._start_step} of {total} steps; nothing to do.")
                return
            self.config.max_num_iterations = total - self._start_step
            if self.world_size == 1:  # ranks would stop at different steps and wait for each other
                self.stop_requests.install()
            try:
                super().train()
            except TrainingInterrupted as interrupted:
                self._stop_with_checkpoint(interrupted)
        except StoppedAtOnce as stopped:
            raise SystemExit(exit_status(stopped.signum)) from None
        finally:
            self.stop_requests.restore()
            self.config.max_num_iterations = total
            self.pipeline.datamanager.close()  # the pipelined input sampler's producer thread
            release_event_writers()
