"""``ns-accel-bench`` as a user types it: a tiny-budget run writes its three files, unsupported and
failing methods get a row with the reason, and bad arguments stop it with one line before any training;
``--eval-views`` and ``--dataparser colmap`` reach the runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
import torch
from PIL import Image

from nerfstudio_accel.bench import cli
from nerfstudio_accel.bench.cli import main, parse_arguments

NERFACC_ON_CPU = "accel-ngp:--pipeline.model.occupancy.backend=nerfacc"


def bench_error(capsys, argv: List[str]) -> Tuple[int, str]:
    """Exit code and stderr of an in-process ``ns-accel-bench`` expected to refuse ``argv``."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    return code, capsys.readouterr().err


@pytest.mark.slow
def test_tiny_budget_bench_writes_results_table_and_plot(tiny_scene: Path, tmp_path: Path, run_cli):
    out = tmp_path / "bench"
    code, stdout, stderr = run_cli(
        "ns-accel-bench", "--data", tiny_scene, "--methods", f"accel-ngp,instant-ngp,{NERFACC_ON_CPU}",
        "--budget-seconds", "2", "--eval-points", "2", "--eval-views", "1", "--repeats", "2", "--device", "cpu", "--out", out, timeout=600,
    )  # fmt: skip
    assert code == 1, stderr  # one method failed; the others still ran and were written
    assert "Traceback" not in stdout + stderr
    saved = json.loads((out / "results.json").read_text())
    assert saved["meta"]["device"] == "cpu" and saved["meta"]["repeats"] == 2 and saved["meta"]["eval_views"] == 1
    ngp, ingp, nerfacc = saved["methods"]

    assert ngp["method_name"] == "accel-ngp" and ngp["status"] == "ok" and ngp["experiment_name"] == tiny_scene.name
    assert [run["seed"] for run in ngp["runs"]] == [42, 43]
    for run in ngp["runs"]:
        assert run["status"] == "ok" and (out / run["log"]).is_file()
        assert run["train_seconds"] >= 2.0 and run["steps"] >= 1  # the budget is spent, evaluation aside
        assert [point["step"] for point in run["curve"]] == sorted({point["step"] for point in run["curve"]})
        assert run["curve"][-1]["step"] == run["steps"] + 1 and len(run["curve"]) <= 2  # + the untimed warm-up step
        assert run["warmup_seconds"] > 0 and run["skipped_steps"] == 0
        assert run["peak_memory_kind"] == "process_peak_rss" and run["peak_memory_mb"] > 0 and run["graph_mb"] > 0
        assert 0.0 < run["hard_mining_fraction"] <= 1.0 and run["rays_per_second"] > 0 and run["samples_per_step"] > 0
        # --eval-views 1: points before the last score 1 of the 2 test views, the last scores both.
        assert [(point["views"], point["views_total"]) for point in run["curve"]] == [(1, 2)] * (
            len(run["curve"]) - 1
        ) + [(2, 2)]
        assert all(point["num_samples_per_ray"] > 0 for point in run["curve"])
    results = ngp["results"]
    assert 5.0 < results["psnr"] < 60.0 and 0.0 < results["ssim"] <= 1.0
    assert results["num_rays_per_sec"] > 0 and results["fps"] > 0 and results["psnr_std"] >= 0
    assert results["num_samples_per_ray"] > 0 and "views" not in results  # ns-eval's keys only
    assert ngp["summary"]["num_samples_per_ray"]["min"] <= results["num_samples_per_ray"]
    assert ngp["summary"]["psnr"]["min"] <= results["psnr"] <= ngp["summary"]["psnr"]["max"]

    assert ingp["status"] == "unsupported" and "CUDA device" in ingp["reason"] and ingp["runs"] == []
    assert nerfacc["status"] == "failed" and "sampler backend 'nerfacc' cannot run here" in nerfacc["reason"]
    log = (out / nerfacc["runs"][0]["log"]).read_text()  # refused as its config was resolved, before any data is read
    assert "error: sampler backend 'nerfacc' cannot run here" in log and "Saving checkpoints to" not in log

    table = (out / "results.md").read_text()
    for line in (
        "| `accel-ngp` |",
        "| `instant-ngp` |",
        f"| `{NERFACC_ON_CPU}` |",
        "unsupported: nerfstudio's instant-ngp",
    ):
        assert line in table
    assert f"{results['psnr']:.2f}" in table
    with Image.open(out / "psnr_vs_time.png") as image:
        assert image.format == "PNG"
    assert "not run on cpu" in stderr and "failed: sampler backend 'nerfacc'" in stderr


def test_missing_required_argument_is_one_line(capsys, tiny_scene: Path):
    code, err = bench_error(capsys, ["--data", str(tiny_scene), "--methods", "accel-ngp"])
    assert (
        code == 2
        and err.strip()
        == "ns-accel-bench: error: the following arguments are required: --out (see ns-accel-bench --help)"
    )


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--budget-seconds", "0"], "--budget-seconds must be positive, got 0"),
        (["--budget-seconds", "nan"], "--budget-seconds must be positive, got nan"),
        (["--repeats", "0"], "--repeats must be at least 1, got 0"),
        (["--eval-views", "0"], "--eval-views must be at least 1, got 0"),
        (
            ["--dataparser", "colmpa"],
            "argument --dataparser: invalid choice: 'colmpa' (choose from 'auto', 'blender-data', 'nerfstudio-data', 'colmap')",
        ),
        (["--downscale", "0.5"], "--downscale must be at least 1"),
        (["--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
    ],
)
def test_bad_numbers_and_choices_are_one_line(capsys, tiny_scene: Path, tmp_path: Path, extra, message):
    code, err = bench_error(
        capsys, ["--data", str(tiny_scene), "--methods", "accel-ngp", "--out", str(tmp_path), *extra]
    )
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "methods, message",
    [
        ("accel-ngpp", "unknown method 'accel-ngpp' in --methods; did you mean 'accel-ngp'?"),
        ("accel-ngp:--pipeline.hard-mining=Flase", "invalid choice 'Flase'"),
    ],
)
def test_bad_methods_stop_before_training_with_one_line(capsys, tiny_scene: Path, tmp_path: Path, methods, message):
    out = tmp_path / "out"
    code, err = bench_error(capsys, ["--data", str(tiny_scene), "--methods", f"accel-ngp,{methods}", "--out", str(out)])
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()  # nothing ran, nothing was written


def test_bad_data_folder_is_one_line(capsys, tmp_path: Path):
    code, err = bench_error(
        capsys, ["--data", str(tmp_path / "nope"), "--methods", "accel-ngp", "--out", str(tmp_path / "out")]
    )
    assert (
        code == 2
        and err.strip()
        == f"ns-accel-bench: error: --data {tmp_path / 'nope'} is not a folder; point it at a scene (Blender, nerfstudio or COLMAP format)"
    )


def test_bad_scene_files_stop_the_bench_before_training(capsys, tiny_scene: Path, tmp_path: Path):
    """The checks ns-train runs for accel methods run once for every method: one line, nothing trained."""
    scene = tmp_path / "scene"
    shutil.copytree(tiny_scene, scene)
    (scene / "test" / "r_1.png").write_bytes(b"not a PNG")
    code, err = bench_error(capsys, ["--data", str(scene), "--methods", "nerfacto", "--out", str(tmp_path / "out")])
    assert (
        code == 2
        and "cannot be decoded" in err
        and str(scene / "test" / "r_1.png") in err
        and len(err.strip().splitlines()) == 1
    )
    assert not (tmp_path / "out").exists()


def fake_worker(requests: List[Dict]):
    """A stand-in for ``run_worker`` that records each request and reports a run with a partial first point."""

    def run_worker(request: Dict, log_path: Path, on_event) -> Dict:
        requests.append(request)
        on_event({"event": "eval", "seconds": 0.5, "step": 3, "psnr": 10.0, "views": 1, "views_total": 2})
        return {
            "status": "ok", "steps": 5, "train_seconds": 1.0, "ms_per_step": 200.0, "warmup_seconds": 0.1, "skipped_steps": 0,
            "rays_per_second": 1000.0, "samples_per_step": 5000.0, "peak_memory_mb": 1.0, "peak_memory_kind": "process_peak_rss",
            "graph_mb": 1.0, "results": {"psnr": 12.0, "psnr_std": 0.0, "ssim": 0.5, "ssim_std": 0.0, "num_samples_per_ray": 6.5, "num_samples_per_ray_std": 1.0},
            "curve": [{"seconds": 0.5, "step": 3, "psnr": 10.0, "views": 1, "views_total": 2}, {"seconds": 1.0, "step": 6, "psnr": 12.0, "views": 2, "views_total": 2}],
        }  # fmt: skip

    return run_worker


def test_eval_views_reach_the_worker_request_and_the_report(capsys, monkeypatch, tiny_scene: Path, tmp_path: Path):
    requests: List[Dict] = []
    monkeypatch.setattr(cli, "run_worker", fake_worker(requests))
    out = tmp_path / "out"
    assert (
        main(
            [
                "--data",
                str(tiny_scene),
                "--methods",
                "accel-ngp",
                "--eval-views",
                "1",
                "--budget-seconds",
                "1",
                "--device",
                "cpu",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert [request["eval_views"] for request in requests] == [1]
    assert "(1 of 2 views)" in capsys.readouterr().err  # the evaluation's progress line
    saved = json.loads((out / "results.json").read_text())
    assert saved["meta"]["eval_views"] == 1 and saved["methods"][0]["curve"][0]["views"] == 1
    table = (out / "results.md").read_text()
    assert "10.00 @ 0 s (3), psnr on 1 of 2 views |" in table and "12.00 @ 1 s (6) |" in table
    assert "samples/ray" in table and "| 6.5 |" in table
    requests.clear()
    main(
        [
            "--data",
            str(tiny_scene),
            "--methods",
            "accel-ngp",
            "--budget-seconds",
            "1",
            "--device",
            "cpu",
            "--out",
            str(out),
            "--overwrite",
        ]
    )
    assert requests[0]["eval_views"] is None  # default: every view at every evaluation


def test_colmap_is_a_dataparser_choice(tmp_path: Path):
    args = parse_arguments(
        ["--data", str(tmp_path), "--methods", "accel-ngp", "--dataparser", "colmap", "--out", str(tmp_path / "out")]
    )
    assert args.dataparser == "colmap" and args.eval_views is None


def test_existing_results_are_kept_without_overwrite(capsys, tiny_scene: Path, tmp_path: Path):
    (tmp_path / "results.json").write_text("earlier results")
    code, err = bench_error(capsys, ["--data", str(tiny_scene), "--methods", "accel-ngp", "--out", str(tmp_path)])
    assert code == 2 and "already holds results.json; pass --overwrite" in err
    assert (tmp_path / "results.json").read_text() == "earlier results"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given when no CUDA device is present")
def test_cuda_without_a_gpu_is_one_line(capsys, tiny_scene: Path, tmp_path: Path):
    code, err = bench_error(
        capsys, ["--data", str(tiny_scene), "--methods", "accel-ngp", "--device", "cuda", "--out", str(tmp_path)]
    )
    assert code == 2 and "torch sees no CUDA device" in err and len(err.strip().splitlines()) == 1


def test_console_script_reports_bad_input_in_one_line(run_cli, tmp_path: Path):
    code, stdout, stderr = run_cli(
        "ns-accel-bench", "--data", tmp_path / "nope", "--methods", "accel-ngp", "--out", tmp_path / "out"
    )
    assert code == 2 and stderr.strip().startswith("ns-accel-bench: error: --data") and "Traceback" not in stderr


def test_the_worker_trains_this_package_whatever_the_working_directory(tmp_path: Path):
    """Started from a directory holding another ``nerfstudio_accel`` (another checkout's root), the worker still
    imports the package the bench runs from (``python -m`` would import the other one)."""
    import subprocess

    decoy = tmp_path / "nerfstudio_accel"
    (decoy / "bench").mkdir(parents=True)
    (decoy / "__init__.py").write_text("raise RuntimeError('the decoy package was imported')\n")
    (decoy / "bench" / "__init__.py").write_text("")
    command = cli.worker_command({})
    finished = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "decoy" not in finished.stderr
    assert str(Path(cli.__file__).with_name("worker.py")) in finished.stderr  # its traceback: {} is no request
    assert finished.returncode != 0


@pytest.mark.parametrize("chosen", [None, "ACTIVE"])
def test_the_worker_process_starts_with_openmp_threads_waiting_passively(chosen, monkeypatch, tmp_path: Path):
    """Unless the user chose a wait policy: PyTorch's OpenMP threads would spin against the CPU kernels'."""
    import sys

    report = (
        "import json, os; print(json.dumps({'event': 'done', 'result': {'wait': os.environ.get('OMP_WAIT_POLICY')}}))"
    )
    monkeypatch.setattr(cli, "worker_command", lambda request: [sys.executable, "-c", report])
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    if chosen is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", chosen)
    assert cli.run_worker({}, tmp_path / "run.log", lambda event: None) == {"status": "ok", "wait": chosen or "PASSIVE"}


def test_repeats_run_every_method_in_turn(monkeypatch, tiny_scene: Path, tmp_path: Path):
    """Repeat by repeat, each method once: a machine that drifts during the benchmark touches every method alike."""
    requests: List[Dict] = []
    monkeypatch.setattr(cli, "run_worker", fake_worker(requests))
    out = tmp_path / "out"
    no_mining = "accel-ngp:--pipeline.hard-mining=False"
    methods = f"accel-ngp,{no_mining},instant-ngp"  # instant-ngp needs CUDA: reported, never run
    argv = ["--data", str(tiny_scene), "--methods", methods, "--repeats", "2", "--seed", "7", "--budget-seconds", "1"]
    assert main([*argv, "--device", "cpu", "--out", str(out)]) == 0
    order = [(request["label"], request["seed"]) for request in requests]
    assert order == [("accel-ngp", 7), (no_mining, 7), ("accel-ngp", 8), (no_mining, 8)]
    saved = json.loads((out / "results.json").read_text())
    assert [entry["method_name"] for entry in saved["methods"]] == ["accel-ngp", no_mining, "instant-ngp"]
    assert [run["seed"] for run in saved["methods"][0]["runs"]] == [7, 8]
    assert saved["methods"][2]["status"] == "unsupported"
