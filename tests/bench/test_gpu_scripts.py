"""The GPU scripts parse and refuse bad use here; benchmarks/step_ops.py counts a step's operators and syncs
on CPU, benchmarks/step_profile.py reports a step's phases, benchmarks/culling_rounds.py the culling pass's
counts, benchmarks/culling_prefetch.py the fused kernel both ways on the same recorded calls, and benchmarks/gradient_checkpointing.py graph memory with checkpointing off and on (shapes of the
reports, counts and memory only: never timings)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from accel_test_helpers import run_step_benchmark

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = ["benchmarks/gpu_report.sh", "benchmarks/gpu_lego.sh"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_gpu_script_parses(script):
    done = subprocess.run(["bash", "-n", script], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_gpu_report_needs_the_device_tools_out_folder():
    env = {key: value for key, value in os.environ.items() if key != "OUT"}
    done = subprocess.run(
        ["bash", "benchmarks/gpu_report.sh", "checks"], cwd=REPO, capture_output=True, text=True, env=env
    )
    assert done.returncode != 0 and "OUT" in done.stderr


@pytest.mark.parametrize("script", SCRIPTS)
def test_gpu_scripts_refuse_an_unknown_part(script, tmp_path):
    done = subprocess.run(
        ["bash", script, "everything"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "OUT": str(tmp_path)},
    )
    assert done.returncode == 2 and "usage" in done.stderr
    assert not any(tmp_path.iterdir())  # refused before installing anything


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
