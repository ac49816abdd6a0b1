"""No run deletes another's checkpoints: a run folder that holds an earlier run's checkpoints is refused in one line
unless the run resumes them (--load-dir) or replaces them (--overwrite-checkpoints); two processes cannot train into
one folder at once; --save-only-latest-checkpoint deletes only this run's own checkpoints."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from accel_test_helpers import assert_one_line_error, make_trainer, quiet_train_flags
from nerfstudio_accel.engine.run_claim import claim_run_folder
from nerfstudio_accel.errors import ConfigError

HOLD_THE_FOLDER = """
import sys
from pathlib import Path
from nerfstudio_accel.engine.run_claim import claim_run_folder
claim_run_folder(Path(sys.argv[1]), Path(sys.argv[1]) / "nerfstudio_models", resumes=False, overwrite=False)
print("claimed", flush=True)
sys.stdin.read()
"""


def test_a_folder_another_process_trains_into_is_refused(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_FOLDER, str(run_dir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "claimed"
        with pytest.raises(ConfigError, match="another ns-train is training into .*; wait for it to finish"):
            claim_run_folder(run_dir, run_dir / "nerfstudio_models", resumes=False, overwrite=False)
    finally:
        holder.communicate("", timeout=60)
    claim_run_folder(run_dir, run_dir / "nerfstudio_models", resumes=False, overwrite=False)  # free once it ended


def test_save_only_latest_deletes_only_this_runs_checkpoints(tiny_scene: Path, tmp_path: Path) -> None:
    trainer = make_trainer(tiny_scene, tmp_path, max_num_iterations=4, steps_per_save=1000)
    trainer.train()
    own = trainer.checkpoint_dir / "step-000000003.ckpt"
    foreign = trainer.checkpoint_dir / "step-000000100.ckpt"  # another writer's, however it got there
    shutil.copy(own, foreign)
    trainer.save_checkpoint(7)
    assert sorted(path.name for path in trainer.checkpoint_dir.glob("step-*.ckpt")) == [
        "step-000000007.ckpt",
        "step-000000100.ckpt",
    ]


@pytest.mark.slow
def test_a_rerun_into_a_finished_runs_folder_is_refused_until_asked(run_cli, tiny_scene: Path, tmp_path: Path) -> None:
    """The same ns-train command twice (a fixed --timestamp): the second stops in one line and the first run's
    checkpoint stays; with --overwrite-checkpoints it trains anew; with --load-dir it resumes."""
    models = tmp_path / "exp" / "accel-ngp" / "run" / "nerfstudio_models"

    def ns_train(iterations: int, *extra: str):
        flags = [*quiet_train_flags(iterations, tmp_path), "--experiment-name", "exp", "--timestamp", "run"]
        return run_cli(
            "ns-train",
            "accel-ngp",
            "--machine.device-type",
            "cpu",
            *flags,
            *extra,
            "blender-data",
            "--data",
            tiny_scene,
        )

    code, out, err = ns_train(4)
    assert code == 0, (out + err)[-3000:]
    first = (models / "step-000000003.ckpt").read_bytes()

    code, out, err = ns_train(2)
    assert_one_line_error(
        code, out, err, "holds another run's checkpoints", "--load-dir", "--overwrite-checkpoints True"
    )
    assert (models / "step-000000003.ckpt").read_bytes() == first

    code, out, err = ns_train(6, "--load-dir", str(models))
    assert code == 0 and sorted(path.name for path in models.glob("step-*.ckpt")) == ["step-000000005.ckpt"]

    code, out, err = ns_train(2, "--overwrite-checkpoints", "True")
    assert code == 0, (out + err)[-3000:]
    assert sorted(path.name for path in models.glob("step-*.ckpt")) == ["step-000000001.ckpt"]
