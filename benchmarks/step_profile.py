"""Where a training step of accel-ngp spends its time, phase by phase, with hard mining on and off.

    python benchmarks/step_profile.py [--data data/blender/lego] [--downscale 4] [--samplers occupancy proposal]
        [--device cpu] [--warmup 300] [--steps 48] [--markdown FILE] [--json FILE] [-- ns-train flags...]

For each sampler and each mining setting, builds accel-ngp as ``ns-train`` does (defaults, plus the flags
after ``--``) on ``--data`` in any format ``ns-accel-bench`` reads, trains ``--warmup`` steps (past the
occupancy grid's 256-step warm-up), then times ``--steps`` steps under a
:class:`~nerfstudio_accel.step_phases.PhaseClock`: every interval of a step is charged to the innermost phase
the code marked (``ray batch``, ``grid update``, ``marching``, ``proposal rounds``, ``culling density pass``,
``scoring forward``, ``render and output gradients``, ``importance and selection``, ``graph forward``,
``render and loss``, ``backward``, ``optimizer``; the rest is ``other``), so the phases add up to the step (at the
CPU defaults, marching runs inside the fused culling density pass and has no phase of its own). On
CUDA the clock waits for the device at each boundary, which serialises the step: compare shares, and take
ms/step from ``ns-accel-bench``. Timings, so never a test assert.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from step_ops import step_arguments, warmed_up_trainer, write_report

from nerfstudio_accel.engine.trainer import training_step
from nerfstudio_accel.step_phases import PhaseClock

PHASE_ORDER = (
    "ray batch",
    "grid update",
    "marching",
    "proposal rounds",
    "culling density pass",
    "scoring forward",
    "render and output gradients",
    "importance and selection",
    "graph forward",
    "render and loss",
    "backward",
    "optimizer",
    "other",
)


def profile(trainer, first_step: int, steps: int, device: str) -> Dict[str, object]:
    """Milliseconds per step of each phase over ``steps`` steps, and the mean hard fraction b/B."""
    clock = PhaseClock(device)
    fractions: List[float] = []
    with clock.running():
        for step in range(first_step, first_step + steps):
            _, _, metrics = training_step(trainer, step)
            if "hard_mining_fraction" in metrics:
                fractions.append(float(metrics["hard_mining_fraction"]))
    phases = {name: 1000.0 * seconds / steps for name, seconds in clock.seconds.items()}
    return {
        "ms_per_step": sum(phases.values()),
        "phases_ms": {name: phases[name] for name in PHASE_ORDER if name in phases},
        "hard_fraction": sum(fractions) / len(fractions) if fractions else None,
    }


def markdown(results: Dict[str, Dict[str, object]], command: str, device: str) -> str:
    """One table: a column per run, a row per phase (ms per step), the step's total and b/B."""
    runs = list(results)
    lines = [
        f"Milliseconds per training step of accel-ngp on {device}, by phase (`{command}`).",
        "",
        "| phase | " + " | ".join(runs) + " |",
        "|---|" + "---:|" * len(runs),
    ]
    for name in PHASE_ORDER:
        cells = [results[run]["phases_ms"].get(name) for run in runs]
        if any(cell is not None for cell in cells):
            lines.append(f"| {name} | " + " | ".join("" if c is None else f"{c:.1f}" for c in cells) + " |")
    lines.append("| **step** | " + " | ".join(f"**{results[run]['ms_per_step']:.1f}**" for run in runs) + " |")
    fractions = [results[run]["hard_fraction"] for run in runs]
    lines.append("| b/B | " + " | ".join("-" if f is None else f"{f:.2f}" for f in fractions) + " |")
    ratios = []
    for sampler in dict.fromkeys(run.split(",")[0] for run in runs):
        mined, ordinary = results.get(f"{sampler}, mining"), results.get(f"{sampler}, no mining")
        if mined and ordinary:
            ratios.append(f"{sampler}: {mined['ms_per_step'] / ordinary['ms_per_step']:.2f}x")
    if ratios:
        lines += ["", "Mined step / ordinary step: " + ", ".join(ratios) + "."]
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> None:
    description = __doc__.split("\n\n")[0]
    args, flags, command = step_arguments(argv, "step_profile.py", description, 48, "steps timed (three grid updates)")
    results = {}
    with tempfile.TemporaryDirectory() as output_dir:
        for sampler in args.samplers:
            for mining in (True, False):
                trainer = warmed_up_trainer(
                    args, sampler, [*flags, f"--pipeline.hard-mining={mining}"], Path(output_dir)
                )
                name = f"{sampler}, {'mining' if mining else 'no mining'}"
                results[name] = profile(trainer, args.warmup, args.steps, args.device)
                trainer.pipeline.datamanager.close()
                print(f"{name}: {results[name]['ms_per_step']:.1f} ms/step", file=sys.stderr)
    write_report(markdown(results, command, args.device), results, command, args)


if __name__ == "__main__":
    main()
