"""``ns-accel-bench``: train methods for an equal training-time budget on one scene and compare them.

    ns-accel-bench --data data/lego --methods accel-ngp,accel-ngp:--pipeline.hard-mining=False,nerfacto \\
        --budget-seconds 300 --downscale 4 --out outputs/bench/lego

Each method trains through nerfstudio's own ``Trainer`` with the config ``ns-train`` builds for it
(plus the entry's flags), on the same data, device and seed, in a process of its own. The test
split is scored at ``--eval-points`` evenly spaced training times (evaluation time is not counted;
with ``--eval-views N`` the points before the last score only N evenly spaced test views);
``--out`` receives ``results.json``, ``results.md``, ``psnr_vs_time.png`` and one log per run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, NoReturn, Optional

from nerfstudio_accel.bench.configs import (
    DATAPARSERS,
    BenchError,
    MethodSpec,
    build_config,
    check_data,
    parse_methods,
    prescaled_factor,
    resolve_dataparser,
    unsupported_reason,
)
from nerfstudio_accel.bench.report import summarize_method, write_outputs
from nerfstudio_accel.openmp_wait import openmp_wait_setting, passive_wait_environment
from nerfstudio_accel.version_floors import UnsupportedVersion, check_version_floors

OUTPUT_FILES = ("results.json", "results.md", "psnr_vs_time.png")


class _OneLineErrors(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parse_arguments(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = _OneLineErrors(
        prog="ns-accel-bench",
        description="Train nerfstudio methods for an equal training-time budget on one scene; write results.json, "
        "results.md and psnr_vs_time.png.",
    )
    parser.add_argument(
        "--data", type=Path, required=True, metavar="DIR", help="scene folder (Blender, nerfstudio or COLMAP format)"
    )
    parser.add_argument("--dataparser", choices=("auto", *DATAPARSERS), default="auto",
                        help="how to read --data; auto: blender-data if transforms_train.json is there, else nerfstudio-data "
                        "if transforms.json is, else colmap (a model in colmap/sparse/0, sparse/0 or sparse, photos in images/)")  # fmt: skip
    parser.add_argument("--methods", action="append", required=True, metavar="NAME[:FLAGS],...",
                        help="comma-separated methods, each with optional ns-train flags after ':', e.g. "
                        "accel-ngp,accel-ngp:--pipeline.hard-mining=False,nerfacto (repeatable)")  # fmt: skip
    parser.add_argument(
        "--budget-seconds",
        type=float,
        default=300.0,
        metavar="S",
        help="training time per run, evaluation excluded (default 300)",
    )
    parser.add_argument(
        "--max-steps", type=int, metavar="N", help="also stop each run at this many steps (equal-steps comparisons)"
    )
    parser.add_argument(
        "--eval-points",
        type=int,
        default=5,
        metavar="N",
        help="evaluations of the test split along the budget, the last at the end (default 5)",
    )
    parser.add_argument("--eval-views", type=int, metavar="N",
                        help="evaluations before the last score only N evenly spaced test views (faster on big splits); "
                        "the last scores every view (default: every view at every evaluation)")  # fmt: skip
    parser.add_argument(
        "--device", choices=("auto", "cpu", "cuda", "mps"), default="auto", help="auto: cuda when available, else cpu"
    )
    parser.add_argument(
        "--downscale",
        type=float,
        default=1.0,
        metavar="F",
        help="image downscale factor, e.g. 4 trains lego at 100x100 (default 1)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        metavar="N",
        help="runs per method (seeds seed, seed+1, ...), every method in turn per repeat; tables show median and min–max",
    )
    parser.add_argument("--seed", type=int, default=42, help="seed of the first repeat (default 42)")
    parser.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="folder for the results and the per-run logs"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace results already in --out")
    args = parser.parse_args(argv)
    if not args.budget_seconds > 0:
        parser.error(f"--budget-seconds must be positive, got {args.budget_seconds:g}")
    if not args.downscale >= 1:
        parser.error(f"--downscale must be at least 1 (it divides the image size), got {args.downscale:g}")
    for name, value in (
        ("--max-steps", args.max_steps),
        ("--eval-points", args.eval_points),
        ("--eval-views", args.eval_views),
        ("--repeats", args.repeats),
    ):
        if value is not None and value < 1:
            parser.error(f"{name} must be at least 1, got {value}")
    return args


@dataclass
class Plan:
    """What the bench will run: checked settings and, per method, why it cannot run (or ``None``)."""

    args: argparse.Namespace
    dataparser: str
    device: str
    specs: List[MethodSpec]
    unsupported: Dict[str, Optional[str]]
    meta: Dict


def _resolve_device(requested: str) -> str:
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise BenchError(
            "--device cuda, but torch sees no CUDA device; use --device cpu or a CUDA build of torch on a GPU machine"
        )
    if requested == "mps" and not torch.backends.mps.is_available():
        raise BenchError("--device mps, but torch reports MPS unavailable; use --device cpu")
    return requested


def _meta(args: argparse.Namespace, dataparser: str, device: str, argv: List[str]) -> Dict:
    """Settings and versions written at the top of results.json and results.md."""
    from importlib.metadata import version

    import torch

    device_name = torch.cuda.get_device_name(0) if device == "cuda" else device
    return {
        "scene": args.data.resolve().name,
        "data": str(args.data),
        "dataparser": dataparser,
        "device": device,
        "device_name": device_name,
        "budget_seconds": args.budget_seconds,
        "max_steps": args.max_steps,
        "eval_points": args.eval_points,
        "eval_views": args.eval_views,
        "downscale": args.downscale,
        "parser_downscale_factor": prescaled_factor(args.data, dataparser, args.downscale),
        "repeats": args.repeats,
        "seed": args.seed,
        "threads": torch.get_num_threads(),
        "openmp_wait": openmp_wait_setting(passive_wait_environment(os.environ)),
        "versions": {name: version(name) for name in ("torch", "nerfstudio", "nerfacc", "nerfstudio-accel")},
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join(["ns-accel-bench", *map(shlex.quote, argv)]),
    }


def prepare(args: argparse.Namespace, argv: List[str]) -> Plan:
    """Check everything that can be checked before training: data, device, methods and their flags, --out."""
    dataparser = resolve_dataparser(args.data, args.dataparser)
    check_data(args.data, dataparser, args.downscale)
    device = _resolve_device(args.device)
    specs = parse_methods(args.methods)
    existing = [name for name in OUTPUT_FILES if (args.out / name).exists()]
    if existing and not args.overwrite:
        raise BenchError(
            f"{args.out} already holds {existing[0]}; pass --overwrite to replace it or choose another --out"
        )
    unsupported = {}
    for spec in specs:  # builds every config now, so a bad flag stops the bench before any training
        config = build_config(spec, args.data, dataparser, args.downscale, device, args.seed, args.out)
        unsupported[spec.label] = unsupported_reason(config, device)
    return Plan(args, dataparser, device, specs, unsupported, _meta(args, dataparser, device, argv))


def worker_command(request: Dict) -> List[str]:
    """The worker process's command line. Not ``python -m``: that puts the working directory ahead of
    ``PYTHONPATH``, so a bench started from another checkout's root would train that checkout's package."""
    code = (
        "import os, sys\n"
        "if sys.path and sys.path[0] in ('', os.getcwd()): del sys.path[0]\n"  # not so under -P: nothing to drop
        "from nerfstudio_accel.bench.worker import main\n"
        "sys.exit(main())"
    )
    return [sys.executable, "-c", code, json.dumps(request)]


def run_worker(request: Dict, log_path: Path, on_event: Callable[[Dict], None]) -> Dict:
    """Run one method in a worker process; returns ``{"status": "ok", ...result}`` or ``{"status": "failed", "reason": ...}``."""
    command = worker_command(request)
    outcome = None
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=log, text=True, env=passive_wait_environment(os.environ)
        )
        try:
            for line in process.stdout:
                event = json.loads(line)
                if event["event"] in ("done", "failed"):
                    outcome = event
                else:
                    on_event(event)
            process.wait()
        except BaseException:
            process.kill()
            process.wait()
            raise
    if outcome is not None and outcome["event"] == "done":
        return {"status": "ok", **outcome["result"]}
    reason = (
        outcome["reason"]
        if outcome is not None
        else f"the run's process exited with code {process.returncode} before reporting"
    )
    return {"status": "failed", "reason": reason}


class _RunProgress:
    """Rich progress bars fed by worker events: one over the whole bench, one per run, plus a line per evaluation."""

    def __init__(self, progress, budget: float, runs: int) -> None:
        self.progress, self.budget = progress, budget
        self.overall = progress.add_task("all methods", total=max(runs, 1) * budget)
        self.finished_seconds = 0.0

    def start(self, title: str) -> Callable[[Dict], None]:
        """Add the bar of a run titled ``title``; returns the handler of its worker's events."""
        task = self.progress.add_task(title, total=self.budget)

        def on_event(event: Dict) -> None:
            if event["event"] == "progress":
                seconds = min(event["seconds"], self.budget)
                self.progress.update(task, completed=seconds, description=f"{title}, step {event['step']}")
                self.progress.update(self.overall, completed=self.finished_seconds + seconds)
            elif event["event"] == "evaluating":
                self.progress.update(task, description=f"{title}, evaluating")
            elif event["event"] == "eval":
                views = event.get("views", 0), event.get("views_total", 0)
                scored = f" ({views[0]} of {views[1]} views)" if views[0] < views[1] else ""
                self.progress.console.print(
                    f"{title}: {event['seconds']:7.1f} s, step {event['step']:6d}, test PSNR {event['psnr']:.2f} dB{scored}"
                )

        self.task, self.title = task, title
        return on_event

    def finish(self, run: Dict) -> None:
        """Fill the bar of the run that just ended and say so."""
        self.finished_seconds += self.budget
        self.progress.update(self.overall, completed=self.finished_seconds)
        self.progress.update(
            self.task,
            completed=self.budget,
            description=f"{self.title}: {'done' if run['status'] == 'ok' else 'failed'}",
        )


def execute(plan: Plan) -> int:
    """Run every method and repeat under a progress bar, rewriting the outputs after each run. Repeat by repeat,
    every method runs in turn (seed ``--seed + repeat``), so a machine that speeds up or slows down during the
    benchmark touches every method alike. Returns 1 when a run failed, else 0."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    args = plan.args
    (args.out / "logs").mkdir(parents=True, exist_ok=True)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:>6.0f} / {task.total:.0f} s"),
        TimeElapsedColumn(),
    )
    runs: Dict[str, List[Dict]] = {spec.label: [] for spec in plan.specs}

    def entries() -> List[Dict]:
        """The methods that ran or cannot run, in ``--methods`` order."""
        return [
            summarize_method(spec, plan.meta["scene"], runs[spec.label], unsupported=plan.unsupported[spec.label])
            for spec in plan.specs
            if runs[spec.label] or plan.unsupported[spec.label] is not None
        ]

    with Progress(*columns, console=Console(stderr=True, soft_wrap=True, highlight=False)) as progress:
        console = progress.console
        runnable = [spec for spec in plan.specs if plan.unsupported[spec.label] is None]
        for spec in plan.specs:
            if plan.unsupported[spec.label] is not None:
                console.print(f"[yellow]{spec.label}[/]: not run on {plan.device}: {plan.unsupported[spec.label]}")
        if len(runnable) < len(plan.specs):
            write_outputs(args.out, plan.meta, entries())
        bars = _RunProgress(progress, args.budget_seconds, len(runnable) * args.repeats)
        for repeat in range(args.repeats):
            for spec in runnable:
                title = spec.label + (f" (repeat {repeat + 1}/{args.repeats})" if args.repeats > 1 else "")
                log_path = args.out / "logs" / f"{re.sub(r'[^A-Za-z0-9._=-]+', '_', spec.label)}-{repeat + 1}.log"
                request = {
                    "label": spec.label, "data": str(args.data), "dataparser": plan.dataparser, "downscale": args.downscale,
                    "device": plan.device, "seed": args.seed + repeat, "budget_seconds": args.budget_seconds,
                    "max_steps": args.max_steps, "eval_points": args.eval_points, "eval_views": args.eval_views,
                }  # fmt: skip
                outcome = run_worker(request, log_path, bars.start(title))
                runs[spec.label].append(
                    {
                        "repeat": repeat + 1,
                        "seed": request["seed"],
                        "log": str(log_path.relative_to(args.out)),
                        **outcome,
                    }
                )
                bars.finish(outcome)
                if outcome["status"] != "ok":
                    console.print(f"[red]{title}[/]: failed: {outcome['reason']} (log: {log_path})")
                write_outputs(args.out, plan.meta, entries())
    print((args.out / "results.md").read_text())
    console.print(f"wrote {', '.join(str(args.out / name) for name in OUTPUT_FILES)}")
    return 1 if any(run["status"] == "failed" for method_runs in runs.values() for run in method_runs) else 0


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_arguments(argv)
    try:
        check_version_floors()
        plan = prepare(args, argv)
    except (BenchError, UnsupportedVersion) as error:
        print(f"ns-accel-bench: error: {error}", file=sys.stderr)
        return 2
    try:
        return execute(plan)
    except KeyboardInterrupt:
        print(f"ns-accel-bench: interrupted; the runs that finished are in {args.out}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
