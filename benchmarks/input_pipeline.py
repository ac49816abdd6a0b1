"""Steps/s and input stall of accel-ngp training with and without the pipelined input sampler.

    python benchmarks/input_pipeline.py --data data/blender/lego [--prefetch 0 2] [--steps 200] [--warmup 30]
        [--repeats 2] [--device cpu] [--downscale 1] [--alternate ROUNDS --block-steps 10]

For each repeat and each ``--prefetch`` value (interleaved, so drift hits both alike), builds accel-ngp as
``ns-train accel-ngp blender-data --data DIR`` does (at ``--downscale``, 1: full resolution), trains ``--warmup``
untimed steps with nerfstudio's callbacks, then ``--steps`` timed ones, and prints steps/s, rays/s, the mean time a
step waited for its batch and the mean stall fraction (that wait over the step). Then, for the choice
between a producer thread and a producer process: how long preparing one batch takes on the training
thread (at the size the last run reached), and how long handing one such batch from another process through a torch.multiprocessing queue
takes (what a process would add per batch, on top of preparing it).

``--alternate ROUNDS`` measures on one trainer instead: after ``--warmup`` steps, each round trains ``--block-steps``
steps at each ``--prefetch`` depth in turn (the order reversed every other round; each block starts without a
producer thread, so none runs during a depth-0 block and a depth-``K`` block's first step waits for a fresh one's
first batch, a cost charged to prefetching), and prints each depth's ms/step (median over rounds) and, per round, its
ratio to the first depth's. Runs of separate trainers drift with the host by more than the producer's share of a
step on a 2-core CPU; alternating blocks of one run do not, and the model and batch size are the same for every depth.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Sequence

import torch
import torch.multiprocessing as mp
from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig
from step_ops import check_scene_folder

from nerfstudio_accel.engine.build import build_trainer_config
from nerfstudio_accel.engine.trainer import training_step
from nerfstudio_accel.methods import accel_ngp


def build_trainer(data: Path, device: str, prefetch: int, output_dir: Path, downscale: float = 1.0):
    def configure(config) -> None:
        config.pipeline.datamanager.prefetch_batches = prefetch
        config.pipeline.datamanager.camera_res_scale_factor = 1.0 / downscale
        config.set_timestamp()

    config = build_trainer_config(
        accel_ngp.config, data, device, BlenderDataParserConfig(), output_dir=output_dir, configure=configure
    )
    torch.manual_seed(0)
    trainer = config.setup(local_rank=0, world_size=1)
    trainer.setup()
    return trainer


def train(trainer, start: int, count: int):
    """``count`` steps with nerfstudio's callbacks: ``(seconds, rays, waits, stall fractions)``."""
    rays, waits, stalls = 0, [], []
    started = time.perf_counter()
    for step in range(start, start + count):
        _, _, metrics = training_step(trainer, step)
        rays += int(metrics["num_rays_per_batch"])
        waits.append(float(metrics["input_wait_ms"]))
        stalls.append(float(metrics["input_stall_fraction"]))
    if trainer.device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - started, rays, waits, stalls


def alternate(trainer, prefetches: Sequence[int], start: int, rounds: int, block_steps: int) -> Dict[int, List[float]]:
    """ms/step of each prefetch depth in ``prefetches``, one value per round: ``rounds`` rounds of ``block_steps``
    steps per depth on ``trainer`` from step ``start``, the depths' order reversed every other round."""
    datamanager = trainer.pipeline.datamanager
    ms_per_step: Dict[int, List[float]] = {prefetch: [] for prefetch in prefetches}
    step = start
    for round_index in range(rounds):
        for prefetch in prefetches if round_index % 2 == 0 else list(reversed(prefetches)):
            datamanager.close()  # stops the last block's producer; next_train starts one of this depth, if any
            datamanager.config.prefetch_batches = prefetch
            seconds, _, _, _ = train(trainer, step, block_steps)
            ms_per_step[prefetch].append(1000.0 * seconds / block_steps)
            step += block_steps
    return ms_per_step


def alternate_report(ms_per_step: Dict[int, List[float]]) -> List[str]:
    """Markdown rows: each depth's median ms/step over rounds (min–max) and the median (quartiles) of its per-round
    ratio to the first depth's."""
    first = next(iter(ms_per_step.values()))
    lines = ["| prefetch | ms/step, median of rounds (min–max) | ratio to the first depth, median (quartiles) |"]
    lines.append("|---:|---:|---:|")
    for prefetch, values in ms_per_step.items():
        ratios = [value / reference for value, reference in zip(values, first)]
        quartiles = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else [ratios[0]] * 3
        lines.append(
            f"| {prefetch} | {statistics.median(values):.1f} ({min(values):.1f}–{max(values):.1f}) | "
            f"{quartiles[1]:.3f} ({quartiles[0]:.3f}–{quartiles[2]:.3f}) |"
        )
    return lines


def _send_batches(queue, received, batch, count: int) -> None:
    for _ in range(count):
        queue.put(batch)
    queue.put(None)
    received.wait()  # shared-memory handles need their sender alive until received


def process_handoff_ms(batch, count: int = 50) -> float:
    """Median ms to receive one ``batch`` from another process through a torch.multiprocessing queue."""
    context = mp.get_context("spawn")
    queue, received = context.Queue(maxsize=2), context.Event()
    producer = context.Process(target=_send_batches, args=(queue, received, batch, count))
    producer.start()
    queue.get()  # the first crossing pays the start-up
    times = []
    while True:
        started = time.perf_counter()
        item = queue.get()
        if item is None:
            break
        times.append(1000 * (time.perf_counter() - started))
    received.set()
    producer.join()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--prefetch", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--downscale", type=float, default=1.0, help="image downscale factor (4: the 800x800 lego at 200x200)"
    )
    parser.add_argument("--alternate", type=int, metavar="ROUNDS", help="alternate the depths on one trainer")
    parser.add_argument("--block-steps", type=int, default=10, help="steps per depth and round with --alternate")
    args = parser.parse_args()
    check_scene_folder(args.data)
    if args.alternate:
        with tempfile.TemporaryDirectory() as folder:
            trainer = build_trainer(args.data, args.device, args.prefetch[0], Path(folder), args.downscale)
            train(trainer, 0, args.warmup)
            ms_per_step = alternate(trainer, args.prefetch, args.warmup, args.alternate, args.block_steps)
            trainer.pipeline.datamanager.close()
        print(
            f"accel-ngp on {args.data} at 1/{args.downscale:g} ({args.device}, {torch.get_num_threads()} torch "
            f"threads), {args.alternate} rounds of {args.block_steps} steps per depth after {args.warmup}"
        )
        print("\n".join(alternate_report(ms_per_step)))
        return
    print(
        f"accel-ngp on {args.data} ({args.device}, {torch.get_num_threads()} torch threads), {args.steps} timed steps after {args.warmup}"
    )
    print("| prefetch | repeat | steps/s | rays/s | mean wait for batch (ms) | mean input stall |")
    print("|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        for repeat in range(args.repeats):
            for prefetch in args.prefetch:
                trainer = build_trainer(args.data, args.device, prefetch, Path(folder), args.downscale)
                train(trainer, 0, args.warmup)
                seconds, rays, waits, stalls = train(trainer, args.warmup, args.steps)
                last_batch_size = trainer.pipeline.datamanager.train_pixel_sampler.num_rays_per_batch
                print(
                    f"| {prefetch} | {repeat + 1} | {args.steps / seconds:.2f} | {rays / seconds:,.0f} | "
                    f"{statistics.mean(waits):.2f} | {100 * statistics.mean(stalls):.1f}% |",
                    flush=True,
                )
                trainer.pipeline.datamanager.close()
        trainer = build_trainer(args.data, args.device, 0, Path(folder))
        datamanager = trainer.pipeline.datamanager
        datamanager.train_pixel_sampler.set_num_rays_per_batch(last_batch_size)  # the trained runs' last size
        prepare = []
        for _ in range(20):
            started = time.perf_counter()
            batch = datamanager.next_train(0)
            prepare.append(1000 * (time.perf_counter() - started))
        rays = batch[0].origins.shape[0]
        print(
            f"\npreparing one batch of {rays} rays on the training thread: {statistics.median(prepare):.2f} ms (median of 20)"
        )
        print(
            f"receiving one such batch from a producer process (torch.multiprocessing queue): {process_handoff_ms(batch):.2f} ms (median of 49)"
        )


if __name__ == "__main__":
    main()
