"""The web viewer as a user sees it, the page opened in headless Chromium through Selenium: the Accel panel
while ns-train trains, and ns-viewer on a finished run. Skips where Chromium, its driver or selenium is
missing (.ci/run installs them when it runs as root)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from accel_test_helpers import train_run
from conftest import cli_env, console_script
from headless_browser import (
    WatchedTraining,
    canvas_pixels,
    chromium_missing_reason,
    click_checkbox,
    first_frame_at_least,
    free_port,
    read_panel,
    viewer_port,
)
from nerfstudio_accel.viewer import page_camera

pytestmark = pytest.mark.skipif(bool(chromium_missing_reason()), reason=chromium_missing_reason() or "ok")

PAGE_CAMERA = re.compile(r"^page camera (\{.*\})$", re.MULTILINE)
"""What tests/viewer/ns_viewer_logging_cameras.py prints on each camera message."""


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


@pytest.fixture(scope="module")
def finished_run(tiny_scene, tmp_path_factory):
    """A short accel-ngp run on the tiny scene, trained in process on CPU and saved."""
    trainer = train_run(tiny_scene, tmp_path_factory.mktemp("finished_run"), 100)
    return trainer


def test_ns_viewer_opens_a_finished_run_beside_a_training_camera_and_sends_a_256_px_frame(finished_run, tmp_path):
    """ns-viewer (through a wrapper that logs the page's camera) on a finished CPU run: the page's camera is
    moved beside the first training camera (not left at viser's default, inside the scene), and a frame at
    least 256 px wide arrives; the time it took is printed (run with -s to see it), not asserted."""
    port = free_port()
    log = tmp_path / "ns-viewer.log"
    command = [
        sys.executable,
        str(Path(__file__).with_name("ns_viewer_logging_cameras.py")),
        "--load-config",
        str(finished_run.base_dir / "config.yml"),
        "--viewer.websocket-port",
        str(port),
        "--viewer.websocket-host",
        "127.0.0.1",
    ]
    with log.open("w") as sink:
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env=cli_env(), start_new_session=True
        )
    with WatchedTraining(process, port) as run:
        run.port = viewer_port(log, process, timeout=180)
        driver = run.open_page()
        seconds, size = first_frame_at_least(driver, 256, timeout=300)
        print(
            f"\nns-viewer on CPU: first frame >= 256 px wide ({size[0]}x{size[1]}) {seconds:.1f} s after the page opened"
        )
        driver.save_screenshot(str(tmp_path / "ns_viewer.png"))
        cameras = [json.loads(found) for found in PAGE_CAMERA.findall(log.read_text())]
    assert cameras, f"no camera message logged\n{log.read_text()[-3000:]}"
    wxyz, position, _ = page_camera.page_pose(*page_camera.first_training_view(finished_run.pipeline)[::2])
    page = cameras[-1]
    assert np.allclose(page["position"], position, atol=1e-3), f"page at {page}, expected beside {position}"
    assert abs(float(np.dot(page["wxyz"], wxyz))) == pytest.approx(1.0, abs=1e-5), f"page turned {page['wxyz']}"
