"""Tests for the unbounded nerfstudio-data scene generator, read back through nerfstudio's own parser."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from nerfstudio.cameras.cameras import CameraType
from nerfstudio.data.dataparsers.base_dataparser import DataparserOutputs
from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig
from PIL import Image

from nerfstudio_accel.scenes.cli import main
from nerfstudio_accel.scenes.object_scene import OBJECT_BOUND, look_at_origin
from nerfstudio_accel.scenes.primitives import trace
from nerfstudio_accel.scenes.unbounded_scene import (
    UnboundedSceneSpec,
    arc_camera_positions,
    build_unbounded_scene,
    frame_file_path,
    generate_unbounded_scene,
    render_rays,
    split_indices,
    world_pixel_rays,
)

SPEC = UnboundedSceneSpec(num_train=8, num_val=2, num_test=3, resolution=32, supersample=2, seed=3)
SPLIT_COUNTS = {"train": SPEC.num_train, "val": SPEC.num_val, "test": SPEC.num_test}
NUM_VIEWS = sum(SPLIT_COUNTS.values())
# One sub-ray per pixel, so every pixel is exactly the radiance along nerfstudio's pixel-centre ray.
POINT_SPEC = UnboundedSceneSpec(num_train=3, num_val=1, num_test=1, resolution=40, supersample=1, seed=5)


@pytest.fixture(scope="module")
def scene_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_unbounded_scene(tmp_path_factory.mktemp("unbounded"), SPEC)


@pytest.fixture(scope="module")
def parsed(scene_dir: Path) -> dict[str, DataparserOutputs]:
    parser = NerfstudioDataParserConfig(data=scene_dir).setup()
    return {split: parser.get_dataparser_outputs(split) for split in SPLIT_COUNTS}


def to_world(
    outputs: DataparserOutputs, points: torch.Tensor, directions: torch.Tensor
) -> tuple[np.ndarray, np.ndarray]:
    """Undo the parser's orient / centre / scale: parsed points and directions (..., 3) -> world, float64."""
    transform = outputs.dataparser_transform.double().numpy()
    rotation, translation = transform[:, :3], transform[:, 3]
    world_points = (points.double().numpy() / outputs.dataparser_scale - translation) @ rotation
    world_directions = directions.double().numpy() @ rotation
    return world_points, world_directions / np.linalg.norm(world_directions, axis=-1, keepdims=True)


def world_camera_centres(outputs: DataparserOutputs) -> np.ndarray:
    """Parsed camera centres mapped back to world coordinates: (n, 3)."""
    centres = outputs.cameras.camera_to_worlds[:, :3, 3]
    return to_world(outputs, centres, torch.ones_like(centres))[0]


def azimuth_degrees(points: np.ndarray) -> np.ndarray:
    return np.degrees(np.arctan2(points[:, 1], points[:, 0]))


def test_writes_nerfstudio_layout(scene_dir: Path) -> None:
    meta = json.loads((scene_dir / "transforms.json").read_text())
    assert meta["camera_model"] == "OPENCV"
    assert (meta["w"], meta["h"]) == (32, 24)
    assert (meta["cx"], meta["cy"]) == (16.0, 12.0)
    assert meta["fl_x"] == meta["fl_y"] == pytest.approx(16.0 / np.tan(np.radians(30.0)))
    assert [frame["file_path"] for frame in meta["frames"]] == [f"images/frame_{i:05d}.png" for i in range(1, 14)]
    written = sorted(path.name for path in (scene_dir / "images").iterdir())
    assert written == [f"frame_{i:05d}.png" for i in range(1, 14)]
    listed = [name for split in SPLIT_COUNTS for name in meta[f"{split}_filenames"]]
    assert sorted(listed) == [frame["file_path"] for frame in meta["frames"]], "splits must partition the frames"
    assert {split: len(meta[f"{split}_filenames"]) for split in SPLIT_COUNTS} == SPLIT_COUNTS
    for frame in meta["frames"]:
        matrix = np.array(frame["transform_matrix"])
        np.testing.assert_allclose(matrix[3], [0, 0, 0, 1])
        np.testing.assert_allclose(matrix[:3, :3].T @ matrix[:3, :3], np.eye(3), atol=1e-9)
        assert np.linalg.det(matrix[:3, :3]) == pytest.approx(1.0)
        with Image.open(scene_dir / frame["file_path"]) as image:
            assert image.format == "PNG" and image.mode == "RGB" and image.size == (32, 24)


def test_nerfstudio_parser_loads_every_split(scene_dir: Path, parsed: dict[str, DataparserOutputs]) -> None:
    meta = json.loads((scene_dir / "transforms.json").read_text())
    for split, count in SPLIT_COUNTS.items():
        outputs = parsed[split]
        assert [str(path.relative_to(scene_dir)) for path in outputs.image_filenames] == meta[f"{split}_filenames"]
        cameras = outputs.cameras
        assert len(cameras) == count
        assert (cameras.width == 32).all() and (cameras.height == 24).all()
        assert torch.allclose(cameras.cx, torch.tensor(16.0)) and torch.allclose(cameras.cy, torch.tensor(12.0))
        assert (cameras.camera_type == CameraType.PERSPECTIVE.value).all()
        for path in outputs.image_filenames:
            assert np.asarray(Image.open(path)).shape == (24, 32, 3)


def test_parsed_cameras_orbit_the_object_on_the_configured_arc(parsed: dict[str, DataparserOutputs]) -> None:
    centres = {split: world_camera_centres(outputs) for split, outputs in parsed.items()}
    everything = np.concatenate(list(centres.values()))
    np.testing.assert_allclose(np.linalg.norm(everything, axis=1), SPEC.camera_distance, rtol=1e-5)
    elevation = np.degrees(np.arcsin(everything[:, 2] / SPEC.camera_distance))
    assert elevation.min() >= SPEC.elevation_deg - SPEC.elevation_swing_deg - 1e-3
    assert elevation.max() <= SPEC.elevation_deg + SPEC.elevation_swing_deg + 1e-3
    azimuth = azimuth_degrees(everything)
    assert azimuth.min() == pytest.approx(-SPEC.arc_degrees / 2, abs=1e-3)
    assert azimuth.max() == pytest.approx(SPEC.arc_degrees / 2, abs=1e-3)
    assert np.diff(np.sort(azimuth)).max() == pytest.approx(SPEC.arc_degrees / (NUM_VIEWS - 1), abs=1e-3)
    train_azimuth = azimuth_degrees(centres["train"])
    for split in ("val", "test"):
        heldout = azimuth_degrees(centres[split])
        assert (heldout > train_azimuth.min()).all() and (heldout < train_azimuth.max()).all(), "interpolated"
        assert np.abs(heldout[:, None] - train_azimuth[None]).min() > 1.0

    for outputs in parsed.values():
        cameras = outputs.cameras
        for index in range(len(cameras)):
            centre_pixel = torch.tensor([[float(cameras.cy[index]), float(cameras.cx[index])]])
            rays = cameras.generate_rays(camera_indices=index, coords=centre_pixel)
            origin, direction = to_world(outputs, rays.origins[0], rays.directions[0])
            assert np.linalg.norm(np.cross(-origin, direction)) < 1e-4, "image centre should look at the origin"
            assert direction @ -origin > 0
        object_centre = outputs.dataparser_scale * (outputs.dataparser_transform @ torch.tensor([0.0, 0, 0, 1]))
        assert object_centre.abs().max() < 1.0, "the object should lie in nerfstudio's scene box"


def test_nerfstudio_pixel_rays_reproduce_the_images(tmp_path: Path) -> None:
    """Re-rendering along the rays nerfstudio generates from the parsed cameras gives back the
    stored pixels; the same rays half a pixel off do not, so the check sees convention errors."""
    parser = NerfstudioDataParserConfig(data=generate_unbounded_scene(tmp_path, POINT_SPEC)).setup()
    primitives = build_unbounded_scene(POINT_SPEC.seed, POINT_SPEC.backdrop_radius)
    for split in ("train", "test"):
        outputs = parser.get_dataparser_outputs(split)
        cameras = outputs.cameras
        for index in range(len(cameras)):
            image = np.asarray(Image.open(outputs.image_filenames[index])).astype(int)
            coords = cameras.get_image_coords()  # (H, W, 2) pixel centres (row + 0.5, col + 0.5)
            assert coords.shape[:2] == image.shape[:2]
            matches = []
            for shift in (0.0, 0.5):
                rays = cameras.generate_rays(camera_indices=index, coords=coords + torch.tensor([0.0, shift]))
                origins, directions = to_world(outputs, rays.origins.reshape(-1, 3), rays.directions.reshape(-1, 3))
                rendered = np.round(render_rays(primitives, origins, directions) * 255.0).reshape(image.shape)
                matches.append((np.abs(rendered - image).max(axis=-1) <= 1).mean())
            assert matches[0] > 0.98, f"{split} view {index}: only {matches[0]:.3f} of pixels match nerfstudio's rays"
            assert matches[1] < 0.9, "a half-pixel shift should be detectable"


def test_same_seed_gives_identical_bytes(scene_dir: Path, tmp_path: Path) -> None:
    again = generate_unbounded_scene(tmp_path / "again", SPEC)
    written = sorted(path.relative_to(scene_dir) for path in scene_dir.rglob("*") if path.is_file())
    assert written == sorted(path.relative_to(again) for path in again.rglob("*") if path.is_file())
    for relative in written:
        assert (scene_dir / relative).read_bytes() == (again / relative).read_bytes(), relative


def test_other_seed_changes_images(scene_dir: Path) -> None:
    other = build_unbounded_scene(SPEC.seed + 1, SPEC.backdrop_radius)
    origins, directions = world_pixel_rays(look_at_origin(arc_camera_positions(SPEC)[0]), SPEC)
    first = render_rays(build_unbounded_scene(SPEC.seed, SPEC.backdrop_radius), origins, directions)
    assert np.abs(render_rays(other, origins, directions) - first).max() > 0.1


def test_backdrop_is_far_and_every_ray_hits_something() -> None:
    primitives = build_unbounded_scene(SPEC.seed, SPEC.backdrop_radius)
    for position in arc_camera_positions(SPEC):
        origins, directions = world_pixel_rays(look_at_origin(position), SPEC)
        distances, _ = trace(primitives, origins, directions)
        assert np.isfinite(distances).all(), "the backdrop should enclose every camera"
        along = -np.einsum("ij,ij->i", origins, directions)
        miss_distance = np.linalg.norm(origins + np.clip(along, 0, None)[:, None] * directions, axis=1)
        open_sky = (directions[:, 2] > 0.0) & (miss_distance > np.sqrt(3.0) * OBJECT_BOUND)
        assert open_sky.mean() > 0.05, "every view should see some far field above the horizon"
        assert distances[open_sky].min() > 10.0 * SPEC.camera_distance
        far_colours = render_rays(primitives, origins[open_sky], directions[open_sky])
        assert far_colours.std(axis=0).max() > 0.05, "the backdrop should have texture"


def test_images_are_textured(scene_dir: Path) -> None:
    for path in sorted((scene_dir / "images").iterdir()):
        image = np.asarray(Image.open(path)).astype(float)
        assert image.std(axis=(0, 1)).max() > 20
        assert len(np.unique(image.reshape(-1, 3), axis=0)) > 100
        assert image[-4:].std(axis=(0, 1)).max() > 10, "the near ground should be textured"


@pytest.mark.parametrize("counts", [(60, 5, 10), (8, 2, 3), (1, 0, 0), (3, 1, 0), (2, 0, 1)])
def test_split_indices_interleave_heldout_views(counts: tuple[int, int, int]) -> None:
    num_train, num_val, num_test = counts
    splits = split_indices(num_train, num_val, num_test)
    total = num_train + num_val + num_test
    assert [len(splits[name]) for name in ("train", "val", "test")] == list(counts)
    assert sorted(np.concatenate(list(splits.values())).tolist()) == list(range(total))
    heldout = np.concatenate([splits["val"], splits["test"]])
    if total > 1 and len(heldout) <= total / 2:
        assert 0 < heldout.min() and heldout.max() < total - 1, "arc ends belong to train"
    if num_val and num_test > 1:
        assert splits["test"].min() < splits["val"].max() and splits["val"].min() < splits["test"].max()


def test_frame_file_paths_sort_in_arc_order() -> None:
    names = [frame_file_path(index) for index in range(120)]
    assert names == sorted(names) and names[0] == "images/frame_00001.png"


@pytest.mark.parametrize(
    "bad_field",
    [
        {"resolution": 4},
        {"num_train": 0},
        {"arc_degrees": 0.0},
        {"arc_degrees": 400.0},
        {"elevation_swing_deg": 20.0},
        {"elevation_deg": 89.0},
        {"backdrop_radius": 20.0},
        {"camera_distance": 1.0},
    ],
)
def test_bad_spec_raises(bad_field: dict) -> None:
    with pytest.raises(ValueError):
        UnboundedSceneSpec(**bad_field)


def test_cli_unbounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small = ["--unbounded", "--num-train", "3", "--num-val", "1", "--num-test", "1", "--resolution", "16"]
    assert main([str(tmp_path), *small]) == 0
    captured = capsys.readouterr()
    assert captured.out.count("\n") == 1 and "16x12" in captured.out and "3 train / 1 val / 1 test" in captured.out
    meta = json.loads((tmp_path / "transforms.json").read_text())
    assert len(meta["frames"]) == 5 and (meta["w"], meta["h"]) == (16, 12)
    assert not list(tmp_path.glob("transforms_*.json"))

    assert main([str(tmp_path), *small]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (
        main(
            [
                str(tmp_path),
                "--unbounded",
                "--num-train",
                "1",
                "--num-val",
                "0",
                "--num-test",
                "0",
                "--resolution",
                "8",
                "--force",
            ]
        )
        == 0
    )
    assert [path.name for path in (tmp_path / "images").iterdir()] == ["frame_00001.png"], "stale frames removed"


def test_cli_unbounded_defaults_and_bad_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "new"), "--unbounded", "--resolution", "4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1
    defaults = UnboundedSceneSpec()
    assert (defaults.resolution, defaults.height, defaults.supersample) == (64, 48, 2)
    assert (defaults.num_train, defaults.num_val, defaults.num_test) == (60, 5, 10)
