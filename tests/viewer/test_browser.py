"""The Accel panel as a user sees it: ns-train with the web viewer, the page opened in headless Chromium
through Selenium. Skips where Chromium, its driver or selenium is missing (.ci/run installs them when
it runs as root)."""

from __future__ import annotations

import subprocess
import time

import numpy as np
import pytest

from conftest import cli_env, console_script
from headless_browser import (
    WatchedTraining,
    canvas_pixels,
    chromium_missing_reason,
    click_checkbox,
    free_port,
    read_panel,
    viewer_port,
)

pytestmark = pytest.mark.skipif(bool(chromium_missing_reason()), reason=chromium_missing_reason() or "ok")


def test_accel_panel_in_a_real_browser(tiny_scene, tmp_path):
    port = free_port()
    command = [
        console_script("ns-train"),
        "accel-ngp",
        "--vis",
        "viewer",
        "--viewer.websocket-port",
        str(port),
        "--viewer.websocket-host",
        "127.0.0.1",
        "--machine.device-type",
        "cpu",
        "--max-num-iterations",
        "5000",
        "--output-dir",
        str(tmp_path / "outputs"),
        "--accel-panel-every",
        "5",
        "blender-data",
        "--data",
        str(tiny_scene),
    ]
    with (tmp_path / "ns-train.log").open("w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=cli_env(), start_new_session=True)
    with WatchedTraining(process, port) as run:
        run.port = viewer_port(tmp_path / "ns-train.log", process, timeout=180)  # another, if port was taken meanwhile
        driver = run.open_page()
        first_step, first_rays, text = read_panel(driver, timeout=120)
        assert first_rays > 0 and "hard mining b" in text and "samples per ray" in text
        deadline, later_step = time.monotonic() + 120, first_step
        while later_step <= first_step and time.monotonic() < deadline:
            time.sleep(2)
            later_step, _, _ = read_panel(driver, timeout=30)
        assert later_step > first_step, "the panel did not advance with training"
        image = canvas_pixels(driver)
        driver.save_screenshot(str(tmp_path / "viewer.png"))
        colours = np.unique(image.reshape(-1, 3), axis=0).shape[0]
        assert image.std() > 5 and colours > 50, f"the render canvas looks blank ({colours} colours)"
        assert click_checkbox(driver, "Show occupancy grid") and not click_checkbox(driver, "Show occupancy grid")
