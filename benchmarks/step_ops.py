"""Operators and host syncs per training step of accel-ngp: what a step costs in launches and waits.

    python benchmarks/step_ops.py [--data data/blender/lego] [--downscale 4] [--samplers occupancy proposal]
        [--device cpu] [--warmup 300] [--steps 16] [--markdown FILE] [--json FILE] [-- ns-train flags...]

Builds accel-ngp as ``ns-train`` does (defaults, plus the flags after ``--``) on ``--data`` in any format
``ns-accel-bench`` reads, trains ``--warmup`` steps
(past the occupancy grid's 256-step warm-up, so the profiled steps cull as training does from then on), then
profiles ``--steps`` steps with ``torch.profiler`` and reports, per step, on the
training thread:

- ``aten ops``: ATen operator calls made by Python code (each is at least one kernel launch on a GPU);
- ``aten ops, nested``: every ATen call, including those operators make internally;
- ``syncs``: calls that make a CUDA host wait for the device: ``_local_scalar_dense`` (``.item()``,
  ``int()``, ``float()``, ``bool()`` of a tensor, and size computations inside ``repeat_interleave`` and
  friends), ``nonzero`` (boolean-mask indexing), ``unique``, ``masked_select``, and host copies
  (``.tolist()``, ``.cpu()``, ``.numpy()``, counted by wrapping those methods); each
  attributed to the innermost ``nerfstudio_accel`` (else nerfstudio) source line that called it.

On CPU these are the calls that *would* sync on CUDA (the CPU never waits). With ``--device cuda`` the step
also runs under ``torch.cuda.set_sync_debug_mode("warn")`` and the syncs CUDA reports (device-to-host
copies included) are counted too, with the CUDA kernels launched per step. Counts, not timings: compare them
before and after a change of flags or code.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import sys
import tempfile
import threading
import traceback
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from nerfstudio_accel.bench.configs import MethodSpec, build_config, resolve_dataparser
from nerfstudio_accel.engine.trainer import training_step

PROFILED_STEPS = "accel::profiled_steps"  # the annotation that names the training thread
SYNC_OPS = {
    "aten::_local_scalar_dense": "scalar read (.item(), int(), float(), bool())",
    "aten::nonzero": "nonzero (boolean-mask indexing)",
    "aten::_unique2": "unique",
    "aten::unique_dim": "unique",
    "aten::unique_consecutive": "unique",
    "aten::masked_select": "masked_select",
}
"""ATen operators that make a CUDA host wait for the device (the output size or value depends on data)."""

CPU_ONLY_SITES = {
    "torch/optim/adam.py": "CPU fused Adam reads its step counts on the host; CUDA's fused kernel reads them on the device",
    "nerfstudio_accel/kernels/marching_numba.py": "the numba marcher is the CPU path; CUDA marches with Triton or nerfacc",
    "nerfstudio_accel/kernels/hash_encoding_numba.py": "the numba hash kernels are the CPU path; CUDA encodes with Triton",
}
"""Sync sites seen on CPU that do not sync on CUDA, with why."""


def build_trainer(data: Path, downscale: float, sampler: str, device: str, flags: Sequence[str], output_dir: Path):
    """accel-ngp with ``sampler`` and ``flags`` on ``data`` (any format ns-accel-bench reads, its parser
    chosen as there), images downscaled by ``downscale``, set up for training."""
    spec = MethodSpec(label="accel-ngp", name="accel-ngp", flags=(*flags, "--pipeline.model.sampler", sampler))
    dataparser = resolve_dataparser(data, "auto")
    config = build_config(spec, data, dataparser, downscale, device, seed=42, output_dir=output_dir, resolve=True)
    trainer = config.setup(local_rank=0, world_size=1)
    trainer.setup(test_mode="test")
    return trainer


def caller_line(stack: Sequence[str]) -> str:
    """The innermost frame of this package in a profiler stack (innermost first), with the innermost frame
    outside it when that is elsewhere (nerfstudio, torch)."""
    frames = [frame for frame in stack if "(" in frame and not frame.startswith("<built-in")]
    ours = next((frame for frame in frames if "nerfstudio_accel/" in frame), "?")
    ours = ours[ours.find("nerfstudio_accel/") :]
    inner = frames[0] if frames else "?"
    for root in ("site-packages/", "nerfstudio_accel/"):
        inner = inner[inner.find(root) + len(root) :] if root in inner else inner
    return ours if inner in ours else f"{ours} via {inner}"


HOST_READS = ("tolist", "cpu", "numpy")
"""Tensor methods that copy to the host (a sync on CUDA) without an ATen operator a CPU profile would show."""


@contextlib.contextmanager
def counting_host_reads(counts: collections.Counter):
    """Count calls of :data:`HOST_READS` on non-empty tensors made by this thread (not the input pipeline's)
    by caller site (``(where, kind)`` keys)."""
    originals = {name: getattr(torch.Tensor, name) for name in HOST_READS}
    training_thread = threading.get_ident()

    def counted(name):
        def method(tensor, *args, **kwargs):
            if tensor.numel() > 0 and threading.get_ident() == training_thread:
                stack = [
                    f"{frame.filename}({frame.lineno}): {frame.name}" for frame in traceback.extract_stack()[-2::-1]
                ]
                counts[(caller_line(stack), f"host copy (.{name}())")] += 1
            return originals[name](tensor, *args, **kwargs)

        return method

    for name in HOST_READS:
        setattr(torch.Tensor, name, counted(name))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def profile_steps(trainer, first_step: int, steps: int, device: str) -> Dict[str, object]:
    """Per-step operator, sync and (CUDA) kernel counts over ``steps`` training steps."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    cuda_syncs: List[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("warn")
        host_reads: collections.Counter = collections.Counter()
        with profile(activities=activities, with_stack=True) as prof, counting_host_reads(host_reads):
            with record_function(PROFILED_STEPS):
                for step in range(first_step, first_step + steps):
                    training_step(trainer, step)
            if device == "cuda":
                torch.cuda.set_sync_debug_mode("default")
                torch.cuda.synchronize()
        cuda_syncs = [str(w.message) for w in caught if "synchroniz" in str(w.message)]
    everything = prof.events()
    training_thread = next(event.thread for event in everything if event.name == PROFILED_STEPS)
    # on CUDA autograd runs the backward pass on a thread of its own, whose work names the forward thread
    backward_threads = {
        event.thread
        for event in everything
        if event.name.startswith("autograd::engine::evaluate_function") and event.fwd_thread == training_thread
    }
    events = [event for event in everything if event.thread in {training_thread, *backward_threads}]

    def ancestors(event):
        parent = event.cpu_parent
        while parent is not None:
            yield parent
            parent = parent.cpu_parent

    aten = [event for event in events if event.name.startswith("aten::")]
    top_level = [event for event in aten if not any(p.name.startswith("aten::") for p in ancestors(event))]
    syncs = collections.Counter()
    kinds = collections.Counter()
    for event in aten:
        if event.name in SYNC_OPS and not (
            event.name == "aten::_local_scalar_dense" and event.cpu_parent is not None
            and event.cpu_parent.name in SYNC_OPS
        ):  # fmt: skip
            kinds[SYNC_OPS[event.name]] += 1
            syncs[(caller_line([parent.name for parent in ancestors(event)]), SYNC_OPS[event.name])] += 1
    for (site, kind), count in host_reads.items():
        kinds[kind] += count
        syncs[(site, kind)] += count
    kernel_times: Dict[str, float] = collections.Counter()
    kernel_launches = 0
    for event in everything:
        # record_function ranges (ours, the optimizer's) are mirrored on the GPU timeline: not kernels
        if event.device_type == torch.autograd.DeviceType.CUDA and not event.is_user_annotation:
            kernel_times[event.name] += event.time_range.elapsed_us() / 1000.0 / steps
            kernel_launches += 1
    cuda_side = [
        {"where": site, "kind": kind, "per_step": count / steps}
        for (site, kind), count in syncs.items()
        if not any(cpu_site in site for cpu_site in CPU_ONLY_SITES)
    ]
    return {
        "aten_ops": len(top_level) / steps,
        "aten_ops_nested": len(aten) / steps,
        "syncs": sum(kinds.values()) / steps,
        "sync_kinds": {kind: count / steps for kind, count in kinds.most_common()},
        "sync_sites": [
            {"where": site, "kind": kind, "per_step": count / steps} for (site, kind), count in syncs.most_common()
        ],
        "syncs_on_cuda": sum(site["per_step"] for site in cuda_side),
        "cuda_kernels": kernel_launches / steps if device == "cuda" else None,
        "top_kernels_ms": dict(sorted(kernel_times.items(), key=lambda item: -item[1])[:10]),
        "cuda_reported_syncs": len(cuda_syncs) / steps if device == "cuda" else None,
    }


def markdown(results: Dict[str, Dict[str, object]], command: str, device: str) -> str:
    lines = [
        f"Per training step of accel-ngp on {device} (`{command}`).",
        "",
        "| sampler | aten ops | aten ops, nested | syncs | syncs that CUDA would see | CUDA kernels | syncs CUDA reported |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for sampler, result in results.items():
        cuda = [result["cuda_kernels"], result["cuda_reported_syncs"]]
        cells = ["-" if value is None else f"{value:.1f}" for value in cuda]
        lines.append(
            f"| {sampler} | {result['aten_ops']:.1f} | {result['aten_ops_nested']:.1f} | {result['syncs']:.1f} | "
            f"{result['syncs_on_cuda']:.1f} | " + " | ".join(cells) + " |"
        )
    for sampler, result in results.items():
        lines += ["", f"Syncs per step, {sampler} sampler:", "", "| where | kind | per step |", "|---|---|---:|"]
        lines += [f"| `{site['where']}` | {site['kind']} | {site['per_step']:g} |" for site in result["sync_sites"]]
        if result["top_kernels_ms"]:
            lines += ["", f"Top CUDA kernels, {sampler} sampler:", "", "| kernel | ms per step |", "|---|---:|"]
            lines += [f"| `{name[:90]}` | {ms:.3f} |" for name, ms in result["top_kernels_ms"].items()]
    lines += ["", "Not syncs on CUDA: " + "; ".join(f"`{site}`: {why}" for site, why in CPU_ONLY_SITES.items()) + "."]
    return "\n".join(lines) + "\n"


DEFAULT_DATA = "data/blender/lego"
"""Where ``ns-download-data blender`` puts the lego scene, run from the repository root."""


def check_scene_folder(data: Path) -> None:
    """Exit with one line when ``data`` is not a folder (the scene is not downloaded, or the path is wrong)."""
    if not Path(data).is_dir():
        hint = "download it with `ns-download-data blender`" if Path(data) == Path(DEFAULT_DATA) else "check the path"
        raise SystemExit(f"error: scene folder {data} does not exist; {hint}, or pass --data <scene folder>")


def step_arguments(
    argv: Optional[Sequence[str]],
    script: str,
    description: str,
    steps: int,
    steps_help: str,
    more_options: Optional[Callable[[argparse.ArgumentParser], None]] = None,
    samplers: Sequence[str] = ("occupancy", "proposal"),
) -> Tuple[argparse.Namespace, List[str], str]:
    """The options of a per-step benchmark (``script``; ``more_options`` adds its own; ``samplers``: the default of
    ``--samplers``), the ns-train flags after ``--``, and the command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    flags = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", type=Path, default=Path(DEFAULT_DATA), help=f"scene folder (default {DEFAULT_DATA})")
    parser.add_argument(
        "--downscale", type=float, default=4.0, help="image downscale factor (4: the 800x800 lego at 200x200)"
    )
    parser.add_argument("--samplers", nargs="+", default=list(samplers))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--warmup", type=int, default=300, help="steps trained before measuring")
    parser.add_argument("--steps", type=int, default=steps, help=steps_help)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--json", type=Path)
    if more_options is not None:
        more_options(parser)
    args = parser.parse_args(own)
    check_scene_folder(args.data)
    return args, flags, f"python benchmarks/{script} " + " ".join(argv)


def warmed_up_trainer(args: argparse.Namespace, sampler: str, flags: Sequence[str], output_dir: Path):
    """:func:`build_trainer` from the parsed options, trained ``args.warmup`` steps."""
    trainer = build_trainer(args.data, args.downscale, sampler, args.device, flags, output_dir)
    for step in range(args.warmup):
        training_step(trainer, step)
    return trainer


def write_report(report: str, results: Dict[str, object], command: str, args: argparse.Namespace) -> None:
    """Print the markdown ``report``, and write it and the results to ``--markdown`` / ``--json`` if given."""
    print(report)
    if args.markdown:
        args.markdown.write_text(report)
    if args.json:
        args.json.write_text(json.dumps({"command": command, "device": args.device, "results": results}, indent=1))


def main(argv: Optional[Sequence[str]] = None) -> None:
    description = __doc__.split("\n\n")[0]
    args, flags, command = step_arguments(argv, "step_ops.py", description, 16, "steps profiled (one grid update)")
    results = {}
    with tempfile.TemporaryDirectory() as output_dir:
        for sampler in args.samplers:
            trainer = warmed_up_trainer(args, sampler, flags, Path(output_dir))
            results[sampler] = profile_steps(trainer, args.warmup, args.steps, args.device)
            trainer.pipeline.datamanager.close()
    write_report(markdown(results, command, args.device), results, command, args)


if __name__ == "__main__":
    main()
