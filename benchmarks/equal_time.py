"""Equal wall-clock comparison of nerfstudio methods on a Blender-format scene.

Each method is built from the same config ``ns-train`` uses (plus flags written as ns-train takes
them), trained through nerfstudio's ``Trainer`` (callbacks, optimizers, schedulers) for a fixed
training-time budget, and scored on every test view. Evaluation time is not counted.

Example (the CPU table in docs/benchmarks.md):

    python benchmarks/equal_time.py --data ../shared/data/lego --downscale 4 --budget-seconds 300 \\
        --method accel-ngp --method "nerfacto --pipeline.model.implementation torch" --out docs/results/cpu_lego_100.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Dict

import torch

from nerfstudio_accel.bench.budget import train_for_budget


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

    run = train_for_budget(trainer, args.budget_seconds, eval_points=args.eval_points, on_eval=report)
    final = run.curve[-1]
    return {
        "method": method_and_flags,
        "steps": run.steps,
        "train_seconds": round(run.train_seconds, 2),
        "ms_per_step": round(run.ms_per_step, 2),
        "samples_per_step": round(run.samples / run.steps) if run.samples else None,
        "psnr": round(final["psnr"], 3),
        "ssim": round(final["ssim"], 4),
        "curve": run.curve,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="Blender-format scene folder")
    parser.add_argument("--method", action="append", required=True, help='method name plus ns-train flags, e.g. "nerfacto --pipeline.model.implementation torch"')
    parser.add_argument("--budget-seconds", type=float, default=300.0, help="training time per method")
    parser.add_argument("--downscale", type=float, default=4.0, help="image downscale factor (4: lego at 100x100)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--eval-points", type=int, default=5, help="evaluations along the budget (PSNR vs time)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", type=Path, help="write results JSON here")
    args = parser.parse_args()
    if not args.data.is_dir():
        raise SystemExit(f"error: scene folder {args.data} does not exist")
    _disable_lpips_downloads()
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for method in args.method:
            print(f"training {method} for {args.budget_seconds:.0f} s on {args.device}", flush=True)
            results.append(run_method(method, args, Path(scratch)))
    header = f"{'method':55s} {'steps':>6s} {'ms/step':>8s} {'samples/step':>12s} {'PSNR':>7s} {'SSIM':>6s}"
    print(header)
    for r in results:
        print(f"{r['method']:55s} {r['steps']:6d} {r['ms_per_step']:8.1f} {str(r['samples_per_step']):>12s} {r['psnr']:7.2f} {r['ssim']:6.3f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        meta = {"data": str(args.data), "downscale": args.downscale, "device": args.device, "budget_seconds": args.budget_seconds,
                "torch": torch.__version__, "threads": torch.get_num_threads(), "command": " ".join(shlex.quote(a) for a in sys.argv)}
        args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
