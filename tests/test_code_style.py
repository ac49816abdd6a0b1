"""The code keeps the house style: ruff's lint rules and its formatter, as configured in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"])
def test_ruff_passes(command):
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, (
        f"ruff {' '.join(command)} (fix with ruff check --fix . && ruff format .):\n{result.stdout}{result.stderr}"
    )
