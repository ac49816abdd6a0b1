"""ns-accel-bench's outputs from runs: medians and spread over repeats, status rows, the three files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest
from PIL import Image

from nerfstudio_accel.bench.configs import MethodSpec
from nerfstudio_accel.bench.report import curves_of_results, markdown_table, summarize_method, write_outputs


def fake_run(repeat: int, psnr: float, ms_per_step: float) -> Dict:
    """A successful run as the worker reports it (two curve points)."""
    return {
        "repeat": repeat, "seed": 41 + repeat, "status": "ok", "log": f"logs/m-{repeat}.log",
        "steps": int(1000 / ms_per_step), "train_seconds": 1.0, "ms_per_step": ms_per_step, "rays_per_second": 4096.0,
        "samples_per_step": None, "peak_memory_mb": 100.0 + repeat, "peak_memory_kind": "process_peak_rss", "graph_mb": 10.0,
        "hard_mining_fraction": 0.5,
        "results": {"psnr": psnr, "psnr_std": 1.0, "ssim": 0.9, "ssim_std": 0.01, "num_rays_per_sec": 1e4, "num_rays_per_sec_std": 1.0, "fps": 1.0, "fps_std": 0.1},
        "curve": [{"seconds": 0.5, "step": 5, "psnr": psnr - 2.0, "ssim": 0.8}, {"seconds": 1.0, "step": 10, "psnr": psnr, "ssim": 0.9}],
    }  # fmt: skip


META = {
    "scene": "tiny", "data": "tiny", "dataparser": "blender-data", "device": "cpu", "device_name": "cpu", "budget_seconds": 1.0,
    "max_steps": None, "eval_points": 2, "downscale": 1.0, "repeats": 3, "seed": 42, "threads": 2,
    "versions": {"torch": "t", "nerfstudio": "n", "nerfacc": "a", "nerfstudio-accel": "x"}, "date": "d", "command": "ns-accel-bench ...",
}  # fmt: skip


def test_repeats_give_medians_and_spread_in_an_ns_eval_shaped_entry():
    runs = [fake_run(1, 30.0, 10.0), fake_run(2, 28.0, 20.0), fake_run(3, 31.0, 12.5)]
    entry = summarize_method(MethodSpec.parse("m:--flag=1"), "tiny", runs)
    assert {"experiment_name", "method_name", "checkpoint", "results"} <= set(entry)
    assert entry["method_name"] == "m:--flag=1" and entry["status"] == "ok" and "reason" not in entry
    assert entry["results"]["psnr"] == 30.0
    assert entry["summary"]["psnr"] == {"median": 30.0, "min": 28.0, "max": 31.0}
    assert entry["summary"]["ms_per_step"] == {"median": 12.5, "min": 10.0, "max": 20.0}
    assert "samples_per_step" not in entry["summary"]  # None in the runs: the model reports no samples
    assert [point["psnr"] for point in entry["curve"]] == [28.0, 30.0]
    assert (entry["curve"][0]["psnr_min"], entry["curve"][0]["psnr_max"]) == (26.0, 29.0)
    assert entry["runs"] == runs


def test_failed_and_unsupported_methods_keep_a_row_with_the_reason():
    failed = {"repeat": 2, "seed": 43, "status": "failed", "reason": "ValueError: boom", "log": "logs/m-2.log"}
    partly = summarize_method(MethodSpec.parse("m"), "tiny", [fake_run(1, 30.0, 10.0), failed])
    assert partly["status"] == "ok" and partly["reason"] == "1 of 2 repeats failed: ValueError: boom"
    assert partly["results"]["psnr"] == 30.0
    broken = summarize_method(MethodSpec.parse("b"), "tiny", [failed])
    assert broken["status"] == "failed" and broken["reason"] == "ValueError: boom" and broken["results"] == {}
    skipped = summarize_method(MethodSpec.parse("instant-ngp"), "tiny", [], unsupported="needs a CUDA device")
    assert skipped["status"] == "unsupported" and skipped["reason"] == "needs a CUDA device"
    table = markdown_table(META, [partly, broken, skipped])
    results_table = table.split("PSNR (dB) against training time")[0]
    rows = {line.split("|")[1].strip(): line for line in results_table.splitlines() if line.startswith("| `")}
    assert "unsupported: needs a CUDA device" in rows["`instant-ngp`"]
    assert "failed: ValueError: boom" in rows["`b`"]
    assert "30.00" in rows["`m`"] and "1 of 2 repeats failed" in rows["`m`"]


def test_the_header_names_the_openmp_wait_policy_the_runs_had():
    assert "2 CPU threads (OpenMP threads: OMP_WAIT_POLICY=PASSIVE)." in markdown_table(
        {**META, "openmp_wait": "OMP_WAIT_POLICY=PASSIVE"}, []
    )
    assert "2 CPU threads. Each method" in markdown_table(META, [])  # results.json of older versions: no such key


def test_table_shows_median_with_min_max(tmp_path: Path):
    entry = summarize_method(
        MethodSpec.parse("m"), "tiny", [fake_run(1, 30.0, 10.0), fake_run(2, 28.0, 20.0), fake_run(3, 31.0, 12.5)]
    )
    row = next(line for line in markdown_table(META, [entry]).splitlines() if line.startswith("| `m`"))
    assert "30.00 (28.00–31.00)" in row and "12.5 (10.0–20.0)" in row and "0.900 |" in row


def test_outputs_are_written_and_readable(tmp_path: Path):
    entries = [
        summarize_method(MethodSpec.parse("m"), "tiny", [fake_run(1, 30.0, 10.0), fake_run(2, 28.0, 20.0)]),
        summarize_method(MethodSpec.parse("instant-ngp"), "tiny", [], unsupported="needs a CUDA device"),
    ]
    write_outputs(tmp_path / "out", META, entries)
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["meta"] == META and [m["method_name"] for m in saved["methods"]] == ["m", "instant-ngp"]
    assert "| `m` |" in (tmp_path / "out" / "results.md").read_text()
    with Image.open(tmp_path / "out" / "psnr_vs_time.png") as image:
        assert image.format == "PNG" and image.size[0] > 300


@pytest.mark.parametrize("repeats", [1, 3])
def test_plot_handles_single_and_repeated_runs(tmp_path: Path, repeats: int):
    entry = summarize_method(MethodSpec.parse("m"), "tiny", [fake_run(i + 1, 30.0 - i, 10.0) for i in range(repeats)])
    write_outputs(tmp_path, {**META, "repeats": repeats}, [entry])
    assert (tmp_path / "psnr_vs_time.png").stat().st_size > 1000


def test_samples_per_ray_and_partial_evaluations_are_shown():
    """samples/ray (the final evaluation's mean over views) gets a column when a method reports it; a curve
    point scored on part of the test split (--eval-views) says on how many views."""
    run = fake_run(1, 30.0, 10.0)
    run["results"].update(num_samples_per_ray=12.25, num_samples_per_ray_std=3.0)
    run["curve"][0].update(views=5, views_total=20)
    run["curve"][1].update(views=20, views_total=20)
    entry = summarize_method(MethodSpec.parse("m"), "tiny", [run])
    plain = summarize_method(MethodSpec.parse("nerfacto"), "tiny", [fake_run(1, 25.0, 10.0)])
    assert entry["summary"]["num_samples_per_ray"]["median"] == 12.25 and "num_samples_per_ray" not in plain["summary"]
    assert (entry["curve"][0]["views"], entry["curve"][0]["views_total"]) == (5, 20)
    table = markdown_table({**META, "eval_views": 5}, [entry, plain])
    header = next(line for line in table.splitlines() if line.startswith("| method | steps"))
    cells = {name: index for index, name in enumerate(part.strip() for part in header.split("|"))}
    results_table = table.split("PSNR (dB) against training time")[0]
    rows = {
        line.split("|")[1].strip(): line.split("|") for line in results_table.splitlines() if line.startswith("| `")
    }
    assert (
        rows["`m`"][cells["samples/ray"]].strip() == "12.2" and rows["`nerfacto`"][cells["samples/ray"]].strip() == "—"
    )
    assert rows["`m`"][cells["train rays/s"]].strip() == "4096"
    assert "28.00 @ 0 s (5), psnr on 5 of 20 views |" in table and "30.00 @ 1 s (10) |" in table
    assert "score 5 evenly spaced test views" in table


def test_curves_from_several_results_carry_labels_and_offsets(tmp_path: Path):
    """benchmarks/psnr_vs_time.py's inputs: one curve per method that ran, shifted by the given seconds."""
    runs = [fake_run(1, 30.0, 10.0), fake_run(2, 28.0, 20.0)]
    two = [summarize_method(MethodSpec.parse(name), "tiny", runs) for name in ("a", "b")]
    write_outputs(tmp_path / "two", {**META, "downscale": 4.0}, two)
    one = [summarize_method(MethodSpec.parse("a"), "tiny", runs)]
    write_outputs(tmp_path / "one", META, one)
    labelled = curves_of_results(tmp_path / "two" / "results.json", "lego", offset_seconds=95.0)
    assert [curve.label for curve in labelled] == ["lego: a", "lego: b"]
    assert labelled[0].seconds == [95.5, 96.0]
    unlabelled = curves_of_results(tmp_path / "two" / "results.json")
    assert [curve.label for curve in unlabelled] == ["a, downscale 4", "b, downscale 4"]
    assert unlabelled[0].seconds == [0.5, 1.0]
    assert [curve.label for curve in curves_of_results(tmp_path / "one" / "results.json", "cold")] == ["cold"]
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "psnr_vs_time.py"
    command = [sys.executable, str(script), "--out", str(tmp_path / "both.png"), "--title", "t"]
    done = subprocess.run(
        command + ["--curve", str(tmp_path / "two" / "results.json"), "", "0"]
        + ["--curve", str(tmp_path / "one" / "results.json"), "warm", "95"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0 and "3 curves" in done.stdout, done.stderr
    with Image.open(tmp_path / "both.png") as image:
        assert image.format == "PNG"
    failed = summarize_method(MethodSpec.parse("f"), "tiny", [], unsupported="needs a CUDA device")
    write_outputs(tmp_path / "failed", META, [failed])
    empty = subprocess.run(
        command + ["--curve", str(tmp_path / "failed" / "results.json"), "x", "0"], capture_output=True, text=True
    )
    assert empty.returncode == 2 and empty.stderr.strip().endswith("nothing to plot")
    missing = subprocess.run(
        command + ["--curve", str(tmp_path / "none.json"), "x", "0"], capture_output=True, text=True
    )
    assert missing.returncode == 2 and missing.stderr.strip().endswith(
        "give the results.json that ns-accel-bench wrote"
    )
