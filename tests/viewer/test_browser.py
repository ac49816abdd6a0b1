"""The Accel panel as a user sees it: ns-train with the web viewer, the page opened in headless Chromium
through Selenium. Skips where Chromium, its driver or selenium is missing (.ci/run installs them when
it runs as root)."""

from __future__ import annotations

import io
import re
import socket
import subprocess
import time

import numpy as np
import pytest
from conftest import cli_env, console_script

from nerfstudio_accel.viewer.headless_browser import chromium_missing_reason, free_port, interrupt, open_page

STEP_ROW = re.compile(r"training step\s+([\d,]+)")
RAYS_ROW = re.compile(r"training rays/s\s+([\d,]+)")

pytestmark = pytest.mark.skipif(bool(chromium_missing_reason()), reason=chromium_missing_reason() or "ok")


def wait_for_port(port: int, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"ns-train exited with {process.returncode} before the viewer came up")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    pytest.fail(f"the viewer did not listen on port {port} within {timeout} s")


def read_panel(driver, timeout: float):
    """The panel's training step and rays/s once the page shows them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = driver.find_element("tag name", "body").text
        step, rays = STEP_ROW.search(text), RAYS_ROW.search(text)
        if step and rays:
            return int(step.group(1).replace(",", "")), int(rays.group(1).replace(",", "")), text
        time.sleep(0.5)
    pytest.fail(f"no Accel panel values on the page within {timeout} s; page text:\n{text[-2000:]}")


def test_accel_panel_in_a_real_browser(tiny_scene, tmp_path):
    from PIL import Image

    port = free_port()
    command = [
        console_script("ns-train"), "accel-ngp", "--vis", "viewer", "--viewer.websocket-port", str(port),
        "--viewer.websocket-host", "127.0.0.1", "--machine.device-type", "cpu", "--max-num-iterations", "5000",
        "--output-dir", str(tmp_path / "outputs"), "--accel-panel-every", "5",
        "blender-data", "--data", str(tiny_scene),
    ]
    log = (tmp_path / "ns-train.log").open("w")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=cli_env(), start_new_session=True)
    driver = None
    try:
        wait_for_port(port, process, timeout=180)
        driver = open_page(f"http://127.0.0.1:{port}")
        first_step, first_rays, text = read_panel(driver, timeout=120)
        assert first_rays > 0 and "hard mining b" in text and "samples per ray" in text
        deadline, later_step = time.monotonic() + 120, first_step
        while later_step <= first_step and time.monotonic() < deadline:
            time.sleep(2)
            later_step, _, _ = read_panel(driver, timeout=30)
        assert later_step > first_step, "the panel did not advance with training"
        canvas = driver.find_element("tag name", "canvas")
        image = np.asarray(Image.open(io.BytesIO(canvas.screenshot_as_png)).convert("RGB"))
        driver.save_screenshot(str(tmp_path / "viewer.png"))
        colours = np.unique(image.reshape(-1, 3), axis=0).shape[0]
        assert image.std() > 5 and colours > 50, f"the render canvas looks blank ({colours} colours)"
    finally:
        if driver is not None:
            driver.quit()
        interrupt(process)
        log.close()
