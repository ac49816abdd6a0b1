"""The README's picture of the web viewer with the Accel panel, made the way the browser test sees the page.

Trains ``ns-train <method> --vis viewer`` on a scene, opens the page in headless Chromium (Selenium),
waits ``--warmup`` seconds of training, ticks the panel's toggles, waits for two panel refreshes and a
render, and saves the page as a palette PNG:

    python scripts/viewer_screenshot.py --data data/blender/lego \
        -- --machine.device-type cpu --pipeline.datamanager.camera-res-scale-factor 0.25

Flags after ``--`` go to ns-train before the data-parser subcommand.
"""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path
from typing import List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # headless_browser is a test helper, not shipped
from headless_browser import (  # noqa: E402
    WatchedTraining,
    click_checkbox,
    read_panel,
    scene_arguments,
    start_training_with_viewer,
    wait_for_port,
)


def main(argv: Optional[List[str]] = None) -> None:
    parser, own, extra = scene_arguments(__doc__.split("\n\n")[0], argv)
    parser.add_argument("--warmup", type=float, default=90.0, help="seconds of training before the toggles")
    parser.add_argument(
        "--toggle",
        action="append",
        default=None,
        help="label of a panel checkbox to tick (repeatable; default: Show occupancy grid)",
    )
    parser.add_argument("--output", type=Path, default=Path("docs/images/viewer_accel_panel.png"))
    parser.add_argument("--window", type=int, nargs=2, default=(1280, 1000), metavar=("WIDTH", "HEIGHT"))
    args = parser.parse_args(own)
    from PIL import Image
    from selenium.webdriver.common.action_chains import ActionChains

    process, port, _ = start_training_with_viewer(args, extra, "viewer-screenshot-")
    with WatchedTraining(process, port) as run:
        wait_for_port(port, process, timeout=300)
        driver = run.open_page(*args.window)
        read_panel(driver, timeout=120)
        time.sleep(args.warmup)
        for label in args.toggle or ["Show occupancy grid"]:
            print(f"{label}: {'on' if click_checkbox(driver, label) else 'off'}", flush=True)
        step, _, _ = read_panel(driver, timeout=60)
        deadline = time.monotonic() + 120
        while read_panel(driver, timeout=60)[0] < step + 20 and time.monotonic() < deadline:
            time.sleep(1.0)
        accel_folder = driver.find_element("xpath", "//*[normalize-space(text())='Accel']")
        driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", accel_folder)
        ActionChains(driver).move_to_element(driver.find_element("tag name", "canvas")).perform()  # no tooltip
        time.sleep(10.0)  # a settled render after the overlay
        image = Image.open(io.BytesIO(driver.get_screenshot_as_png())).convert("RGB")
        args.output.parent.mkdir(parents=True, exist_ok=True)
        image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(args.output, optimize=True)
        print(
            f"saved {args.output} ({args.output.stat().st_size // 1024} KiB) at panel step {read_panel(driver, 30)[0]}"
        )


if __name__ == "__main__":
    main()
