"""Open the viewer's page in headless Chromium (for the browser test, the pace benchmark and screenshots),
and stop the ``ns-train`` behind it. Not part of the package: tests import it as ``headless_browser``
(``tests/`` is on ``sys.path`` under pytest), scripts after putting ``tests/`` on ``sys.path``.

Needs Debian's ``chromium`` and ``chromium-driver`` and ``selenium`` from PyPI (the ``test`` extra);
:func:`chromium_missing_reason` says in one line what is missing. WebGL runs on SwiftShader, so the
render canvas works without a GPU.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np

PANEL_STEP = re.compile(r"training step\s+([\d,]+)")
PANEL_RAYS = re.compile(r"training rays/s\s+([\d,]+)")
RESOLUTION = re.compile(r"Resolution:\s*(\d+)\s*[x\u00d7]\s*(\d+)\s*px")
"""nerfstudio's line under the page's step counter, rewritten after each frame it sends."""
VISER_HTTP = re.compile(r"\bHTTP\W+http://[^\s:/]+:(\d+)")
"""The address in the banner viser prints once its server listens (``│ HTTP │ http://127.0.0.1:7007 │``)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now: the port to ask a viser server for.
    Anything may take it before the server binds it; viser then moves on to the next free port, so read
    back the port it listens on (:func:`viewer_port`, ``ViserServer.get_port()``) rather than this one."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def viewer_port(log: Path, process: subprocess.Popen, timeout: float) -> int:
    """The port the viser server of ``process`` (``ns-train --vis viewer`` writing to ``log``) listens on, from
    the banner viser prints once it does (nerfstudio's own line names the port asked for); raises
    ``RuntimeError`` (one line) if ``process`` exits or ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = VISER_HTTP.search(log.read_text(errors="replace")) if log.is_file() else None
        if found:
            return int(found.group(1))
        if process.poll() is not None:
            raise RuntimeError(f"ns-train exited with {process.returncode} before the viewer came up")
        time.sleep(0.5)
    raise RuntimeError(f"no viser server in {log} within {timeout} s")


def chromium_missing_reason() -> str:
    """Empty when headless Chromium can be driven here, else what is missing and how to install it."""
    if not (shutil.which("chromium") or shutil.which("chromium-browser")) or not shutil.which("chromedriver"):
        return "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "needs selenium (pip install selenium, or the test extra)"
    return ""


def open_page(url: str, width: int = 1280, height: int = 800):
    """A headless Chromium (selenium ``WebDriver``) showing ``url``; the caller quits it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser") or "chromium"
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--use-gl=angle",
        "--use-angle=swiftshader",
        "--enable-unsafe-swiftshader",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=shutil.which("chromedriver")), options=options)
    driver.get(url)
    return driver


def scene_arguments(
    description: str, argv: Optional[List[str]]
) -> Tuple[argparse.ArgumentParser, List[str], List[str]]:
    """A parser with ``--data``, ``--method`` and ``--dataparser`` for a script that trains with the viewer,
    the script's own arguments and the ns-train flags after ``--``."""
    argv = sys.argv[1:] if argv is None else argv
    own, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--method", default="accel-ngp")
    parser.add_argument("--dataparser", default="blender-data")
    return parser, own, extra


def start_training_with_viewer(
    args: argparse.Namespace, extra: List[str], prefix: str
) -> Tuple[subprocess.Popen, int, Path]:
    """Start ``ns-train <method> --vis viewer`` on a free port with its output in a new temporary folder;
    returns the process, the viewer's port and the log file."""
    port = free_port()
    out = Path(tempfile.mkdtemp(prefix=prefix))
    command = [
        str(Path(sys.executable).parent / "ns-train"),
        args.method,
        "--vis",
        "viewer",
        "--viewer.websocket-port",
        str(port),
        "--viewer.websocket-host",
        "127.0.0.1",
        "--output-dir",
        str(out),
        "--max-num-iterations",
        "1000000",
        *extra,
        args.dataparser,
        "--data",
        str(args.data),
    ]
    print("$", " ".join(command), flush=True)
    log = out / "ns-train.log"
    with log.open("w") as sink:
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, "COLUMNS": "200"}
        )
    return process, port, log


def wait_for_port(port: int, process: subprocess.Popen, timeout: float) -> None:
    """Return once something listens on ``port``; raise ``RuntimeError`` (one line) if ``process`` exits or
    ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"ns-train exited with {process.returncode} before the viewer came up")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise RuntimeError(f"the viewer did not listen on port {port} within {timeout} s")


def read_panel(driver, timeout: float) -> Tuple[int, int, str]:
    """The Accel panel's training step and rays/s, and the page's text, once the page shows them; raises
    ``TimeoutError`` with the end of the page's text after ``timeout`` seconds."""
    deadline, text = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        text = driver.find_element("tag name", "body").text
        step, rays = PANEL_STEP.search(text), PANEL_RAYS.search(text)
        if step and rays:
            return int(step.group(1).replace(",", "")), int(rays.group(1).replace(",", "")), text
        time.sleep(0.5)
    raise TimeoutError(f"no Accel panel values on the page within {timeout} s; page text ends:\n{text[-2000:]}")


def click_checkbox(driver, label: str) -> bool:
    """Click the page's checkbox labelled ``label`` (a viser GUI checkbox: a ``<label for=...>`` beside its
    input); returns whether it is checked now."""
    element = driver.find_element("xpath", f"//label[normalize-space()='{label}']")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
    element.click()
    return driver.find_element("id", element.get_attribute("for")).is_selected()


def canvas_pixels(driver) -> np.ndarray:
    """The render canvas as an ``(H, W, 3)`` uint8 array."""
    from PIL import Image

    png = driver.find_element("tag name", "canvas").screenshot_as_png
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


class WatchedTraining:
    """A running ``ns-train`` with a viewer on ``port``, and at most one page open on it; leaving the ``with``
    block closes the page and stops ``ns-train`` (:func:`interrupt`), whatever happened inside."""

    def __init__(self, process: subprocess.Popen, port: int) -> None:
        self.process, self.port, self.driver = process, port, None

    def open_page(self, width: int = 1280, height: int = 800):
        """Open the viewer's page (see :func:`open_page`); it is closed on leaving the block."""
        self.driver = open_page(f"http://127.0.0.1:{self.port}", width, height)
        return self.driver

    def close_page(self) -> None:
        if self.driver is not None:
            self.driver.quit()
            self.driver = None

    def __enter__(self) -> "WatchedTraining":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close_page()
        interrupt(self.process)


def interrupt(process: subprocess.Popen, timeout: float = 30.0) -> None:
    """Stop ``ns-train`` as a user does (Ctrl-C), killing it if it has not exited after ``timeout`` s."""
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()


def first_frame_at_least(driver, width: int, timeout: float):
    """Seconds until the page reports a frame at least ``width`` px wide, and that frame's size; raises
    ``TimeoutError`` with the sizes seen after ``timeout`` seconds."""
    start, seen = time.monotonic(), []
    while time.monotonic() - start < timeout:
        found = RESOLUTION.search(driver.find_element("tag name", "body").text)
        if found:
            size = (int(found.group(1)), int(found.group(2)))
            if not seen or seen[-1][1] != size:
                seen.append((round(time.monotonic() - start, 1), size))
            if size[0] >= width:
                return time.monotonic() - start, size
        time.sleep(0.25)
    raise TimeoutError(f"no frame {width} px wide within {timeout} s; frames (seconds, size): {seen}")
