"""Train a nerfstudio ``Trainer`` for a training-time budget, scoring it at evenly spaced times.

The loop is nerfstudio's own training step (callbacks before and after, ``train_iteration``),
timed without evaluation so that methods are compared at equal training time. On CUDA the device
is synchronized before each clock reading, so a step's queued kernels count against its own time.
One untimed warm-up step comes first: methods that load or compile CUDA extensions lazily (nerfstudio's
instant-ngp, splatfacto, nerfacc's ops) pay for it there, not inside the budget.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import torch

from nerfstudio_accel.bench.evaluation import evaluate_views
from nerfstudio_accel.bench.memory import TrainingPeakMemory
from nerfstudio_accel.engine.trainer import AccelTrainer, training_step


@dataclass
class BudgetRun:
    """What a budgeted run did: steps, training seconds, rays and marched samples, memory, score curve."""

    steps: int = 0
    """Timed training steps (the warm-up step not counted)."""
    train_seconds: float = 0.0
    warmup_seconds: float = 0.0
    """The untimed first step's seconds (lazy extension loads and compiles land there)."""
    skipped_steps: int = 0
    """Steps AccelTrainer's guard skipped for a non-finite loss or gradient."""
    samples: int = 0
    """Samples the model reported (``num_samples_per_batch``); 0 for models that report none."""
    rays: int = 0
    """Rays trained on: the pipeline's ``num_rays_per_batch`` metric, else the datamanager's fixed batch."""
    peak_memory_bytes: int = 0
    """Training's peak memory, evaluations left out (see :class:`TrainingPeakMemory`)."""
    peak_memory_kind: str = ""
    tracked_means: Dict[str, float] = field(default_factory=dict)
    """Mean over all steps of each tracked training metric the pipeline reported."""
    curve: List[Dict[str, float]] = field(default_factory=list)
    """One point per evaluation: ``seconds``, ``step`` (steps trained, the warm-up included), the
    evaluation's metrics, and the mean of each tracked metric since the previous point."""

    @property
    def ms_per_step(self) -> float:
        return 1000.0 * self.train_seconds / max(self.steps, 1)

    @property
    def rays_per_second(self) -> float:
        return self.rays / max(self.train_seconds, 1e-9)


def train_for_budget(
    trainer,
    budget_seconds: float,
    max_steps: Optional[int] = None,
    eval_points: int = 1,
    evaluate: Optional[Callable[[bool], Dict[str, float]]] = None,
    on_eval: Optional[Callable[[Dict[str, float]], None]] = None,
    on_step: Optional[Callable[[BudgetRun], None]] = None,
    tracked: Sequence[str] = (),
    clock: Callable[[], float] = time.perf_counter,
) -> BudgetRun:
    """Run training steps until ``budget_seconds`` of training time (or ``max_steps``) is spent,
    evaluating at ``eval_points`` evenly spaced times (the last at the end), outside the clock.

    Args:
        evaluate: called as ``evaluate(final)``; returns the metrics of a curve point
            (default: :func:`evaluate_views`, PSNR and SSIM over the eval split).
        on_eval: called with each curve point. ``on_step``: called with the run after each step.
        tracked: training metrics (e.g. ``hard_mining_fraction``) averaged per interval and overall.
        clock: measures the budget; wall time by default, ``time.process_time`` (CPU time of all
            threads) is steadier on a shared machine.

    Raises ``FloatingPointError`` on a non-finite loss, unless the trainer is an :class:`AccelTrainer`,
    whose guard skips such steps (counted in ``skipped_steps``; it stops training itself after too many).
    """
    pipeline = trainer.pipeline
    if evaluate is None:
        evaluate = lambda final: evaluate_views(pipeline)  # noqa: E731
    synchronize = torch.cuda.synchronize if torch.device(pipeline.device).type == "cuda" else (lambda: None)
    fixed_rays_per_batch = getattr(pipeline.datamanager.config, "train_num_rays_per_batch", 0)
    memory = TrainingPeakMemory(pipeline.device)
    run = BudgetRun(peak_memory_kind=memory.kind)
    next_eval = budget_seconds / eval_points
    interval: Dict[str, List[float]] = {name: [] for name in tracked}
    totals: Dict[str, List[float]] = {name: [] for name in tracked}
    guarded = isinstance(trainer, AccelTrainer)

    def train_step(step: int):
        """One step as nerfstudio's loop runs it; returns its seconds, loss and metrics."""
        synchronize()
        start = clock()
        loss, _, metrics = training_step(trainer, step)
        synchronize()
        if not guarded and not math.isfinite(float(loss)):
            raise FloatingPointError(f"non-finite loss at step {step}")
        return clock() - start, metrics

    run.warmup_seconds, _ = train_step(0)
    memory.after_evaluation()  # the warm-up's one-off allocations stay out of the training peak
    while run.train_seconds < budget_seconds and (max_steps is None or run.steps < max_steps):
        seconds, metrics = train_step(run.steps + 1)
        run.train_seconds += seconds
        run.samples += int(metrics.get("num_samples_per_batch", 0))
        run.rays += int(metrics.get("num_rays_per_batch", fixed_rays_per_batch))
        run.steps += 1
        for name in tracked:
            if name in metrics:
                interval[name].append(float(metrics[name]))
                totals[name].append(float(metrics[name]))
        if on_step is not None:
            on_step(run)
        finished = run.train_seconds >= budget_seconds or (max_steps is not None and run.steps >= max_steps)
        if run.train_seconds >= next_eval or finished:
            memory.before_evaluation()
            run.peak_memory_bytes = memory.bytes
            point = {"seconds": round(run.train_seconds, 2), "step": run.steps + 1, **evaluate(finished)}
            memory.after_evaluation()
            point.update({name: sum(values) / len(values) for name, values in interval.items() if values})
            interval = {name: [] for name in tracked}
            run.curve.append(point)
            if on_eval is not None:
                on_eval(point)
            next_eval += budget_seconds / eval_points
    run.tracked_means = {name: sum(values) / len(values) for name, values in totals.items() if values}
    run.skipped_steps = trainer.skipped_steps if guarded else 0
    return run
