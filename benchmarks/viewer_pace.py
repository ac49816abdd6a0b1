"""Training pace with the web viewer's page open against closed (not a test).

Starts ``ns-train <method> --vis viewer`` on a scene, then counts training steps from ns-train's
progress lines over three equal windows: page closed, page open in headless Chromium (through
Selenium, as a user's browser would hold it: connected, the camera still), page closed again.

    python benchmarks/viewer_pace.py --data data/blender/lego --seconds 60 \
        -- --pipeline.datamanager.camera-res-scale-factor 0.25

Flags after ``--`` go to ns-train before the data-parser subcommand. Needs ``chromium`` and
``chromium-driver`` (Debian) and ``selenium``.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import List, Optional, Tuple

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # headless_browser is a test helper, not shipped
from headless_browser import WatchedTraining, scene_arguments, start_training_with_viewer  # noqa: E402

PROGRESS = re.compile(r"^(\d+) \(\d+\.\d+%\)", re.MULTILINE)
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def last_step(log: Path) -> Optional[int]:
    """The highest step in ns-train's progress table so far (it prints every 10 steps)."""
    steps = [int(m) for m in PROGRESS.findall(ANSI.sub("", log.read_text(errors="replace")))]
    return max(steps) if steps else None


def cpu_seconds(pid: Optional[int]) -> float:
    """User plus system CPU seconds of a process and its descendants so far (0 for None or a gone process)."""
    if pid is None:
        return 0.0
    total = 0.0
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def window(log: Path, seconds: float, training_pid: int, browser_pid: Optional[int]) -> Tuple[float, float, float]:
    """Steps per second over a window of ``seconds`` (from the progress table's step counts), and the CPU
    cores that ns-train and the browser used on average over it."""
    start_time, start = time.monotonic(), last_step(log) or 0
    train_cpu, browser_cpu = cpu_seconds(training_pid), cpu_seconds(browser_pid)
    time.sleep(seconds)
    elapsed = time.monotonic() - start_time
    return (
        ((last_step(log) or 0) - start) / elapsed,
        (cpu_seconds(training_pid) - train_cpu) / elapsed,
        (cpu_seconds(browser_pid) - browser_cpu) / elapsed,
    )


def renice(pid: int, niceness: int) -> None:
    """Set the niceness of every thread of a process and its descendants (Linux niceness is per thread)."""
    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        try:
            for thread in process.threads():
                psutil.Process(thread.id).nice(niceness)
        except psutil.NoSuchProcess:
            pass


def report(name: str, measured: Tuple[float, float, float]) -> float:
    """Print one window's figures; its steps/s."""
    pace, train_cores, browser_cores = measured
    print(
        f"{name}: {pace:.2f} steps/s; CPU cores used: ns-train {train_cores:.2f}, browser {browser_cores:.2f}",
        flush=True,
    )
    return pace


def main(argv: Optional[List[str]] = None) -> None:
    parser, own, extra = scene_arguments(__doc__.split("\n\n")[0], argv)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each window")
    parser.add_argument(
        "--browser-nice",
        type=int,
        default=0,
        help="niceness of the browser's processes once the page has loaded: 19 leaves the CPU to "
        "training, as a browser on another machine would (0: compete as a local browser does)",
    )
    parser.add_argument("--warmup", type=float, default=30.0, help="seconds of training before the first window")
    args = parser.parse_args(own)
    process, port, log = start_training_with_viewer(args, extra, "viewer-pace-")
    with WatchedTraining(process, port) as run:
        time.sleep(args.warmup)
        closed = report("page closed", window(log, args.seconds, process.pid, None))
        driver = run.open_page()
        time.sleep(5.0)  # the page loads and connects
        if args.browser_nice:
            renice(driver.service.process.pid, args.browser_nice)
        opened = report("page open", window(log, args.seconds, process.pid, driver.service.process.pid))
        run.close_page()
        time.sleep(2.0)
        closed_again = report("page closed again", window(log, args.seconds, process.pid, None))
        print(f"open / closed: {opened / max((closed + closed_again) / 2, 1e-9):.2f}x", flush=True)


if __name__ == "__main__":
    main()
