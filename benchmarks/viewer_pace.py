"""Training pace with the web viewer's page open against closed (not a test).

Starts ``ns-train <method> --vis viewer`` on a scene, then counts training steps from ns-train's
progress lines over three equal windows: page closed, page open in headless Chromium (through
Selenium, as a user's browser would hold it: connected, the camera still), page closed again.

    python benchmarks/viewer_pace.py --data ../shared/data/lego --seconds 60 \
        -- --pipeline.datamanager.camera-res-scale-factor 0.25

Flags after ``--`` go to ns-train before the data-parser subcommand. Needs ``chromium`` and
``chromium-driver`` (Debian) and ``selenium``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

from nerfstudio_accel.viewer.headless_browser import free_port, interrupt, open_page

PROGRESS = re.compile(r"^(\d+) \(\d+\.\d+%\)", re.MULTILINE)
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def last_step(log: Path) -> Optional[int]:
    """The highest step in ns-train's progress table so far (it prints every 10 steps)."""
    steps = [int(m) for m in PROGRESS.findall(ANSI.sub("", log.read_text(errors="replace")))]
    return max(steps) if steps else None


def steps_per_second(log: Path, seconds: float) -> float:
    """Steps per second over a window of ``seconds``, from the progress table's step counts."""
    start_time, start = time.monotonic(), last_step(log) or 0
    time.sleep(seconds)
    return ((last_step(log) or 0) - start) / (time.monotonic() - start_time)


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--method", default="accel-ngp")
    parser.add_argument("--dataparser", default="blender-data")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each window")
    parser.add_argument("--warmup", type=float, default=30.0, help="seconds of training before the first window")
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)

    port = free_port()
    out = Path(tempfile.mkdtemp(prefix="viewer-pace-"))
    log = out / "ns-train.log"
    ns_train = Path(sys.executable).parent / "ns-train"
    command = [str(ns_train), args.method, "--vis", "viewer", "--viewer.websocket-port", str(port),
               "--viewer.websocket-host", "127.0.0.1", "--output-dir", str(out), "--max-num-iterations", "1000000",
               *extra, args.dataparser, "--data", str(args.data)]
    print("$", " ".join(command), flush=True)
    with log.open("w") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
                                   env={**os.environ, "COLUMNS": "200"})
    driver = None
    try:
        time.sleep(args.warmup)
        closed = steps_per_second(log, args.seconds)
        print(f"page closed: {closed:.2f} steps/s", flush=True)
        driver = open_page(f"http://127.0.0.1:{port}")
        time.sleep(5.0)  # the page loads and connects
        opened = steps_per_second(log, args.seconds)
        print(f"page open:   {opened:.2f} steps/s", flush=True)
        driver.quit()
        driver = None
        time.sleep(2.0)
        closed_again = steps_per_second(log, args.seconds)
        print(f"page closed again: {closed_again:.2f} steps/s", flush=True)
        print(f"open / closed: {opened / max((closed + closed_again) / 2, 1e-9):.2f}x", flush=True)
    finally:
        if driver is not None:
            driver.quit()
        interrupt(process)


if __name__ == "__main__":
    main()
