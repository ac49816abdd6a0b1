"""A model of data-parallel accel-ngp and of spatial segmentation (one block per rank): per-step time and speedup
at 1, 2, 4, 8 ranks.

    python benchmarks/scaling_model.py --step-ms 55 --ranks 1 2 4 8 [--device-defaults cuda] \
        [--rays-per-step 40700 --fixed-ms 2]

Each rank trains its own ray batch (``target_num_samples`` samples), so a step's compute does not shrink
with more ranks; what is added per step is communication (see :mod:`nerfstudio_accel.distributed`):

- the gradient all-reduce: every trainable parameter as float32, plus one flag per parameter tensor
  (dense: the hash table's untouched entries travel as zeros);
- every ``--pipeline.model.occupancy.update-every`` steps, the occupancy update's all-gather (float32 per evaluated cell: all
  cells during warm-up, after it a quarter plus the occupied ones; here a half is assumed) and, saved,
  the grid evaluation shared by the ranks (``--grid-eval-ms`` per update on one rank);
- two small all-reduces (the tau-hat moments, latency only).

Spatial segmentation (``--pipeline.spatial-blocks N`` on ``N`` ranks) trains the same ``--rays-per-step`` rays on
every rank, each rank the samples of its own block: a step costs ``--fixed-ms`` (what no block divides: drawing
rays, compositing, the loss, Python) plus ``1/N`` of the rest, assuming blocks with equal shares of the samples
(the k-d split gives equal volumes, not equal samples), plus three all-gathers per step of 8, 8 and 28 bytes per
ray per rank (the culling pass's summaries, its optical depth in float64, each block's render) and a one-float
all-reduce (the non-finite flag; shared gradients, none for object scenes, are left out); no gradient of a
block travels, and each rank holds ``1/N`` of the field's parameters. Its speedup counts rays per second against
one rank, as data-parallel's does.

A ring all-reduce of ``S`` bytes over ``N`` ranks moves ``2 (N - 1) / N * S`` bytes per rank in
``2 (N - 1)`` latency-bound steps; an all-gather half of that. Parameter sizes are counted from the model
built with the chosen device's defaults (the hash table is 2^19 entries per level on CUDA). Link figures
are assumptions (nominal bus bandwidths that NCCL reaches in practice, roughly), not measurements; the
step's compute time is the argument, measured elsewhere (``ns-accel-bench``, ``benchmarks/input_pipeline.py``).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

import torch

from nerfstudio_accel.spatial.block_composite import FLOATS_PER_RAY

LINKS: Dict[str, Tuple[float, float]] = {
    "NVLink 4 (H100 SXM)": (300e9, 10e-6),
    "PCIe 4 x16": (20e9, 15e-6),
    "100 Gb/s InfiniBand": (11e9, 20e-6),
    "10 Gb/s Ethernet": (1.1e9, 50e-6),
}
"""name: (bytes per second reached by a ring all-reduce, seconds of latency per ring step): assumptions."""
GATHERED_BYTES_PER_RAY = (2 * 4, 8, 4 * FLOATS_PER_RAY)
"""Spatial segmentation's three all-gathers per step, in bytes per ray per rank: 2 float32 culling summaries, the
optical depth in float64, the block's render in float32."""


def model_sizes(device_defaults: str) -> Tuple[int, int, int, int]:
    """``(trainable parameters, parameter tensors, grid cells, grid update interval)`` of accel-ngp on a
    small generated object scene, with ``device_defaults``' table and grid sizes."""
    from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig

    from nerfstudio_accel.engine.build import build_trainer_config
    from nerfstudio_accel.methods import accel_ngp
    from nerfstudio_accel.scenes.object_scene import SceneSpec, generate_scene

    with tempfile.TemporaryDirectory() as folder:
        scene = generate_scene(
            Path(folder) / "scene", SceneSpec(num_train=2, num_val=1, num_test=1, resolution=8, supersample=1, seed=0)
        )
        config = build_trainer_config(accel_ngp.config, scene, device_defaults, BlenderDataParserConfig())
        pipeline = config.pipeline.setup(device="cpu", test_mode="val")
        params = [p for p in pipeline.model.parameters() if p.requires_grad]
        grid = pipeline.model.sampler.grid
        return (
            sum(p.numel() for p in params),
            len(params),
            int(grid.occs.numel()),
            config.pipeline.model.occupancy.update_every,
        )


def ring_seconds(nbytes: float, ranks: int, bandwidth: float, latency: float, all_reduce: bool = True) -> float:
    """Seconds of a ring all-reduce (or all-gather) of ``nbytes`` over ``ranks`` ranks."""
    if ranks == 1:
        return 0.0
    factor = 2.0 if all_reduce else 1.0
    return factor * (ranks - 1) / ranks * nbytes / bandwidth + factor * (ranks - 1) * latency


def data_parallel_step(
    step_ms: float, grid_eval_ms: float, n: int, sizes: Tuple[int, int, int, int], link: Tuple[float, float]
) -> Tuple[float, float, float]:
    """Data-parallel training on ``n`` ranks over ``link``: ``(comm ms/step, step ms, speedup in rays/s)``."""
    params, tensors, cells, every = sizes
    bandwidth, latency = link
    gradient_bytes, gather_bytes = 4.0 * (params + tensors + 2), 4.0 * cells / 2
    comm = 1000 * (ring_seconds(gradient_bytes, n, bandwidth, latency) + 2 * ring_seconds(12, n, bandwidth, latency))
    comm += 1000 * ring_seconds(gather_bytes, n, bandwidth, latency, all_reduce=False) / every
    step = step_ms + grid_eval_ms / n / every + comm
    return comm, step, n * (step_ms + grid_eval_ms / every) / step


def table(step_ms: float, grid_eval_ms: float, ranks: List[int], sizes: Tuple[int, int, int, int]) -> List[str]:
    params, tensors, cells, every = sizes
    lines = [
        f"Compute {step_ms:g} ms/step per rank, grid evaluation {grid_eval_ms:g} ms per update on one rank, "
        f"gradient all-reduce {4.0 * (params + tensors + 2) / 1e6:.1f} MB/step, grid all-gather "
        f"{2.0 * cells / 1e6:.1f} MB every {every} steps.",
        "",
        "| link (assumed) | ranks | comm ms/step | step ms | speedup in rays/s | efficiency |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, link in LINKS.items():
        for n in ranks:
            comm, step, speedup = data_parallel_step(step_ms, grid_eval_ms, n, sizes, link)
            lines.append(f"| {name} | {n} | {comm:.2f} | {step:.2f} | {speedup:.2f}x | {100 * speedup / n:.0f}% |")
    return lines


def segmentation_table(
    step_ms: float, fixed_ms: float, rays: int, ranks: List[int], sizes: Tuple[int, int, int, int]
) -> List[str]:
    """Spatial segmentation's rows beside data-parallel's speedup (see the module docstring)."""
    params = sizes[0]
    lines = [
        f"One block per rank: {rays:,} rays per step on every rank, {fixed_ms:g} of {step_ms:g} ms/step not divided "
        f"among blocks, all-gathers of {sum(GATHERED_BYTES_PER_RAY)} bytes per ray per rank.",
        "",
        "| link (assumed) | ranks | parameters per rank | comm ms/step | step ms | speedup in rays/s | data-parallel's |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, (bandwidth, latency) in LINKS.items():
        for n in ranks:
            data_parallel = data_parallel_step(step_ms, 0.0, n, sizes, (bandwidth, latency))[2]
            comm = sum(
                ring_seconds(float(nbytes * rays * n), n, bandwidth, latency, all_reduce=False)
                for nbytes in GATHERED_BYTES_PER_RAY
            )
            comm = 1000 * (comm + ring_seconds(4.0, n, bandwidth, latency))
            step = fixed_ms + (step_ms - fixed_ms) / n + comm
            lines.append(
                f"| {name} | {n} | {params // n:,} | {comm:.2f} | {step:.2f} | {step_ms / step:.2f}x | "
                f"{data_parallel:.2f}x |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--step-ms",
        type=float,
        nargs="+",
        required=True,
        help="compute per training step on one rank (ms), measured elsewhere",
    )
    parser.add_argument(
        "--grid-eval-ms", type=float, default=0.0, help="one occupancy-grid update's evaluation on one rank (ms)"
    )
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument(
        "--rays-per-step", type=int, default=None, help="rays per step, for spatial segmentation's rows (else none)"
    )
    parser.add_argument(
        "--fixed-ms", type=float, default=0.0, help="ms of a step that spatial segmentation does not divide"
    )
    parser.add_argument("--device-defaults", choices=["cuda", "cpu"], default="cuda", help="whose table and grid sizes")
    args = parser.parse_args()
    torch.manual_seed(0)
    sizes = model_sizes(args.device_defaults)
    print(
        f"accel-ngp with {args.device_defaults} defaults: {sizes[0]:,} trainable parameters in {sizes[1]} tensors, {sizes[2]:,} grid cells"
    )
    for step_ms in args.step_ms:
        print()
        print("\n".join(table(step_ms, args.grid_eval_ms, args.ranks, sizes)))
        if args.rays_per_step is not None:
            print()
            print("\n".join(segmentation_table(step_ms, args.fixed_ms, args.rays_per_step, args.ranks, sizes)))


if __name__ == "__main__":
    main()
