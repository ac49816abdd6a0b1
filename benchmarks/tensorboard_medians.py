"""One markdown row from a training run's tensorboard events: median Train Rays / Sec (nerfstudio's figure,
all ranks together), median ms per step and median input stall (AccelTrainer's metric).

    python benchmarks/tensorboard_medians.py RUN_FOLDER NAME
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

TAGS = ("Train Rays / Sec", "Train Iter (time)", "Train Metrics Dict/input_stall_fraction")


def medians(run_folder: Path) -> dict:
    """Median of each tag of :data:`TAGS` over the run's events, the first 10% of steps left out (warm-up)."""
    found = {}
    for events in sorted(run_folder.rglob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        for tag in TAGS:
            if tag in accumulator.Tags().get("scalars", []):
                values = accumulator.Scalars(tag)
                found.setdefault(tag, []).extend(value.value for value in values[len(values) // 10 :])
    return {tag: statistics.median(values) for tag, values in found.items() if values}


def main() -> None:
    run_folder, name = Path(sys.argv[1]), sys.argv[2]
    found = medians(run_folder)
    rays = found.get(TAGS[0])
    step = found.get(TAGS[1])
    stall = found.get(TAGS[2])
    cells = [
        f"{rays:,.0f}" if rays else "—",
        f"{1000 * step:.1f}" if step else "—",
        f"{100 * stall:.1f}%" if stall is not None else "—",
    ]
    print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
