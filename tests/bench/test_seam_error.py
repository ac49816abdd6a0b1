"""benchmarks/seam_error.py on real runs: a one-model and a 2-block run scored on the same pixels, regions that
cover every pixel, and a one-line refusal when no run given is split."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from accel_test_helpers import train_run

REPO = Path(__file__).resolve().parents[2]


def seam_error(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "benchmarks/seam_error.py", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_seam_error_scores_both_runs_on_the_split_runs_pixels(tiny_scene, tmp_path):
    one = train_run(tiny_scene, tmp_path / "one", steps=2)
    two = train_run(tiny_scene, tmp_path / "two", steps=2, pipeline={"spatial_blocks": 2})
    configs = [str(trainer.base_dir / "config.yml") for trainer in (one, two)]
    done = seam_error("--band", "0.3", *configs)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Split planes (axis, coordinate): [(" in done.stdout
    rows = [line.strip("| ").split(" | ") for line in done.stdout.splitlines() if line.startswith("| ")]
    assert [row[0] for row in rows[-3:]] == [f"`{configs[0]}`", f"`{configs[1]}`", "pixels"]
    total, *regions = (int(count) for count in rows[-1][1:])
    assert total == 2 * 32 * 32 == sum(regions)  # the 2 test views of the tiny scene, every pixel in one region
    refused = seam_error(configs[0])
    assert refused.returncode != 0 and refused.stderr.strip().splitlines()[-1].startswith("seam_error.py: no run")
