"""Peak memory of accel-ngp's culling pass and of a whole training step at large ray batches.

    python benchmarks/step_peak_memory.py [--data data/blender/lego] [--downscale 4] [--device cpu]
        [--samplers occupancy] [--rays 65536 262144] [--warmup 300] [--markdown FILE] [--json FILE]
        [-- ns-train flags...]

Builds accel-ngp as ``ns-train`` does (defaults plus the flags after ``--``; batches drawn without prefetching),
trains ``--warmup`` steps at the default batch (past the occupancy grid's warm-up, so the culling pass culls by
opacity as training does from then on), then, at each ``--rays`` batch: the peak memory of the sampling and
scoring forward (``sample_and_forward``: marching, the culling density pass and its record, the colour MLP on
the survivors; hard mining's no-grad pass) on one batch, and of one training step on the next, each above the
memory held before it, with that step's marched candidates and kept samples (the sampler's figures). On CUDA
``torch.cuda.max_memory_allocated``; elsewhere the process's peak resident memory (Linux: ``VmHWM``, reset
through ``/proc/self/clear_refs``), with glibc told to map every block of 64 KiB or more on its own, so a freed
tensor leaves the resident set at once instead of a hole in the heap (which would count freed chunks as held).
Memory, not time (the mappings slow it down): never a test assert.
"""

from __future__ import annotations

import ctypes
import re
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence

import torch
from step_ops import step_arguments, warmed_up_trainer, write_report

from nerfstudio_accel.engine.trainer import training_step


def _status_kib(key: str) -> int:
    return int(re.search(rf"^{key}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1))


def peak_mib(fn: Callable[[], object], device: str) -> float:
    """MiB ``fn`` needs above what is held before it (see the module docstring)."""
    if device == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - before) / 2**20
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = _status_kib("VmRSS")
    fn()
    return (_status_kib("VmHWM") - before) / 1024


def culling_pass_peak_mib(trainer, step: int, device: str) -> float:
    """Peak MiB of ``sample_and_forward`` (no grad, training mode) on the next batch."""
    trainer.pipeline.train()
    ray_bundle, _ = trainer.pipeline.datamanager.next_train(step)
    with torch.no_grad():
        return peak_mib(lambda: trainer.pipeline.model.sample_and_forward(ray_bundle), device)


def markdown(results: Dict[str, Dict[str, float]], command: str, device: str) -> str:
    lines = [
        f"accel-ngp on {device}, peak memory above what each part starts with (`{command}`).",
        "",
        "| sampler | rays | candidates | kept | culling pass peak MiB | step peak MiB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, row in results.items():
        sampler, rays = name.split(", ")
        lines.append(
            f"| {sampler} | {rays} | {row['candidates']:.0f} | {row['kept']:.0f} | {row['culling_pass_mib']:.0f} "
            f"| {row['step_mib']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> None:
    def more_options(parser) -> None:
        parser.add_argument("--rays", type=int, nargs="+", default=[1 << 16, 1 << 18])

    description = __doc__.split("\n\n")[0]
    args, flags, command = step_arguments(argv, "step_peak_memory.py", description, 1, "unused", more_options)
    if args.samplers == ["occupancy", "proposal"]:  # step_arguments' default: the culling pass is the occupancy one's
        args.samplers = ["occupancy"]
    if args.device != "cuda":  # glibc's M_MMAP_THRESHOLD (-3): blocks from 64 KiB on are mapped and unmapped alone
        ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 16)
    results = {}
    with tempfile.TemporaryDirectory() as output_dir:
        for sampler in args.samplers:
            no_prefetch = [*flags, "--pipeline.datamanager.prefetch-batches", "0"]
            trainer = warmed_up_trainer(args, sampler, no_prefetch, Path(output_dir))
            step = args.warmup
            for rays in args.rays:
                pixels = trainer.pipeline.datamanager.train_pixel_sampler
                pixels.set_num_rays_per_batch(rays)
                culling = culling_pass_peak_mib(trainer, step, args.device)
                pixels.set_num_rays_per_batch(rays)
                whole = peak_mib(lambda: training_step(trainer, step + 1), args.device)
                figures = trainer.pipeline.model.sampler.figures()
                results[f"{sampler}, {rays}"] = {"culling_pass_mib": culling, "step_mib": whole, **figures}
                step += 2
                print(f"{sampler}, {rays} rays: {results[f'{sampler}, {rays}']}", file=sys.stderr)
            trainer.pipeline.datamanager.close()
    write_report(markdown(results, command, args.device), results, command, args)


if __name__ == "__main__":
    main()
