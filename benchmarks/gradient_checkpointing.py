"""Graph memory and time per step of accel-ngp with and without gradient checkpointing, mining on and off.

    python benchmarks/gradient_checkpointing.py [--data data/blender/lego] [--downscale 4] [--device cpu]
        [--samplers occupancy proposal] [--samples 65536 262144] [--warmup 40] [--steps 6] [--markdown FILE]
        [--json FILE] [-- ns-train flags...]

For each sampler and each ``--samples`` (the pipeline's ``target_num_samples``; the ray batch may grow to
reach it), builds accel-ngp as ``ns-train`` does (defaults plus the flags after ``--``), trains
``--warmup`` steps, then, on the same model, for mining on and off and checkpointing off and on: the bytes
one batch's graph saves for backward (the same batch for both checkpointing settings; ``saved_tensor_bytes``:
checkpointing saves the field's inputs, not its activations) and the wall time of ``--steps`` steps. Timings, so never a test assert.
"""

from __future__ import annotations

import copy
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Optional, Sequence

import torch
from step_ops import build_trainer, step_arguments, write_report

from nerfstudio_accel.bench.memory import batch_graph_bytes
from nerfstudio_accel.engine.trainer import training_step


def graph_mib(trainer, step: int) -> Dict[bool, float]:
    """Graph MiB of one batch's loss with checkpointing off and on: the same rays, jitter and hard-sample draw."""
    pipeline = trainer.pipeline
    ray_bundle, batch = pipeline.datamanager.next_train(step)
    batch_sizer = copy.deepcopy(getattr(pipeline, "batch_sizer", None))
    graph = {}
    for checkpointing in (False, True):
        pipeline.model.config.gradient_checkpointing = checkpointing
        if batch_sizer is not None:  # tau_hat moves with each mined batch
            pipeline.batch_sizer = copy.deepcopy(batch_sizer)
        torch.manual_seed(step)
        graph[checkpointing] = batch_graph_bytes(trainer, copy.deepcopy(ray_bundle), batch) / 2**20
    return graph


def time_steps(trainer, first_step: int, steps: int) -> Dict[str, float]:
    """ms per step and samples per step over ``steps`` training steps."""
    samples = []
    synchronize = torch.cuda.synchronize if str(trainer.device).startswith("cuda") else lambda: None
    synchronize()
    start = time.perf_counter()
    for step in range(first_step, first_step + steps):
        _, _, metrics = training_step(trainer, step)
        samples.append(float(metrics["num_samples_per_batch"]))
    synchronize()
    return {
        "ms_per_step": 1000 * (time.perf_counter() - start) / steps,
        "samples_per_step": sum(samples) / len(samples),
    }


def markdown(results: Dict[str, Dict[str, float]], command: str, device: str) -> str:
    lines = [
        f"accel-ngp on {device}, gradient checkpointing off and on (`{command}`).",
        "",
        "| sampler | target samples | mining | checkpointing | samples/step | graph MiB | ms/step |",
        "|---|---:|---|---|---:|---:|---:|",
    ]
    for name, row in results.items():
        sampler, target, mining, checkpointing = name.split(", ")
        lines.append(
            f"| {sampler} | {target} | {mining} | {checkpointing} | {row['samples_per_step']:.0f} | {row['graph_mib']:.1f} | "
            f"{row['ms_per_step']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> None:
    def more_options(parser) -> None:
        parser.add_argument("--samples", type=int, nargs="+", default=[1 << 16, 1 << 18])

    description = __doc__.split("\n\n")[0]
    args, flags, command = step_arguments(
        argv, "gradient_checkpointing.py", description, 6, "steps timed", more_options
    )
    results = {}
    with tempfile.TemporaryDirectory() as output_dir:
        for sampler, target in [(sampler, target) for sampler in args.samplers for target in args.samples]:
            size = [f"--pipeline.target-num-samples={target}", f"--pipeline.max-num-rays-per-batch={target}"]
            trainer = build_trainer(
                args.data, args.downscale, "occupancy", args.device, [*flags, *size], Path(output_dir)
            )
            for step in range(args.warmup):
                training_step(trainer, step)
            step = args.warmup
            for mining in (True, False):
                trainer.pipeline.config.hard_mining = mining
                graph = graph_mib(trainer, step)
                step += 1
                for checkpointing in (False, True):
                    trainer.pipeline.model.config.gradient_checkpointing = checkpointing
                    name = f"{sampler}, {target}, {'on' if mining else 'off'}, {'on' if checkpointing else 'off'}"
                    results[name] = {"graph_mib": graph[checkpointing], **time_steps(trainer, step, args.steps)}
                    step += args.steps
                    print(f"{name}: {results[name]}", file=sys.stderr)
            trainer.pipeline.datamanager.close()
    write_report(markdown(results, command, args.device), results, command, args)


if __name__ == "__main__":
    main()
