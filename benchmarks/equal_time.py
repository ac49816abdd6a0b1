"""Equal wall-clock comparison of nerfstudio methods on a Blender-format scene.

Each method is built from the same config ``ns-train`` uses (plus flags written as ns-train takes
them), trained through nerfstudio's ``Trainer`` (callbacks, optimizers, schedulers) for a fixed
training-time budget, and scored on every test view. Evaluation time is not counted. Each method
runs in its own process, so its peak RSS is its own (taken at the first evaluation, before whole
images are rendered, so it is training's peak up to then); the graph memory is the bytes autograd
saves in one training step after the budget (hard mining builds its graph on b of B samples).

Example (the CPU table in docs/benchmarks.md):

    python benchmarks/equal_time.py --data ../shared/data/lego --downscale 4 --budget-seconds 300 \\
        --method accel-ngp --method "nerfacto --pipeline.model.implementation torch" --out docs/results/cpu_lego_100.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict

import torch

from nerfstudio_accel.bench.budget import train_for_budget
from nerfstudio_accel.bench.memory import saved_tensor_bytes


def _disable_lpips_downloads() -> None:
    """nerfstudio's own models build LPIPS (an AlexNet download) at set-up; offline that raises.
    This benchmark reports PSNR/SSIM only, so give them a stand-in that needs no weights."""
    import torchmetrics.image.lpip as lpip_module

    class NoLPIPS(torch.nn.Module):
        def __init__(self, *args, **kwargs):
            super().__init__()

        def forward(self, *args, **kwargs):
            return torch.tensor(float("nan"))

    lpip_module.LearnedPerceptualImagePatchSimilarity = NoLPIPS  # type: ignore[misc]
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("nerfstudio.models") and hasattr(module, "LearnedPerceptualImagePatchSimilarity"):
            module.LearnedPerceptualImagePatchSimilarity = NoLPIPS  # type: ignore[attr-defined]


def build_config(method_and_flags: str, data: Path, downscale: float, device: str, output_dir: Path):
    """The ns-train config of ``method`` with ``flags`` applied, on ``data`` via blender-data."""
    import tyro
    from nerfstudio.configs.method_configs import all_methods
    from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig

    name, *flags = shlex.split(method_and_flags)
    if name not in all_methods:
        raise SystemExit(f"error: unknown method {name!r}; ns-train --help lists the installed ones")
    config = all_methods[name]
    if flags:
        config = tyro.cli(tyro.conf.FlagConversionOff[type(config)], default=config, args=flags)
    config.machine.device_type = device
    config.vis = "tensorboard"
    config.output_dir = output_dir
    config.pipeline.datamanager.data = None
    config.pipeline.datamanager.dataparser = BlenderDataParserConfig(data=data)
    config.pipeline.datamanager.camera_res_scale_factor = 1.0 / downscale
    config.max_num_iterations = 10**9
    config.set_timestamp()
    return config


def run_method(method_and_flags: str, args: argparse.Namespace, output_dir: Path) -> Dict:
    torch.manual_seed(args.seed)
    config = build_config(method_and_flags, args.data, args.downscale, args.device, output_dir)
    trainer = config.setup(local_rank=0, world_size=1)
    trainer.setup(test_mode="test")

    def report(point: Dict[str, float]) -> None:
        print(f"  {method_and_flags}: {point['seconds']:6.1f} s  step {point['step']:6d}  psnr {point['psnr']:.2f}", flush=True)

    tracked = ("hard_mining_fraction", "hard_mining_tau_hat")
    run = train_for_budget(
        trainer, args.budget_seconds, max_steps=args.max_steps, eval_points=args.eval_points, on_eval=report, tracked=tracked
    )
    final = run.curve[-1]
    trainer.pipeline.train()
    graph_bytes = saved_tensor_bytes(lambda: trainer.pipeline.get_train_loss_dict(run.steps))
    return {
        "method": method_and_flags,
        "steps": run.steps,
        "train_seconds": round(run.train_seconds, 2),
        "ms_per_step": round(run.ms_per_step, 2),
        "samples_per_step": round(run.samples / run.steps) if run.samples else None,
        "rays_per_second": round(run.rays_per_second) if run.rays else None,
        "psnr": round(final["psnr"], 3),
        "ssim": round(final["ssim"], 4),
        "graph_mb": round(graph_bytes / 2**20, 1),
        "train_peak_rss_mb": round(run.train_peak_rss_bytes / 2**20),
        "curve": run.curve,
    }


def common_arguments(args: argparse.Namespace) -> list:
    """The options every per-method child process shares with this one."""
    return [
        "--data", str(args.data), "--budget-seconds", str(args.budget_seconds), "--downscale", str(args.downscale),
        "--device", args.device, "--eval-points", str(args.eval_points), "--seed", str(args.seed),
    ] + (["--max-steps", str(args.max_steps)] if args.max_steps else [])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="Blender-format scene folder")
    parser.add_argument("--method", action="append", required=True, help='method name plus ns-train flags, e.g. "nerfacto --pipeline.model.implementation torch"')
    parser.add_argument("--budget-seconds", type=float, default=300.0, help="training time per method")
    parser.add_argument("--max-steps", type=int, help="also stop at this many steps (equal-steps comparisons)")
    parser.add_argument("--downscale", type=float, default=4.0, help="image downscale factor (4: lego at 100x100)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--eval-points", type=int, default=5, help="evaluations along the budget (PSNR vs time)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", type=Path, help="write results JSON here")
    parser.add_argument("--one-method-to", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.data.is_dir():
        raise SystemExit(f"error: scene folder {args.data} does not exist")
    if args.one_method_to:  # child process: one method, results to a file
        _disable_lpips_downloads()
        with tempfile.TemporaryDirectory() as scratch:
            result = run_method(args.method[0], args, Path(scratch))
        args.one_method_to.write_text(json.dumps(result))
        return 0
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for method in args.method:
            print(f"training {method} for {args.budget_seconds:.0f} s on {args.device}", flush=True)
            result_file = Path(scratch) / "result.json"
            command = [sys.executable, __file__, *common_arguments(args), "--method", method, "--one-method-to", str(result_file)]
            if subprocess.run(command).returncode != 0:
                raise SystemExit(f"error: {method} failed (its output is above)")
            results.append(json.loads(result_file.read_text()))
    header = f"{'method':55s} {'steps':>6s} {'ms/step':>8s} {'samples/step':>12s} {'rays/s':>7s} {'PSNR':>7s} {'SSIM':>6s} {'graph MB':>8s} {'RSS MB':>7s}"
    print(header)
    for r in results:
        print(
            f"{r['method']:55s} {r['steps']:6d} {r['ms_per_step']:8.1f} {str(r['samples_per_step']):>12s} {str(r['rays_per_second']):>7s} {r['psnr']:7.2f} "
            f"{r['ssim']:6.3f} {r['graph_mb']:8.1f} {r['train_peak_rss_mb']:7d}"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        meta = {"data": str(args.data), "downscale": args.downscale, "device": args.device, "budget_seconds": args.budget_seconds,
                "torch": torch.__version__, "threads": torch.get_num_threads(), "command": " ".join(shlex.quote(a) for a in sys.argv)}
        args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
