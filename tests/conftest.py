"""Shared fixtures: a tiny Blender-format scene and a runner for the console scripts (ns-train, ns-eval, ...)."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

import pytest

from nerfstudio_accel.scenes.object_scene import SceneSpec, generate_scene

TINY_SPEC = SceneSpec(num_train=8, num_val=2, num_test=2, resolution=32, supersample=1, seed=0)
"""Small enough that ns-train (30 steps) and ns-eval (every test view) take seconds on a CPU."""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

CliResult = Tuple[int, str, str]
RunCli = Callable[..., CliResult]


@pytest.fixture(scope="session")
def tiny_scene(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Blender-format scene (8 train / 2 val / 2 test views at 32x32). Read-only: copy it to modify it."""
    return generate_scene(tmp_path_factory.mktemp("tiny_scene"), TINY_SPEC)


def console_script(name: str) -> str:
    """Path of a console script installed next to this interpreter (the venv's bin), else on PATH."""
    candidate = Path(sys.executable).parent / name
    if candidate.is_file():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"console script {name!r} not found next to {sys.executable} nor on PATH")
    return found


@functools.lru_cache(maxsize=None)
def ns_export_missing_reason() -> str:
    """Empty when ``ns-export`` can start here, else why not: it imports open3d, whose wheel loads system libraries
    (libusb-1.0 among them) that a bare machine may lack."""
    probe = subprocess.run([sys.executable, "-c", "import open3d"], capture_output=True, text=True, timeout=300)
    if probe.returncode == 0:
        return ""
    last = (probe.stderr.strip().splitlines() or ["import failed"])[-1]
    return f"ns-export imports open3d, which does not load here ({last}); on Debian: apt-get install libusb-1.0-0"


def cli_env(extra: Optional[Dict[str, str]] = None, drop: Tuple[str, ...] = ()) -> Dict[str, str]:
    """Environment for subprocesses: quiet warnings, wide fixed-width output, no colour."""
    env = dict(os.environ)
    env.update({"PYTHONWARNINGS": "ignore", "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"})
    for name in drop:
        env.pop(name, None)
    env.update(extra or {})
    return env


def run_cli(
    name: str,
    *args: str,
    timeout: float = 180.0,
    cwd: Optional[Path] = None,
    env: Optional[Dict[str, str]] = None,
    drop_env: Tuple[str, ...] = (),
) -> CliResult:
    """Run console script ``name`` with ``args``; returns (returncode, stdout, stderr) with ANSI codes stripped.

    ``name`` may also be ``"python"`` to run this interpreter. Fails the test (with the output so far)
    when the command runs longer than ``timeout`` seconds.
    """
    executable = sys.executable if name == "python" else console_script(name)
    command = [executable, *map(str, args)]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
            env=cli_env(env, drop_env),
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as error:
        out = error.stdout.decode(errors="replace") if isinstance(error.stdout, bytes) else (error.stdout or "")
        err = error.stderr.decode(errors="replace") if isinstance(error.stderr, bytes) else (error.stderr or "")
        pytest.fail(
            f"{' '.join(command)} ran past {timeout} s\n--- stdout tail\n{out[-3000:]}\n--- stderr tail\n{err[-3000:]}"
        )
    return done.returncode, _ANSI.sub("", done.stdout), _ANSI.sub("", done.stderr)


@pytest.fixture(name="run_cli", scope="session")
def run_cli_fixture() -> RunCli:
    """The :func:`run_cli` helper, as a fixture."""
    return run_cli
