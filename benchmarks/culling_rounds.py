"""accel-ngp's culling density pass with front-to-back rounds of each first length, on one trained model.

    python benchmarks/culling_rounds.py [--data data/blender/lego] [--downscale 4] [--device cpu]
        [--first-samples 0 16] [--warmup 2000] [--steps 20] [--markdown FILE] [--json FILE] [-- ns-train flags...]

Builds accel-ngp (occupancy sampler) as ``ns-train`` does (defaults plus the flags after ``--``), trains
``--warmup`` steps, then draws ``--steps`` training batches. On each batch, for each ``--first-samples`` value in
turn (``--pipeline.model.occupancy.culling-first-samples``; the same stratified jitter), it runs the sampling and no-grad
forward that a mined step scores with, under a :class:`~nerfstudio_accel.step_phases.PhaseClock`: ms in the
``marching`` and ``culling density pass`` phases, and the candidates marched, densities read and samples kept
(the kept counts must agree: the rounds keep the same samples). Timings, so never a test assert. Rounds apply to
the unfused pass only: on the CPU with the default ``kernel`` hash backend the pass runs fused and every value reads
the same densities, so pass ``-- --pipeline.model.hash-backend torch`` to compare rounds there.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Dict, Optional, Sequence

import torch
from step_ops import step_arguments, warmed_up_trainer, write_report

from nerfstudio_accel.step_phases import PhaseClock

COUNTS = ("candidates", "evaluated", "kept")


def time_rounds(trainer, first_step: int, steps: int, first_samples: Sequence[int]) -> Dict[int, Dict[str, float]]:
    """Per value of ``first_samples``: mean ms of marching and of the culling pass, and mean counts, per batch."""
    model = trainer.pipeline.model
    sampler = model.own_sampler()
    totals = {
        value: {"marching_ms": 0.0, "culling_ms": 0.0, **{name: 0.0 for name in COUNTS}} for value in first_samples
    }
    model.train()
    for step in range(first_step, first_step + steps):
        ray_bundle, _ = trainer.pipeline.datamanager.next_train(step)
        for value in first_samples:
            sampler.marching.culling_first_samples = value
            clock = PhaseClock(trainer.device)
            torch.manual_seed(step)
            with clock.running(), torch.no_grad():
                model.sample_and_forward(ray_bundle)
            figures = sampler.figures()
            totals[value]["marching_ms"] += 1000 * clock.seconds["marching"]
            totals[value]["culling_ms"] += 1000 * clock.seconds["culling density pass"]
            for name in COUNTS:
                totals[value][name] += figures[name]
    return {value: {name: total / steps for name, total in row.items()} for value, row in totals.items()}


def markdown(results: Dict[int, Dict[str, float]], command: str, device: str) -> str:
    lines = [
        f"accel-ngp on {device}, culling density pass by first round length (`{command}`), means per batch.",
        "",
        "| first samples | candidates | densities read | kept | marching ms | culling pass ms |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for value, row in results.items():
        lines.append(
            f"| {value} | {row['candidates']:.0f} | {row['evaluated']:.0f} ({row['evaluated'] / max(row['candidates'], 1):.0%}) | "
            f"{row['kept']:.0f} | {row['marching_ms']:.1f} | {row['culling_ms']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> None:
    def more_options(parser) -> None:
        parser.add_argument("--first-samples", type=int, nargs="+", default=[0, 16])

    description = __doc__.split("\n\n")[0]
    args, flags, command = step_arguments(argv, "culling_rounds.py", description, 20, "batches timed", more_options)
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = warmed_up_trainer(args, "occupancy", flags, Path(output_dir))
        results = time_rounds(trainer, args.warmup, args.steps, args.first_samples)
        trainer.pipeline.datamanager.close()
    write_report(
        markdown(results, command, args.device), {str(value): row for value, row in results.items()}, command, args
    )


if __name__ == "__main__":
    main()
