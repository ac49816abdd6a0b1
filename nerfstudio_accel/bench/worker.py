"""One benchmark run in its own process: train one method for the budget, score it, report events.

``ns-accel-bench`` starts ``python -m nerfstudio_accel.bench.worker REQUEST_JSON`` once per method and
repeat, so each run's peak memory is its own and a crash takes only its row. The worker keeps its
stdout for events (one JSON object per line: ``progress``, ``evaluating``, ``eval``, then ``done`` or
``failed``) and sends everything else it and nerfstudio print to its stderr, which is the run's log.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable, Dict

from nerfstudio_accel.errors import AccelError, exit_message

PROGRESS_EVERY_SECONDS = 0.5
TRACKED_METRICS = ("hard_mining_fraction", "hard_mining_tau_hat", "input_stall_fraction")


def _events_channel():
    """A line-buffered writer on the original stdout; fd 1 is pointed at the log (fd 2) from here on."""
    events = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    return events


def _seed_everything(seed: int) -> None:
    import numpy
    import torch

    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)


def run(request: Dict, emit: Callable[..., None]) -> Dict:
    """Train and score the request's method; returns the run's result (see ``ns-accel-bench``'s results.json)."""
    from nerfstudio_accel.bench.budget import train_for_budget
    from nerfstudio_accel.bench.configs import MethodSpec, build_config
    from nerfstudio_accel.bench.evaluation import evaluate_views, evenly_spaced_views
    from nerfstudio_accel.bench.memory import training_graph_bytes
    from nerfstudio_accel.metrics import ImageMetrics, lpips_without_downloads, psnr_and_ssim

    spec = MethodSpec.parse(request["label"])
    with tempfile.TemporaryDirectory(prefix="ns-accel-bench-") as scratch:
        config = build_config(
            spec,
            Path(request["data"]),
            request["dataparser"],
            request["downscale"],
            request["device"],
            request["seed"],
            Path(scratch),
            resolve=True,
        )
        _seed_everything(request["seed"])
        with lpips_without_downloads():  # nerfstudio's models build LPIPS as they set up; the bench scores it itself
            trainer = config.setup(local_rank=0, world_size=1)
            trainer.setup(test_mode="test")
        pipeline = trainer.pipeline
        final_scorer = ImageMetrics().to(pipeline.device)
        last_progress = [0.0]

        def on_step(budget_run) -> None:
            now = time.monotonic()
            if now - last_progress[0] >= PROGRESS_EVERY_SECONDS:
                last_progress[0] = now
                emit(event="progress", seconds=budget_run.train_seconds, step=budget_run.steps)

        def evaluate(final: bool) -> Dict[str, float]:
            """Every test view at the end; before it, ``eval_views`` evenly spaced ones when the request says so."""
            emit(event="evaluating")
            views = evenly_spaced_views(
                None if final else request.get("eval_views"), len(pipeline.datamanager.eval_dataset)
            )
            return evaluate_views(pipeline, final_scorer if final else psnr_and_ssim, views=views)

        budget_run = train_for_budget(
            trainer,
            request["budget_seconds"],
            max_steps=request["max_steps"],
            eval_points=request["eval_points"],
            evaluate=evaluate,
            on_eval=lambda point: emit(
                event="eval", **{key: point[key] for key in ("seconds", "step", "psnr", "views", "views_total")}
            ),
            on_step=on_step,
            tracked=TRACKED_METRICS,
        )
        graph_bytes = training_graph_bytes(trainer, budget_run.steps + 1)
    final = budget_run.curve[-1]
    curve_keys = ("seconds", "step", "psnr", "ssim", "num_samples_per_ray", "views", "views_total") + TRACKED_METRICS
    return {
        "steps": budget_run.steps,
        "train_seconds": budget_run.train_seconds,
        "ms_per_step": budget_run.ms_per_step,
        "warmup_seconds": budget_run.warmup_seconds,
        "skipped_steps": budget_run.skipped_steps,
        "rays_per_second": budget_run.rays_per_second if budget_run.rays else None,
        "samples_per_step": budget_run.samples / budget_run.steps if budget_run.samples else None,
        "peak_memory_mb": budget_run.peak_memory_bytes / 2**20,
        "peak_memory_kind": budget_run.peak_memory_kind,
        "graph_mb": graph_bytes / 2**20,
        **budget_run.tracked_means,
        "results": {
            key: value
            for key, value in final.items()
            if key not in ("seconds", "step", "views", "views_total", *TRACKED_METRICS)
        },
        "curve": [{key: point[key] for key in curve_keys if key in point} for point in budget_run.curve],
    }


def main() -> int:
    events = _events_channel()

    def emit(**event) -> None:
        events.write(json.dumps(event) + "\n")

    try:
        emit(event="done", result=run(json.loads(sys.argv[1]), emit))
    except AccelError as error:  # bad data or a choice the device lacks, found as the config is resolved
        print(exit_message(error), file=sys.stderr)  # the run's log says why too
        emit(event="failed", reason=str(error))
        return 1
    except SystemExit as stop:  # the trainer stops on bad input with one line as the exit message
        reason = str(stop.code)[len("error: ") :] if str(stop.code).startswith("error: ") else str(stop.code)
        emit(event="failed", reason=reason if isinstance(stop.code, str) else f"exited with code {stop.code}")
        return 1
    except Exception as error:  # the row says why in one line; the traceback goes to the run's log
        traceback.print_exc()
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        emit(event="failed", reason=f"{type(error).__name__}: {message}".rstrip(": "))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
