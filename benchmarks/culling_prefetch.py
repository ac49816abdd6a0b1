"""accel-ngp's fused marching and culling kernel with and without planning each next step's table rows ahead.

    python benchmarks/culling_prefetch.py [--data data/blender/lego] [--downscale 4] [--warmup 300] [--steps 6]
        [--rounds 20] [--markdown FILE] [--json FILE] [-- ns-train flags...]

Builds accel-ngp (occupancy sampler, CPU) as ``ns-train`` does, trains ``--warmup`` steps, records the fused
kernel's inputs over ``--steps`` more training steps, checks that both ways give the same kept samples, then calls
the kernel on them ``--rounds`` times each way, alternating which goes first (``prefetch`` of
:func:`~nerfstudio_accel.kernels.march_cull_numba.march_and_cull`: without it each point's rows are still hashed and
prefetched before they are read, but only after the previous step's MLP). Per way: median and least ms a call;
and the median of the per-call ratios with its quartiles. Timings, so never a test assert.
"""

from __future__ import annotations

import copy
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
from step_ops import step_arguments, warmed_up_trainer, write_report

from nerfstudio_accel.engine.trainer import training_step
from nerfstudio_accel.kernels import march_cull_numba

WAYS = {"next step planned ahead": True, "each step planned when reached": False}
"""Report label -> ``prefetch``."""


def recorded_calls(trainer, first_step: int, steps: int) -> List[tuple]:
    """The fused kernel's ``(args, kwargs)`` in ``steps`` training steps from ``first_step`` (copied)."""
    calls, run = [], march_cull_numba.march_and_cull

    def recording(*args, **kwargs):
        calls.append(copy.deepcopy((args, kwargs)))
        return run(*args, **kwargs)

    march_cull_numba.march_and_cull = recording
    try:
        for step in range(first_step, first_step + steps):
            training_step(trainer, step)
    finally:
        march_cull_numba.march_and_cull = run
    return calls


def time_ways(calls: List[tuple], rounds: int) -> Dict[str, Dict[str, float]]:
    """Per way: median and least ms a call, kept samples a call, and (but the first) its per-call ratio to the
    first way (median, quartiles)."""
    outputs = {
        way: [march_cull_numba.march_and_cull(*a, **k, prefetch=on) for a, k in calls] for way, on in WAYS.items()
    }
    first, *others = WAYS
    for way in others:
        for ours, theirs in zip(outputs[first], outputs[way]):
            assert all(torch.equal(a, b) for a, b in zip(ours[:5], theirs[:5])) and ours[5] == theirs[5], way
    seconds: Dict[str, List[float]] = {way: [] for way in WAYS}
    for round_index in range(rounds):
        for way in list(WAYS)[:: 1 if round_index % 2 == 0 else -1]:
            for args, kwargs in calls:
                started = time.perf_counter()
                march_cull_numba.march_and_cull(*args, **kwargs, prefetch=WAYS[way])
                seconds[way].append(time.perf_counter() - started)
    kept = float(np.mean([len(output[0]) for output in outputs[first]]))
    results = {}
    for way, values in seconds.items():
        ms = 1000.0 * np.array(values)
        ratio = ms / (1000.0 * np.array(seconds[first]))
        results[way] = {"median_ms": float(np.median(ms)), "least_ms": float(ms.min()), "kept": kept}
        results[way].update({f"ratio_q{q}": float(np.percentile(ratio, q)) for q in (25, 50, 75)})
    return results


def markdown(results: Dict[str, Dict[str, float]], command: str, calls: int, rounds: int) -> str:
    first = next(iter(results))
    lines = [
        f"accel-ngp's fused marching and culling kernel, {calls} recorded calls x {rounds} rounds each way, alternated "
        f"(`{command}`).",
        "",
        "| way | median ms a call | least ms | per call, x the first way (q25 / median / q75) | kept a call |",
        "|---|---:|---:|---|---:|",
    ]
    for way, row in results.items():
        ratio = "1" if way == first else f"{row['ratio_q25']:.3f} / **{row['ratio_q50']:.3f}** / {row['ratio_q75']:.3f}"
        lines.append(f"| {way} | {row['median_ms']:.2f} | {row['least_ms']:.2f} | {ratio} | {row['kept']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> None:
    def more_options(parser) -> None:
        parser.add_argument("--rounds", type=int, default=20, help="timed calls of each recorded batch, each way")

    description = __doc__.split("\n\n")[0]
    args, flags, command = step_arguments(
        argv, "culling_prefetch.py", description, 6, "training steps whose kernel calls are recorded", more_options,
        samplers=("occupancy",),
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = warmed_up_trainer(args, "occupancy", flags, Path(output_dir))
        calls = recorded_calls(trainer, args.warmup, args.steps)
        trainer.pipeline.datamanager.close()
    if not calls:
        raise SystemExit(
            "error: no fused marching and culling call was recorded; it runs on the CPU with the kernel hash backend"
        )
    results = time_ways(calls, args.rounds)
    write_report(markdown(results, command, len(calls), args.rounds), results, command, args)


if __name__ == "__main__":
    main()
