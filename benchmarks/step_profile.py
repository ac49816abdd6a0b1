"""Where a training step of accel-ngp spends its time, phase by phase, with hard mining on and off.

    python benchmarks/step_profile.py [--data ../shared/data/lego] [--downscale 4] [--samplers occupancy proposal]
        [--device cpu] [--warmup 300] [--steps 48] [--markdown FILE] [--json FILE] [-- ns-train flags...]

For each sampler and each mining setting, builds accel-ngp as ``ns-train`` does (defaults, plus the flags
after ``--``), trains ``--warmup`` steps (past the occupancy grid's 256-step warm-up), then times ``--steps``
steps under a :class:`~nerfstudio_accel.step_phases.PhaseClock`: every interval of a step is charged to the
innermost phase the code marked (``ray batch``, ``grid update``, ``marching``, ``proposal rounds``,
``culling density pass``, ``scoring forward``, ``render and output gradients``, ``importance and
selection``, ``graph forward``, ``render and loss``, ``backward``, ``optimizer``; the rest is ``other``), so
the phases add up to the step. On CUDA the clock waits for the device at each boundary, which serialises the
step: compare shares, and take ms/step from ``ns-accel-bench``. Timings, so never a test assert.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from step_ops import build_trainer

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
    argv = list(sys.argv[1:] if argv is None else argv)
    flags = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/lego"))
    parser.add_argument("--downscale", type=float, default=4.0, help="image downscale (4: lego at 100x100)")
    parser.add_argument("--samplers", nargs="+", default=["occupancy", "proposal"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--warmup", type=int, default=300, help="steps trained before timing")
    parser.add_argument("--steps", type=int, default=48, help="steps timed (48: three grid-update periods)")
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(own)
    command = "python benchmarks/step_profile.py " + " ".join(argv)
    results = {}
    with tempfile.TemporaryDirectory() as output_dir:
        for sampler in args.samplers:
            for mining in (True, False):
                run_flags = [*flags, f"--pipeline.hard-mining={mining}"]
                trainer = build_trainer(args.data, args.downscale, sampler, args.device, run_flags, Path(output_dir))
                for step in range(args.warmup):
                    training_step(trainer, step)
                name = f"{sampler}, {'mining' if mining else 'no mining'}"
                results[name] = profile(trainer, args.warmup, args.steps, args.device)
                trainer.pipeline.datamanager.close()
                print(f"{name}: {results[name]['ms_per_step']:.1f} ms/step", file=sys.stderr)
    report = markdown(results, command, args.device)
    print(report)
    if args.markdown:
        args.markdown.write_text(report)
    if args.json:
        args.json.write_text(json.dumps({"command": command, "device": args.device, "results": results}, indent=1))


if __name__ == "__main__":
    main()
