"""Time to generate one training batch's rays: nerfstudio's ray generator against accel-ngp's pinhole one.

    python benchmarks/ray_generation.py --data data/blender/lego [--downscale 1] [--rays 3200] [--rounds 20]
        [--calls 10]

Builds accel-ngp on ``--data`` (any format ``ns-accel-bench`` reads) as ``ns-train`` does, draws ``--rays`` pixels
of its training images with the datamanager's pixel sampler, then in ``--rounds`` alternating rounds times
``--calls`` calls of nerfstudio's :class:`~nerfstudio.model_components.ray_generators.RayGenerator` and of
:class:`~nerfstudio_accel.data.pinhole_rays.PinholeRayGenerator` on the same pixels (the datamanager's cameras).
Prints ms per call (median and range of the rounds), whether the cameras take the pinhole path, and whether the
two give the same rays bit for bit. Timings, so never a test assert.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from nerfstudio.model_components.ray_generators import RayGenerator
from step_ops import build_trainer, check_scene_folder

from nerfstudio_accel.data.pinhole_rays import PinholeRayGenerator


def ms_per_call(generate, indices: torch.Tensor, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        generate(indices)
    return (time.perf_counter() - started) / calls * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--downscale", type=float, default=1.0)
    parser.add_argument("--rays", type=int, default=3200)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args()
    check_scene_folder(args.data)
    with tempfile.TemporaryDirectory() as output_dir:
        datamanager = build_trainer(
            args.data, args.downscale, "occupancy", "cpu", [], Path(output_dir)
        ).pipeline.datamanager
        cameras = datamanager.train_ray_generator.cameras
        datamanager.train_pixel_sampler.set_num_rays_per_batch(args.rays)
        indices = datamanager.train_pixel_sampler.sample(next(datamanager.iter_train_image_dataloader))["indices"]
        datamanager.close()
    theirs, ours = RayGenerator(cameras), PinholeRayGenerator(cameras)
    reference, fast = theirs(indices), ours(indices)
    same = all(
        torch.equal(getattr(reference, name), getattr(fast, name))
        for name in ("origins", "directions", "pixel_area", "camera_indices")
    ) and torch.equal(reference.metadata["directions_norm"], fast.metadata["directions_norm"])
    times = {"nerfstudio RayGenerator": [], "PinholeRayGenerator": []}
    for _ in range(args.rounds):
        times["nerfstudio RayGenerator"].append(ms_per_call(theirs, indices, args.calls))
        times["PinholeRayGenerator"].append(ms_per_call(ours, indices, args.calls))
    print(f"{args.data} at downscale {args.downscale:g}, {indices.shape[0]} rays, {torch.get_num_threads()} threads")
    print(f"pinhole path taken: {ours.pinholes}; same rays bit for bit: {same}")
    for name, values in times.items():
        print(
            f"{name}: {statistics.median(values):.3f} ms per call (median of {args.rounds} rounds of {args.calls}; "
            f"{min(values):.3f}-{max(values):.3f})"
        )


if __name__ == "__main__":
    main()
