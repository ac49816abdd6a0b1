"""Steps/s and input stall of accel-ngp training with and without the pipelined input sampler.

    python benchmarks/input_pipeline.py --data ../shared/data/lego [--prefetch 0 2] [--steps 200] [--warmup 30]
        [--repeats 2] [--device cpu]

For each repeat and each ``--prefetch`` value (interleaved, so drift hits both alike), builds accel-ngp as
``ns-train accel-ngp blender-data --data DIR`` does (full resolution), trains ``--warmup`` untimed steps
with nerfstudio's callbacks, then ``--steps`` timed ones, and prints steps/s, rays/s, the mean time a
step waited for its batch and the mean stall fraction (that wait over the step). Then, for the choice
between a producer thread and a producer process: how long preparing one batch takes on the training
thread (at the size the last run reached), and how long handing one such batch from another process through a torch.multiprocessing queue
takes (what a process would add per batch, on top of preparing it).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp
from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig

from nerfstudio_accel.engine.build import build_trainer_config
from nerfstudio_accel.engine.trainer import training_step
from nerfstudio_accel.methods import accel_ngp


def build_trainer(data: Path, device: str, prefetch: int, output_dir: Path):
    def configure(config) -> None:
        config.pipeline.datamanager.prefetch_batches = prefetch
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
    args = parser.parse_args()
    print(
        f"accel-ngp on {args.data} ({args.device}, {torch.get_num_threads()} torch threads), {args.steps} timed steps after {args.warmup}"
    )
    print("| prefetch | repeat | steps/s | rays/s | mean wait for batch (ms) | mean input stall |")
    print("|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        for repeat in range(args.repeats):
            for prefetch in args.prefetch:
                trainer = build_trainer(args.data, args.device, prefetch, Path(folder))
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
