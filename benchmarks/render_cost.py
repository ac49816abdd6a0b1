"""Seconds per evaluation view and samples per ray of accel-ngp on a scene, fresh and after training.

    python benchmarks/render_cost.py --data path/to/capture [--downscale 4] [--samplers occupancy proposal]
        [--train-steps 0 300] [--views 3] [--device cpu] [--markdown FILE]

For each sampler, builds accel-ngp as ``ns-train`` does on nerfstudio-data, then at each of
``--train-steps`` (cumulative; 0 = the untrained, foggy field, before any occupancy-grid warm-up) renders
``--views`` test views the way ``ns-eval`` does (``get_outputs_for_camera``, no grad) and reports the
median seconds per view and the mean samples per ray. Rendering time is what bounds ``ns-eval`` and the
viewer; a fresh field is the worst case for the occupancy grid (nothing culled yet).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import torch
from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig
from step_ops import check_scene_folder

from nerfstudio_accel.engine.build import build_trainer_config
from nerfstudio_accel.engine.trainer import training_step
from nerfstudio_accel.methods import accel_ngp


def build_trainer(data: Path, downscale: float, sampler: str, device: str, output_dir: Path):
    def configure(config) -> None:
        config.pipeline.datamanager.camera_res_scale_factor = 1.0 / downscale
        config.pipeline.model.sampler = sampler
        config.set_timestamp()

    config = build_trainer_config(
        accel_ngp.config,
        data,
        device,
        NerfstudioDataParserConfig(),
        output_dir=output_dir,
        eval_split="test",
        configure=configure,
    )
    trainer = config.setup(local_rank=0, world_size=1)
    trainer.setup(test_mode="test")
    return trainer


def train(trainer, start: int, stop: int) -> None:
    """Training steps ``[start, stop)`` with nerfstudio's callbacks (grid updates, annealing)."""
    for step in range(start, stop):
        training_step(trainer, step)


def render_cost(trainer, views: int) -> Dict[str, float]:
    """Median seconds per view and mean samples per ray over the first ``views`` test views."""
    pipeline = trainer.pipeline
    pipeline.eval()
    dataset = pipeline.datamanager.eval_dataset
    seconds: List[float] = []
    samples: List[float] = []
    for index in range(min(views, len(dataset))):
        camera = dataset.cameras[index : index + 1].to(pipeline.device)
        start = time.perf_counter()
        with torch.no_grad():
            outputs = pipeline.model.get_outputs_for_camera(camera)
        seconds.append(time.perf_counter() - start)
        samples.append(float(outputs["num_samples_per_ray"].float().mean()))
    pipeline.train()
    height, width = int(dataset.cameras.height[0]), int(dataset.cameras.width[0])
    return {
        "seconds_per_view": statistics.median(seconds),
        "samples_per_ray": statistics.fmean(samples),
        "size": f"{width}x{height}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="nerfstudio-data scene folder")
    parser.add_argument("--downscale", type=float, default=4.0)
    parser.add_argument("--samplers", nargs="+", default=["occupancy", "proposal"], choices=["occupancy", "proposal"])
    parser.add_argument(
        "--train-steps", nargs="+", type=int, default=[0, 300], help="cumulative step counts to measure at"
    )
    parser.add_argument("--views", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    args = parser.parse_args()
    check_scene_folder(args.data)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for sampler in args.samplers:
            torch.manual_seed(0)
            trainer = build_trainer(args.data, args.downscale, sampler, args.device, Path(scratch))
            done = 0
            for steps in sorted(args.train_steps):
                train(trainer, done, steps)
                done = steps
                cost = render_cost(trainer, args.views)
                rows.append(
                    f"| {sampler} | {steps} | {cost['size']} | {cost['samples_per_ray']:.1f} | {cost['seconds_per_view']:.2f} |"
                )
                print(rows[-1], flush=True)
    table = "\n".join(["| sampler | trained steps | view | samples/ray | s/view |", "|---|---:|---|---:|---:|", *rows])
    print(table)
    if args.markdown:
        args.markdown.write_text(table + "\n")


if __name__ == "__main__":
    main()
