"""A user's own capture, end to end: a folder of photos without poses (rendered from the noise-textured
scene of :mod:`nerfstudio_accel.scenes.photo_scene`) through nerfstudio's own ``ns-process-data images``,
which runs COLMAP (SIFT features, exhaustive matching, mapping, all on the CPU), then a short
``ns-train accel-ngp --data OUT`` on what it wrote, as the README tells a user to.

Needs ``colmap`` and ``ffmpeg`` on PATH (Debian: ``apt-get install colmap ffmpeg``; ns-process-data copies
the photos with ffmpeg); skipped, saying so, without them. COLMAP's registration of these photos was
deterministic in count: three runs each registered every photo (``docs/captured_scenes.md``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from nerfstudio_accel.scenes.photo_scene import PhotoSceneSpec, generate_photos
from nerfstudio_accel.scenes.unbounded_scene import arc_camera_positions

SPEC = PhotoSceneSpec(num_train=20, seed=0)
"""20 photos at 256x192, 18 degrees apart around the object."""
STEPS = 10

pytestmark = pytest.mark.skipif(
    shutil.which("colmap") is None or shutil.which("ffmpeg") is None,
    reason="ns-process-data needs colmap and ffmpeg on PATH (apt-get install colmap ffmpeg)",
)


def camera_centre_error(found: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Distance of each of ``found`` (n, 3), once moved onto ``truth`` (n, 3) by the best similarity
    (rotation, scale, shift; Umeyama's least squares), from its counterpart: (n,)."""
    found_mean, truth_mean = found.mean(axis=0), truth.mean(axis=0)
    found_centred, truth_centred = found - found_mean, truth - truth_mean
    u, singular, vt = np.linalg.svd(truth_centred.T @ found_centred)
    sign = np.diag([1.0, 1.0, np.sign(np.linalg.det(u @ vt))])
    rotation = u @ sign @ vt
    scale = np.trace(np.diag(singular) @ sign) / (found_centred**2).sum()
    return np.linalg.norm(scale * found_centred @ rotation.T - truth_centred, axis=1)


@pytest.mark.slow
def test_photos_through_ns_process_data_then_ns_train(run_cli, tmp_path: Path):
    photos = generate_photos(tmp_path / "photos", SPEC)
    capture = tmp_path / "capture"

    code, out, err = run_cli(
        "ns-process-data", "images", "--data", photos, "--output-dir", capture,
        "--no-gpu", "--matching-method", "exhaustive", "--sfm-tool", "colmap", timeout=400,
    )  # fmt: skip

    assert code == 0, (out + err)[-3000:]
    meta = json.loads((capture / "transforms.json").read_text())
    assert len(meta["frames"]) == SPEC.num_train  # COLMAP registered every photo
    # Poses and focal length as rendered: ns-process-data names photo i frame_{i+1:05d} in sorted order.
    index = [int(Path(frame["file_path"]).stem.split("_")[1]) - 1 for frame in meta["frames"]]
    centres = np.array([np.array(frame["transform_matrix"])[:3, 3] for frame in meta["frames"]])
    error = camera_centre_error(centres, arc_camera_positions(SPEC)[index])
    assert error.max() < 0.02 * SPEC.camera_distance, error
    assert meta["fl_x"] == pytest.approx(SPEC.focal, rel=0.02)

    code, out, err = run_cli(
        "ns-train", "accel-ngp", "--machine.device-type", "cpu", "--vis", "tensorboard",
        "--max-num-iterations", str(STEPS), "--steps-per-eval-image", "100000", "--steps-per-eval-batch", "100000",
        "--pipeline.target-num-samples", "4096", "--pipeline.max-num-rays-per-batch", "256",
        "--output-dir", tmp_path / "out", "--experiment-name", "exp", "--timestamp", "run", "--data", capture,
        timeout=400,
    )  # fmt: skip

    assert code == 0, (out + err)[-3000:]
    run = tmp_path / "out" / "exp" / "accel-ngp" / "run"
    assert (run / "nerfstudio_models" / f"step-{STEPS - 1:09d}.ckpt").is_file()
