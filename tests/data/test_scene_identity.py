"""A scene's fingerprint: its camera files (transforms*.json, COLMAP's cameras and images), whatever the folder's
path; not its images."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nerfstudio_accel.data.scene_identity import camera_files, scene_fingerprint


@pytest.fixture
def blender_like(tmp_path: Path) -> Path:
    """A folder with three transforms files and an image."""
    scene = tmp_path / "scene"
    (scene / "train").mkdir(parents=True)
    for split in ("train", "val", "test"):
        (scene / f"transforms_{split}.json").write_text(f'{{"camera_angle_x": 0.7, "split": "{split}"}}')
    (scene / "train" / "r_0.png").write_bytes(b"image")
    return scene


def test_a_copy_and_a_symlink_share_the_fingerprint_and_images_do_not_count(blender_like, tmp_path):
    fingerprint = scene_fingerprint(blender_like)
    assert fingerprint is not None and len(fingerprint) == 64
    shutil.copytree(blender_like, tmp_path / "copy")
    (tmp_path / "link").symlink_to(blender_like)
    (tmp_path / "copy" / "train" / "r_0.png").write_bytes(b"the same view, downscaled")
    assert scene_fingerprint(tmp_path / "copy") == fingerprint
    assert scene_fingerprint(tmp_path / "link") == fingerprint
    assert [path.name for path in camera_files(blender_like)] == [
        "transforms_test.json",
        "transforms_train.json",
        "transforms_val.json",
    ]


def test_another_camera_file_or_name_changes_the_fingerprint(blender_like, tmp_path):
    fingerprint = scene_fingerprint(blender_like)
    shutil.copytree(blender_like, tmp_path / "edited")
    (tmp_path / "edited" / "transforms_val.json").write_text('{"camera_angle_x": 0.8, "split": "val"}')
    assert scene_fingerprint(tmp_path / "edited") != fingerprint
    shutil.copytree(blender_like, tmp_path / "renamed")
    (tmp_path / "renamed" / "transforms_val.json").rename(tmp_path / "renamed" / "transforms_eval.json")
    assert scene_fingerprint(tmp_path / "renamed") != fingerprint


def test_a_transforms_file_named_as_data_is_its_folder(tmp_path):
    """nerfstudio-data takes --data as the folder or its transforms.json."""
    (tmp_path / "transforms.json").write_text('{"frames": []}')
    assert scene_fingerprint(tmp_path / "transforms.json") == scene_fingerprint(tmp_path) is not None


@pytest.mark.parametrize("model_folder", ["colmap/sparse/0", "sparse/0", "sparse"])
def test_colmap_models_count_in_each_usual_folder(tmp_path, model_folder):
    model = tmp_path / model_folder
    model.mkdir(parents=True)
    (model / "cameras.bin").write_bytes(b"cameras")
    (model / "images.bin").write_bytes(b"images")
    (model / "points3D.bin").write_bytes(b"points")
    fingerprint = scene_fingerprint(tmp_path)
    assert [path.name for path in camera_files(tmp_path)] == ["cameras.bin", "images.bin"]
    (model / "points3D.bin").write_bytes(b"other points")
    assert scene_fingerprint(tmp_path) == fingerprint
    (model / "images.bin").write_bytes(b"other poses")
    assert scene_fingerprint(tmp_path) != fingerprint


def test_a_folder_without_camera_files_has_none(tmp_path):
    (tmp_path / "images").mkdir()
    assert scene_fingerprint(tmp_path) is None and scene_fingerprint(tmp_path / "missing") is None
