"""User errors leave nerfstudio's tools as one line; other exceptions keep their stack trace."""

from __future__ import annotations

import subprocess
import sys


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_an_accel_error_in_a_nerfstudio_tool_prints_one_line():
    """Loading the method catalogue (as ns-eval, ns-render and ns-viewer do) installs the hook."""
    result = run_python(
        "import nerfstudio_accel.methods\n"
        "from nerfstudio_accel.errors import ConfigError\n"
        "raise ConfigError('this config.yml is too old; retrain it')\n"
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == "error: this config.yml is too old; retrain it"
    assert "Traceback" not in result.stderr


def test_other_exceptions_keep_their_stack_trace():
    result = run_python("import nerfstudio_accel.methods\nraise RuntimeError('a bug')\n")
    assert result.returncode == 1 and "Traceback" in result.stderr and "RuntimeError: a bug" in result.stderr
