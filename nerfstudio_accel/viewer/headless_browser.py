"""Open the viewer's page in headless Chromium (for the browser test, the pace benchmark and screenshots),
and stop the ``ns-train`` behind it.

Needs Debian's ``chromium`` and ``chromium-driver`` and ``selenium`` from PyPI (the ``test`` extra);
:func:`chromium_missing_reason` says in one line what is missing. WebGL runs on SwiftShader, so the
render canvas works without a GPU.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}",
                 "--use-gl=angle", "--use-angle=swiftshader", "--enable-unsafe-swiftshader"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=shutil.which("chromedriver")), options=options)
    driver.get(url)
    return driver


def interrupt(process: subprocess.Popen, timeout: float = 30.0) -> None:
    """Stop ``ns-train`` as a user does (Ctrl-C), killing it if it has not exited after ``timeout`` s."""
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
