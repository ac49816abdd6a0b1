"""benchmarks/gpu_report.sh parses and refuses bad use here (an unknown part, a missing scene, no GPU), each in one
line; benchmarks/step_ops.py counts a step's operators and syncs on CPU, benchmarks/step_profile.py reports a step's
phases, benchmarks/culling_rounds.py the culling pass's counts, benchmarks/culling_prefetch.py the fused kernel both
ways on the same recorded calls, and benchmarks/gradient_checkpointing.py graph memory with checkpointing off and on
(shapes of the reports, counts and memory only: never timings)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from accel_test_helpers import run_step_benchmark

REPO = Path(__file__).resolve().parents[2]
GPU_REPORT = "benchmarks/gpu_report.sh"


def gpu_report(part: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """``bash benchmarks/gpu_report.sh part`` from ``cwd`` with this interpreter's scripts first on PATH."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run(
        ["bash", str(REPO / GPU_REPORT), part], cwd=cwd, capture_output=True, text=True,
        env={**os.environ, "PATH": path, **env}, timeout=300,
    )  # fmt: skip


def test_gpu_report_parses():
    done = subprocess.run(["bash", "-n", GPU_REPORT], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_gpu_report_refuses_an_unknown_part(tmp_path):
    done = gpu_report("everything", tmp_path, OUT=str(tmp_path / "report"))
    assert done.returncode == 2 and "usage" in done.stderr
    assert not any(tmp_path.iterdir())  # refused before writing anything


def test_gpu_report_says_in_one_line_where_the_scene_is_missing(tmp_path):
    """The default scene folder, relative to where it runs: here an empty folder, so it is missing."""
    done = gpu_report("checks", tmp_path)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "data/blender/lego" in done.stderr and "ns-download-data blender" in done.stderr
    assert not any(tmp_path.iterdir())


def test_gpu_report_says_in_one_line_that_it_needs_a_cuda_gpu(tiny_scene, tmp_path):
    """No GPU visible (hidden where there is one): one line, nothing written."""
    done = gpu_report("bench", tmp_path, DATA=str(tiny_scene), CUDA_VISIBLE_DEVICES="")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error:") and "CUDA" in done.stderr
    assert not any(tmp_path.iterdir())


def test_step_benchmarks_say_in_one_line_where_the_scene_is_missing(tmp_path):
    """Their default scene folder, relative to where they run: here an empty folder, so it is missing."""
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks/step_ops.py")], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 1 and done.stderr.splitlines()[-1].startswith("error: scene folder data/blender/lego")
    assert "ns-download-data blender" in done.stderr


def test_step_ops_counts_operators_and_syncs_of_a_training_step(tiny_scene, tmp_path):
    results, report = run_step_benchmark("step_ops.py", tiny_scene, tmp_path)
    result = results["occupancy"]
    assert result["aten_ops_nested"] >= result["aten_ops"] > 0
    sites = {site["where"].split("(")[0]: site for site in result["sync_sites"]}
    # the step guard reads one flag per step; the numba marcher's sync is a CPU-only one
    assert sites["nerfstudio_accel/engine/trainer.py"]["kind"].startswith("scalar read")
    assert result["syncs"] > result["syncs_on_cuda"] >= 1
    assert "| occupancy |" in report


def test_step_profile_reports_every_phase_of_both_settings(tiny_scene, tmp_path):
    results, report = run_step_benchmark("step_profile.py", tiny_scene, tmp_path)
    mined, ordinary = results["occupancy, mining"], results["occupancy, no mining"]
    for result in (mined, ordinary):
        assert result["ms_per_step"] == pytest.approx(sum(result["phases_ms"].values()))
    assert {"scoring forward", "importance and selection"} <= set(mined["phases_ms"]) and mined["hard_fraction"] > 0
    assert "scoring forward" not in ordinary["phases_ms"] and ordinary["hard_fraction"] is None
    assert "| culling density pass |" in report and "Mined step / ordinary step: occupancy:" in report


def test_gradient_checkpointing_bench_reports_each_setting(tiny_scene, tmp_path):
    results, report = run_step_benchmark("gradient_checkpointing.py", tiny_scene, tmp_path, "--samples", "2048")
    assert set(results) == {f"occupancy, 2048, {mine}, {ckpt}" for mine in ("on", "off") for ckpt in ("on", "off")}
    for mining in ("on", "off"):
        plain, checkpointed = results[f"occupancy, 2048, {mining}, off"], results[f"occupancy, 2048, {mining}, on"]
        assert 0 < checkpointed["graph_mib"] < plain["graph_mib"]
    assert "| occupancy | 2048 | on | on |" in report


def test_culling_rounds_bench_reads_fewer_densities_and_keeps_the_same_samples(tiny_scene, tmp_path):
    # a two-step field is nowhere near opaque: stop rays at their first haze so the rounds skip something; the torch
    # hash backend, whose pass is not fused (rounds apply to it)
    flags = (
        "--first-samples", "0", "4", "--", "--pipeline.model.occupancy.early-stop-eps=0.9999",
        "--pipeline.model.hash-backend=torch",
    )  # fmt: skip
    results, report = run_step_benchmark("culling_rounds.py", tiny_scene, tmp_path, *flags)
    plain, rounds = results["0"], results["4"]
    assert plain["evaluated"] == plain["candidates"] > 0 and rounds["evaluated"] < rounds["candidates"]
    assert rounds["kept"] == plain["kept"] and rounds["candidates"] == plain["candidates"]
    assert "| 4 |" in report


def test_culling_prefetch_bench_times_both_ways_on_the_same_kept_samples(tiny_scene, tmp_path):
    """The script checks that both ways keep the same samples before it times them (it exits non-zero otherwise)."""
    results, report = run_step_benchmark("culling_prefetch.py", tiny_scene, tmp_path, "--rounds", "1")
    assert list(results) == ["next step planned ahead", "each step planned when reached"]
    assert results["next step planned ahead"]["kept"] > 0
    assert "| each step planned when reached |" in report
