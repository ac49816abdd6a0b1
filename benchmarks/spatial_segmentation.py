"""Spatial segmentation against data-parallel training, on 2 gloo ranks (CPU), for an object scene or a capture.

    python benchmarks/spatial_segmentation.py --data data/blender/lego --downscale 4 --steps 1500 \\
        [--seconds 300] [--dataparser auto] --out DIR

Every run is nerfstudio's per-rank ``train_loop`` on gloo processes, as its launcher runs
``--machine.num-devices 2`` (the launcher itself asserts CUDA), each rank on one CPU thread:

- ``one rank``: one model in one process, the baseline;
- ``data-parallel``: the whole model on each rank, each rank its own rays, every gradient all-reduced;
- ``2 blocks``: one block per rank (``--pipeline.spatial-blocks 2``), the same rays on both, a few floats per ray
  gathered.

Both run ``--steps`` steps; with ``--seconds``, each runs again for as many steps as its median step time from
the first runs fits in that time (equal time, start-up not counted). Hard mining is off in both (ranks refuse it
with blocks). Per run: the median ms per step (rank 0, after the first 10% of steps), the bytes each rank hands to
collectives per step (the tensors' payload, medians over steps; a ring all-reduce moves about twice its payload
per rank, an all-gather about its payload), each block's samples per ray (its rank's median over steps: how evenly
the split shares the work), parameters and peak resident memory (VmHWM) per rank, and, from the
checkpoint in one process, the PSNR over every test view and the render time per view (a K-block model fuses
its blocks per ray: the render cost spatial segmentation pays). Prints one markdown table; writes
``results.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Dict, List, Type

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from nerfstudio.scripts.train import train_loop
from nerfstudio.utils.eval_utils import eval_setup
from step_ops import check_scene_folder

from nerfstudio_accel import distributed
from nerfstudio_accel.bench.configs import MethodSpec, build_config, resolve_dataparser
from nerfstudio_accel.bench.evaluation import evaluate_views
from nerfstudio_accel.engine.trainer import AccelTrainer, AccelTrainerConfig
from nerfstudio_accel.spatial.cell_samplers import SAMPLES_PER_RAY_OF_BLOCK

RUNS = {"one rank": (1, 1), "data-parallel": (2, 1), "2 blocks": (2, 2)}
"""Each run's ranks and ``--pipeline.spatial-blocks``."""
COLLECTIVES = ("all_reduce", "all_gather", "broadcast")


@dataclass
class MeasuredTrainerConfig(AccelTrainerConfig):
    _target: Type = field(default_factory=lambda: MeasuredTrainer)
    record_dir: Path = Path(".")


class MeasuredTrainer(AccelTrainer):
    """AccelTrainer that times each step and counts the bytes its rank hands to collectives during it."""

    config: MeasuredTrainerConfig

    def setup(self, test_mode="val") -> None:
        super().setup(test_mode)
        self.step_seconds: List[float] = []
        self.step_bytes: List[int] = []
        self.step_rays: List[int] = []
        self.block_samples: Dict[str, List[float]] = {}
        self.sent = 0
        for name in COLLECTIVES:
            collective = getattr(dist, name)

            def counted(tensor_or_list, *args, _collective=collective, **kwargs):
                tensor = tensor_or_list if torch.is_tensor(tensor_or_list) else args[0]
                self.sent += tensor.numel() * tensor.element_size()
                return _collective(tensor_or_list, *args, **kwargs)

            setattr(dist, name, counted)

    def train_iteration(self, step: int):
        self.sent = 0
        started = time.perf_counter()
        result = super().train_iteration(step)
        self.step_seconds.append(time.perf_counter() - started)
        self.step_bytes.append(self.sent)
        self.step_rays.append(self.pipeline.rays_in_last_batch)
        block = self.pipeline.model.own_block  # one block per rank: this rank's block's samples per ray
        if block is not None:
            figures = self.pipeline.model.sampler.figures()
            self.block_samples.setdefault(str(block), []).append(figures[f"{SAMPLES_PER_RAY_OF_BLOCK}{block}"])
        return result

    def train(self) -> None:
        super().train()
        skip = len(self.step_seconds) // 10
        record = {
            "ms_per_step": 1000.0 * statistics.median(self.step_seconds[skip:]),
            "bytes_per_step": statistics.median(self.step_bytes[skip:]),
            "rays_per_step": statistics.median(self.step_rays[skip:]),
            "block_samples_per_ray": {k: statistics.median(v[len(v) // 10 :]) for k, v in self.block_samples.items()},
            "parameters": sum(p.numel() for p in self.pipeline.model.parameters()),
            "peak_rss_mb": peak_resident_mib(),
        }
        (self.config.record_dir / f"rank{distributed.rank()}.json").write_text(json.dumps(record))


def peak_resident_mib() -> float:
    """This process's peak resident memory (Linux's VmHWM, which starts afresh in a spawned process, unlike
    ``ru_maxrss``, which a child inherits from its parent)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rank_main(rank: int, ranks: int, init_file: str, config: MeasuredTrainerConfig) -> None:
    torch.set_num_threads(1)
    if ranks == 1:
        train_loop(0, 1, config)
        return
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=ranks, timeout=timedelta(minutes=30)
    )
    try:
        train_loop(rank, ranks, config, global_rank=rank)
    finally:
        dist.destroy_process_group()


def run_config(args: argparse.Namespace, ranks: int, blocks: int, steps: int, folder: Path) -> MeasuredTrainerConfig:
    base = build_config(
        MethodSpec("accel-ngp", "accel-ngp", ()),
        args.data,
        resolve_dataparser(args.data, args.dataparser),
        args.downscale,
        "cpu",
        args.seed,
        folder,
    )
    config = MeasuredTrainerConfig(
        **{name: copy.deepcopy(getattr(base, name)) for name in base.__dataclass_fields__ if name != "_target"},
        record_dir=folder,
    )
    config.machine.num_devices, config.vis = ranks, "tensorboard"
    config.max_num_iterations, config.steps_per_save = steps, 10**9
    config.steps_per_eval_batch = config.steps_per_eval_image = config.steps_per_eval_all_images = 10**9
    config.pipeline.spatial_blocks, config.pipeline.hard_mining = blocks, False
    return config


def train_and_score(args: argparse.Namespace, label: str, steps: int, folder: Path) -> Dict:
    folder.mkdir(parents=True, exist_ok=True)
    count, blocks = RUNS[label]
    config = run_config(args, count, blocks, steps, folder)
    config.save_config()
    mp.spawn(rank_main, args=(count, str(folder / "init"), config), nprocs=count, join=True)
    ranks = [json.loads((folder / f"rank{rank}.json").read_text()) for rank in range(count)]
    _, pipeline, _, _ = eval_setup(config.get_base_dir() / "config.yml", test_mode="test")
    block_samples = {k: v for rank in ranks for k, v in rank["block_samples_per_ray"].items()}
    scores = evaluate_views(pipeline)
    return {
        "run": label,
        "ranks": count,
        "steps": steps,
        "ms_per_step": ranks[0]["ms_per_step"],
        "rays_per_second": sum(rank["rays_per_step"] for rank in ranks[: 1 if blocks > 1 else count])
        * 1000.0
        / ranks[0]["ms_per_step"],
        "kb_per_step": max(rank["bytes_per_step"] for rank in ranks) / 1024,
        "block_samples_per_ray": [block_samples[k] for k in sorted(block_samples, key=int)],
        "parameters_per_rank": max(rank["parameters"] for rank in ranks),
        "peak_rss_mb": max(rank["peak_rss_mb"] for rank in ranks),
        "psnr": scores["psnr"],
        "render_ms_per_view": 1000.0 / scores["fps"],
    }


def markdown(rows: List[Dict]) -> str:
    lines = [
        "| run | ranks | steps | ms/step | rays/s trained | KiB/step per rank | samples/ray per block | "
        "parameters per rank | peak resident MiB per rank | PSNR | render ms/view |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['run']} | {row['ranks']} | {row['steps']} | {row['ms_per_step']:.1f} | "
            f"{row['rays_per_second']:.0f} | {row['kb_per_step']:.1f} | "
            f"{' / '.join(f'{v:.1f}' for v in row['block_samples_per_ray']) or '-'} | "
            f"{row['parameters_per_rank']:,} | {row['peak_rss_mb']:.0f} | {row['psnr']:.2f} | "
            f"{row['render_ms_per_view']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a scene: Blender, nerfstudio or COLMAP format")
    parser.add_argument(
        "--dataparser", default="auto", choices=("auto", "blender-data", "nerfstudio-data", "colmap"), help="its format"
    )
    parser.add_argument(
        "--downscale", type=float, default=4.0, help="image downscale factor (4: the 800x800 lego at 200x200)"
    )
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--seconds", type=float, default=None, help="also train each run for this long")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    check_scene_folder(args.data)
    rows = [train_and_score(args, label, args.steps, args.out / f"{label} steps") for label in RUNS]
    if args.seconds is not None:
        for row in list(rows):
            steps = int(args.seconds * 1000.0 / row["ms_per_step"])
            rows.append(train_and_score(args, row["run"], steps, args.out / f"{row['run']} time"))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(rows, indent=2))
    print(markdown(rows))


if __name__ == "__main__":
    main()
