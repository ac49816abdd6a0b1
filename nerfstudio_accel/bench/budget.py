"""Train a nerfstudio ``Trainer`` for a wall-clock budget and score it on its evaluation views.

The loop is nerfstudio's own training step (callbacks before and after, ``train_iteration``),
timed without evaluation so that methods are compared at equal training time.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import torch
from nerfstudio.engine.callbacks import TrainingCallbackLocation

from nerfstudio_accel.bench.memory import peak_rss_bytes
from nerfstudio_accel.metrics import psnr_and_ssim
from nerfstudio_accel.rendering import composite_ground_truth


@dataclass
class BudgetRun:
    """What a budgeted run did: steps, training seconds, marched samples, and the score curve."""

    steps: int = 0
    train_seconds: float = 0.0
    samples: int = 0
    rays: int = 0
    train_peak_rss_bytes: Optional[int] = None
    """Peak resident memory before the first evaluation (evaluation renders whole images)."""
    curve: List[Dict[str, float]] = field(default_factory=list)

    @property
    def ms_per_step(self) -> float:
        return 1000.0 * self.train_seconds / max(self.steps, 1)

    @property
    def rays_per_second(self) -> float:
        return self.rays / max(self.train_seconds, 1e-9)


@torch.no_grad()
def evaluate_views(pipeline, background=(1.0, 1.0, 1.0)) -> Dict[str, float]:
    """Mean PSNR (dB) and SSIM over every view of the pipeline's eval dataset.

    RGBA targets are composited over ``background`` (white: what accel methods and nerfstudio's
    blender parser evaluate on), so methods that keep or drop alpha are scored alike.
    """
    was_training = pipeline.training
    pipeline.eval()
    dataset = pipeline.datamanager.eval_dataset
    scores = []
    for index in range(len(dataset)):
        camera = dataset.cameras[index : index + 1].to(pipeline.device)
        rgb = pipeline.model.get_outputs_for_camera(camera)["rgb"]
        target = dataset.get_image_float32(index).to(rgb.device)
        scores.append(psnr_and_ssim(rgb, composite_ground_truth(target, torch.tensor(background, device=rgb.device))))
    pipeline.train(was_training)
    return {key: sum(score[key] for score in scores) / len(scores) for key in ("psnr", "ssim")}


def train_for_budget(
    trainer,
    budget_seconds: float,
    max_steps: Optional[int] = None,
    eval_points: int = 1,
    on_eval: Optional[Callable[[Dict[str, float]], None]] = None,
    tracked: Sequence[str] = (),
    clock: Callable[[], float] = time.perf_counter,
) -> BudgetRun:
    """Run training steps until ``budget_seconds`` of training time (or ``max_steps``) is spent,
    evaluating at ``eval_points`` evenly spaced times (the last at the end), outside the clock.
    Each curve point also holds the mean, since the previous point, of the ``tracked`` training
    metrics the pipeline reports (e.g. ``hard_mining_fraction``). ``clock`` measures the budget:
    wall time by default; ``time.process_time`` (CPU time of all threads) is steadier on a shared machine.

    Raises ``FloatingPointError`` on a non-finite loss.
    """
    run = BudgetRun()
    next_eval = budget_seconds / eval_points
    pipeline = trainer.pipeline
    interval: Dict[str, List[float]] = {name: [] for name in tracked}
    while run.train_seconds < budget_seconds and (max_steps is None or run.steps < max_steps):
        start = clock()
        pipeline.train()
        for callback in trainer.callbacks:
            callback.run_callback_at_location(run.steps, location=TrainingCallbackLocation.BEFORE_TRAIN_ITERATION)
        loss, _, metrics = trainer.train_iteration(run.steps)
        for callback in trainer.callbacks:
            callback.run_callback_at_location(run.steps, location=TrainingCallbackLocation.AFTER_TRAIN_ITERATION)
        run.train_seconds += clock() - start
        run.samples += int(metrics.get("num_samples_per_batch", 0))
        run.rays += int(metrics.get("num_rays_per_batch", 0))
        run.steps += 1
        for name in tracked:
            if name in metrics:
                interval[name].append(float(metrics[name]))
        if not math.isfinite(float(loss)):
            raise FloatingPointError(f"non-finite loss at step {run.steps}")
        finished = run.train_seconds >= budget_seconds or (max_steps is not None and run.steps >= max_steps)
        if run.train_seconds >= next_eval or finished:
            if run.train_peak_rss_bytes is None:
                run.train_peak_rss_bytes = peak_rss_bytes()
            point = {"seconds": round(run.train_seconds, 2), "step": run.steps, **evaluate_views(pipeline)}
            point.update({name: sum(values) / len(values) for name, values in interval.items() if values})
            interval = {name: [] for name in tracked}
            run.curve.append(point)
            if on_eval is not None:
                on_eval(point)
            next_eval += budget_seconds / eval_points
            if finished:
                break
    return run
