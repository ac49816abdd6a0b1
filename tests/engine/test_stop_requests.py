"""Ctrl-C and SIGTERM while training: the step under way finishes, a checkpoint is saved, one line says how to
resume, and the process exits with the signal's status; a second signal stops at once.

The handlers are tested with real signals sent to this process; the whole path with a real SIGINT sent to an
``ns-train`` process on a tiny scene, whose checkpoint ``--load-dir`` resumes and ``ns-eval`` opens.
"""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import List

import pytest

from accel_test_helpers import quiet_train_flags
from conftest import _ANSI, cli_env, console_script
from nerfstudio_accel.engine.stop_requests import StoppedAtOnce, StopRequests, TrainingInterrupted, exit_status

# --- the handlers, with signals sent to this process ---------------------------------------------------


def deliver(signum: int) -> None:
    """Send ``signum`` to this process; ``signal.raise_signal`` runs its Python handler before returning."""
    signal.raise_signal(signum)


def test_first_signal_asks_for_a_stop_at_the_next_step() -> None:
    before = signal.getsignal(signal.SIGTERM)
    resumed: List[bool] = []
    requests = StopRequests(on_first=lambda: resumed.append(True), on_second=lambda: "none")
    requests.install()
    try:
        requests.check(3)  # nothing asked yet: training goes on
        deliver(signal.SIGTERM)
        assert requests.signum == signal.SIGTERM and resumed == [True]
        with pytest.raises(TrainingInterrupted) as stopped:
            requests.check(4)
        assert (stopped.value.step, stopped.value.signum) == (4, signal.SIGTERM)
    finally:
        requests.restore()
    assert signal.getsignal(signal.SIGTERM) is before


def test_second_signal_stops_at_once_with_the_signals_status(capsys: pytest.CaptureFixture) -> None:
    before = signal.getsignal(signal.SIGINT)
    requests = StopRequests(on_first=lambda: None, on_second=lambda: "the last checkpoint is step-9.ckpt")
    requests.install()
    try:
        deliver(signal.SIGINT)
        with pytest.raises(StoppedAtOnce) as stopped:
            deliver(signal.SIGINT)
    finally:
        requests.restore()
    assert isinstance(stopped.value, KeyboardInterrupt)  # no except Exception on the way catches it
    assert exit_status(stopped.value.signum) == 130
    assert signal.getsignal(signal.SIGINT) is before  # restored by the second signal itself
    out = capsys.readouterr().out
    assert "Ctrl-C again: stopped at once, without saving; the last checkpoint is step-9.ckpt" in out


def test_handlers_are_installed_only_in_the_main_thread() -> None:
    requests = StopRequests(on_first=lambda: None, on_second=lambda: "none")
    worker = threading.Thread(target=requests.install)
    worker.start()
    worker.join()
    assert not requests.installed


# --- ns-train, interrupted ----------------------------------------------------------------------------------

STOPPED = re.compile(r"Ctrl-C: stopped after step (\d+); saved (\S+\.ckpt)\. Resume: .* --load-dir (\S+)")


def ns_train(output_dir: Path, scene: Path, iterations: int, *extra: str) -> List[str]:
    flags = quiet_train_flags(iterations, output_dir, steps_per_save=5)
    run = ("--machine.device-type", "cpu", "--experiment-name", "exp", "--timestamp", "run")
    return [console_script("ns-train"), "accel-ngp", *flags, *run, *extra, "blender-data", "--data", str(scene)]


@pytest.mark.slow
def test_ctrl_c_saves_the_step_and_load_dir_resumes_it(run_cli, tiny_scene: Path, tmp_path: Path) -> None:
    out_dir, log = tmp_path / "out", tmp_path / "train.log"
    models = out_dir / "exp" / "accel-ngp" / "run" / "nerfstudio_models"
    with open(log, "w") as output:
        process = subprocess.Popen(
            ns_train(out_dir, tiny_scene, 100_000),
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=cli_env(),
        )
        try:
            deadline = time.monotonic() + 600  # an upper bound for a slow machine, not a timing
            while not list(models.glob("step-*.ckpt")) and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
            assert process.poll() is None and list(models.glob("step-*.ckpt")), log.read_text()[-3000:]
            first_saved = int(next(models.glob("step-*.ckpt")).stem.split("-")[1])
            process.send_signal(signal.SIGINT)
            code = process.wait(timeout=300)
        finally:
            if process.poll() is None:
                process.kill()
    text = _ANSI.sub("", log.read_text())
    assert code == 130, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    match = STOPPED.search(text)
    assert match, text[-3000:]
    step, saved, load_dir = int(match.group(1)), Path(match.group(2)), Path(match.group(3))
    assert step >= first_saved and saved == models / f"step-{step:09d}.ckpt" and load_dir == models
    assert sorted(models.glob("step-*.ckpt")) == [saved]

    code, out, err = run_cli("ns-train", *ns_train(out_dir, tiny_scene, step + 3, "--load-dir", str(models))[1:])
    assert code == 0, (out + err)[-3000:]
    assert f"Resuming from {saved} (step {step})" in " ".join(out.split()), out[-3000:]
    assert (models / f"step-{step + 2:09d}.ckpt").is_file()

    metrics = tmp_path / "eval.json"
    config = out_dir / "exp" / "accel-ngp" / "run" / "config.yml"
    code, out, err = run_cli("ns-eval", "--load-config", config, "--output-path", metrics)
    assert code == 0, (out + err)[-3000:]
    assert math.isfinite(json.loads(metrics.read_text())["results"]["psnr"])
