"""Tests for the procedural Blender-format scene generator."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from nerfstudio_accel.scenes.cli import main
from nerfstudio_accel.scenes.object_scene import (
    SceneSpec,
    build_primitives,
    generate_scene,
    look_at_origin,
    render_view,
)
from nerfstudio_accel.scenes.primitives import Sphere

SPEC = SceneSpec(num_train=6, num_val=2, num_test=3, resolution=32, supersample=2, seed=3)
SPLIT_COUNTS = {"train": SPEC.num_train, "val": SPEC.num_val, "test": SPEC.num_test}


@pytest.fixture(scope="module")
def scene_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_scene(tmp_path_factory.mktemp("scene"), SPEC)


def load_split(scene_dir: Path, split: str) -> tuple[dict, list[np.ndarray]]:
    """Transforms dict and the RGBA images: list of (H, W, 4) uint8, in frame order."""
    transforms = json.loads((scene_dir / f"transforms_{split}.json").read_text())
    images = [np.asarray(Image.open(scene_dir / (frame["file_path"] + ".png"))) for frame in transforms["frames"]]
    return transforms, images


def all_views(scene_dir: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    """(camera_to_world (4, 4), image (H, W, 4)) for every view of every split."""
    views = []
    for split in SPLIT_COUNTS:
        transforms, images = load_split(scene_dir, split)
        views += [(np.array(frame["transform_matrix"]), image) for frame, image in zip(transforms["frames"], images)]
    return views


def nerfstudio_focal(camera_angle_x: float, width: int) -> float:
    return 0.5 * width / np.tan(0.5 * camera_angle_x)


def project(point: np.ndarray, camera_to_world: np.ndarray, focal: float, size: int) -> tuple[float, float]:
    """Continuous (u, v) pixel coordinates of a world point: (3,), OpenGL camera, principal point size / 2."""
    camera_point = camera_to_world[:3, :3].T @ (point - camera_to_world[:3, 3])
    depth = -camera_point[2]
    assert depth > 0, "point is behind the camera"
    return focal * camera_point[0] / depth + size / 2, -focal * camera_point[1] / depth + size / 2


def pixel_centre_rays(camera_to_world: np.ndarray, focal: float, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Origin (3,) and unit directions (size, size, 3) through pixel centres, nerfstudio's ray model."""
    u, v = np.meshgrid(np.arange(size) + 0.5, np.arange(size) + 0.5, indexing="xy")
    camera_dirs = np.stack([(u - size / 2) / focal, -(v - size / 2) / focal, -np.ones_like(u)], axis=-1)
    directions = camera_dirs @ camera_to_world[:3, :3].T
    return camera_to_world[:3, 3], directions / np.linalg.norm(directions, axis=-1, keepdims=True)


def distance_to_rays(point: np.ndarray, origin: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """Distance from a point (3,) to each ray (origin (3,), directions (..., 3)): (...)."""
    offset = point - origin
    along = directions @ offset
    return np.linalg.norm(offset - along[..., None] * directions, axis=-1)


def test_writes_blender_layout(scene_dir: Path) -> None:
    for split, count in SPLIT_COUNTS.items():
        assert sorted(path.name for path in (scene_dir / split).iterdir()) == sorted(f"r_{i}.png" for i in range(count))
        transforms = json.loads((scene_dir / f"transforms_{split}.json").read_text())
        assert transforms["camera_angle_x"] == pytest.approx(SPEC.camera_angle_x)
        assert len(transforms["frames"]) == count
        for index, frame in enumerate(transforms["frames"]):
            assert frame["file_path"] == f"./{split}/r_{index}"
            assert (scene_dir / (frame["file_path"] + ".png")).is_file()
            matrix = np.array(frame["transform_matrix"])
            assert matrix.shape == (4, 4)
            np.testing.assert_allclose(matrix[3], [0, 0, 0, 1])
            np.testing.assert_allclose(matrix[:3, :3].T @ matrix[:3, :3], np.eye(3), atol=1e-9)
            assert np.linalg.det(matrix[:3, :3]) == pytest.approx(1.0)
            assert np.linalg.norm(matrix[:3, 3]) == pytest.approx(SPEC.camera_distance)
        for path in (scene_dir / split).iterdir():
            with Image.open(path) as image:
                assert image.mode == "RGBA"
                assert image.size == (SPEC.resolution, SPEC.resolution)


def test_same_seed_gives_identical_bytes(scene_dir: Path, tmp_path: Path) -> None:
    again = generate_scene(tmp_path / "again", SPEC)
    written = sorted(path.relative_to(scene_dir) for path in scene_dir.rglob("*") if path.is_file())
    assert written == sorted(path.relative_to(again) for path in again.rglob("*") if path.is_file())
    for relative in written:
        assert (scene_dir / relative).read_bytes() == (again / relative).read_bytes(), relative


def test_other_seed_changes_images(scene_dir: Path, tmp_path: Path) -> None:
    other_spec = SceneSpec(num_train=1, num_val=0, num_test=0, resolution=SPEC.resolution, seed=SPEC.seed + 1)
    other = generate_scene(tmp_path / "other", other_spec)
    first = np.asarray(Image.open(scene_dir / "train" / "r_0.png")).astype(int)
    assert np.abs(np.asarray(Image.open(other / "train" / "r_0.png")).astype(int) - first).max() > 20


def test_transparent_background_and_present_object(scene_dir: Path) -> None:
    for _, image in all_views(scene_dir):
        alpha = image[..., 3]
        assert alpha[[0, 0, -1, -1], [0, -1, 0, -1]].max() == 0
        assert 0.05 < (alpha > 0).mean() < 0.8
        assert (alpha == 255).any()
        assert ((alpha > 0) & (alpha < 255)).any(), "supersampled edges should have partial alpha"
        opaque_rgb = image[alpha == 255][:, :3].astype(float)
        assert opaque_rgb.std(axis=0).max() > 20, "object should have colour detail"
        assert (image[alpha == 0][:, :3] == 0).all()


def test_without_supersampling_alpha_is_binary(tmp_path: Path) -> None:
    spec = SceneSpec(num_train=2, num_val=0, num_test=0, resolution=24, supersample=1)
    alpha = np.asarray(Image.open(generate_scene(tmp_path, spec) / "train" / "r_1.png"))[..., 3]
    assert set(np.unique(alpha)) == {0, 255}


def test_world_origin_projects_to_image_centre(scene_dir: Path) -> None:
    focal = nerfstudio_focal(SPEC.camera_angle_x, SPEC.resolution)
    for camera_to_world, _ in all_views(scene_dir):
        u, v = project(np.zeros(3), camera_to_world, focal, SPEC.resolution)
        assert u == pytest.approx(SPEC.resolution / 2, abs=1e-6)
        assert v == pytest.approx(SPEC.resolution / 2, abs=1e-6)


def test_cameras_look_at_origin_upright(scene_dir: Path) -> None:
    for camera_to_world, _ in all_views(scene_dir):
        position = camera_to_world[:3, 3]
        np.testing.assert_allclose(camera_to_world[:3, 2], position / np.linalg.norm(position), atol=1e-12)
        assert camera_to_world[2, 0] == pytest.approx(0.0, abs=1e-12), "camera +X should be horizontal"
        assert camera_to_world[2, 1] > 0, "camera +Y should point towards world +Z"


@pytest.mark.parametrize("supersample", [1, 2, 3])
def test_sub_pixel_rays_are_centred_on_pixels(supersample: int) -> None:
    """A centred sphere renders a mirror-symmetric image only if the rays sample pixel centres."""
    spec = SceneSpec(resolution=20, supersample=supersample)
    sphere = Sphere(np.zeros(3), 0.47, lambda points: np.full_like(points, 0.5))
    alpha = render_view([sphere], look_at_origin(np.array([1.0, -2.0, 2.0])), spec)[..., 3].astype(int)
    assert 0 < alpha.mean() < 255
    assert np.abs(alpha - alpha[::-1]).max() == 0
    assert np.abs(alpha - alpha[:, ::-1]).max() == 0


def sphere_opacity(camera_to_world: np.ndarray, alpha: np.ndarray, sphere: Sphere) -> tuple[int, float]:
    """Alpha at the pixel the sphere centre projects to, and the fraction of pixels whose
    centre ray passes within 0.6 * radius of the centre that are fully opaque."""
    size = alpha.shape[0]
    focal = nerfstudio_focal(SPEC.camera_angle_x, size)
    u, v = project(sphere.center, camera_to_world, focal, size)
    origin, directions = pixel_centre_rays(camera_to_world, focal, size)
    inside = distance_to_rays(sphere.center, origin, directions) < 0.6 * sphere.radius
    assert inside.any()
    return int(alpha[int(v), int(u)]), float((alpha[inside] == 255).mean())


def test_sphere_centres_land_on_opaque_pixels(scene_dir: Path) -> None:
    spheres = [primitive for primitive in build_primitives(SPEC.seed) if isinstance(primitive, Sphere)]
    assert len(spheres) >= 2
    assert any(np.linalg.norm(sphere.center[:2]) > 0.3 for sphere in spheres), "need an off-centre sphere"
    flipped_fractions = []
    for camera_to_world, image in all_views(scene_dir):
        for sphere in spheres:
            centre_alpha, covered = sphere_opacity(camera_to_world, image[..., 3], sphere)
            assert centre_alpha == 255
            assert covered == 1.0
            flipped_fractions.append(sphere_opacity(camera_to_world, image[::-1, ::-1, 3], sphere)[1])
    assert min(flipped_fractions) < 1.0, "the check must be able to detect an image flipped about its centre"


def test_pixels_whose_rays_miss_the_object_bound_are_transparent(scene_dir: Path) -> None:
    focal = nerfstudio_focal(SPEC.camera_angle_x, SPEC.resolution)
    for camera_to_world, image in all_views(scene_dir):
        origin, directions = pixel_centre_rays(camera_to_world, focal, SPEC.resolution)
        far_from_object = distance_to_rays(np.zeros(3), origin, directions) > 1.2
        assert far_from_object.any()
        assert (image[..., 3][far_from_object] == 0).all()


def test_heldout_directions_are_disjoint_from_train(scene_dir: Path) -> None:
    directions = {}
    for split in SPLIT_COUNTS:
        transforms, _ = load_split(scene_dir, split)
        positions = np.array([frame["transform_matrix"] for frame in transforms["frames"]])[:, :3, 3]
        directions[split] = positions / np.linalg.norm(positions, axis=1, keepdims=True)
    heldout = np.concatenate([directions["val"], directions["test"]])
    assert np.arccos(np.clip(heldout @ directions["train"].T, -1, 1)).min() > 0.05
    assert np.arccos(np.clip(directions["val"] @ directions["test"].T, -1, 1)).min() > 0.05
    assert (directions["train"][:, 2] > 0).mean() > 0.75, "train views should mostly look down from above"


@pytest.mark.parametrize(
    "bad_field",
    [
        {"resolution": 4},
        {"num_train": 0},
        {"num_val": -1},
        {"num_test": -2},
        {"supersample": 0},
        {"camera_distance": 1.0},
        {"camera_angle_x": 0.0},
    ],
)
def test_bad_spec_raises(bad_field: dict) -> None:
    with pytest.raises(ValueError):
        SceneSpec(**bad_field)


def test_cli_refuses_non_empty_dir_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "keep.txt").write_text("user file")
    small = ["--num-train", "2", "--num-val", "1", "--num-test", "1", "--resolution", "16"]
    assert main([str(tmp_path), *small]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1
    assert "not empty" in captured.err and "--force" in captured.err
    assert not (tmp_path / "train").exists()

    assert main([str(tmp_path), *small, "--force"]) == 0
    captured = capsys.readouterr()
    assert captured.out.count("\n") == 1 and "16x16" in captured.out
    assert (tmp_path / "keep.txt").read_text() == "user file"
    assert len(json.loads((tmp_path / "transforms_train.json").read_text())["frames"]) == 2


def test_cli_force_removes_stale_views(tmp_path: Path) -> None:
    assert main([str(tmp_path), "--num-train", "3", "--num-val", "0", "--num-test", "0", "--resolution", "8"]) == 0
    assert (
        main([str(tmp_path), "--num-train", "1", "--num-val", "0", "--num-test", "0", "--resolution", "8", "--force"])
        == 0
    )
    assert [path.name for path in (tmp_path / "train").iterdir()] == ["r_0.png"]


def test_cli_reports_bad_spec_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "new"), "--resolution", "4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1
