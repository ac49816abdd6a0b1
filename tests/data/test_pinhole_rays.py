"""Pinhole training rays: nerfstudio's rays to the bit where the cameras are undistorted pinholes, nerfstudio's own
path for every other camera."""

from __future__ import annotations

import pytest
import torch
from nerfstudio.cameras.cameras import Cameras, CameraType
from nerfstudio.model_components.ray_generators import RayGenerator

from accel_test_helpers import make_trainer
from nerfstudio_accel.data.pinhole_rays import PinholeRayGenerator, undistorted_pinholes


def random_cameras(n: int, dtype: torch.dtype, seed: int = 0, **overrides) -> Cameras:
    """``n`` cameras of 30x40 pixels (unless ``overrides`` say otherwise) looking from random poses, each with its own
    focal lengths and centre."""
    generator = torch.Generator().manual_seed(seed)
    rotations, _ = torch.linalg.qr(torch.randn(n, 3, 3, generator=generator))
    poses = torch.cat([rotations, torch.randn(n, 3, 1, generator=generator)], -1)

    def per_camera(low: float, high: float) -> torch.Tensor:
        return (low + (high - low) * torch.rand(n, 1, generator=generator)).to(dtype)

    fields = dict(
        camera_to_worlds=poses,
        fx=per_camera(20.0, 60.0),
        fy=per_camera(20.0, 60.0),
        cx=per_camera(15.0, 25.0),
        cy=per_camera(10.0, 20.0),
        width=40,
        height=30,
    )
    return Cameras(**{**fields, **overrides})


def pixels(n_cameras: int, n_rays: int, seed: int = 1) -> torch.Tensor:
    """``(n_rays, 3)`` random (camera, row, column) of 30x40 images."""
    generator = torch.Generator().manual_seed(seed)
    return torch.stack(
        [
            torch.randint(n_cameras, (n_rays,), generator=generator),
            torch.randint(30, (n_rays,), generator=generator),
            torch.randint(40, (n_rays,), generator=generator),
        ],
        -1,
    )


def same_bits(expected: torch.Tensor, actual: torch.Tensor) -> bool:
    """Equal dtypes and bit patterns (``torch.equal`` takes -0.0 for +0.0)."""
    if expected.dtype != actual.dtype or expected.shape != actual.shape:
        return False
    if expected.is_floating_point():
        integers = {torch.float32: torch.int32, torch.float64: torch.int64}[expected.dtype]
        return torch.equal(expected.view(integers), actual.view(integers))
    return torch.equal(expected, actual)


def assert_same_rays(expected, actual) -> None:
    for name in ("origins", "directions", "pixel_area", "camera_indices"):
        assert same_bits(getattr(expected, name), getattr(actual, name)), name
    for name in ("times", "nears", "fars"):
        if getattr(expected, name) is None:
            assert getattr(actual, name) is None, name
        else:
            assert torch.equal(getattr(expected, name), getattr(actual, name)), name
    assert expected.metadata.keys() == actual.metadata.keys()
    for key in expected.metadata:
        assert same_bits(expected.metadata[key], actual.metadata[key]), key


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"distortion_params": torch.zeros(5, 6)},
        {"metadata": {}},
        {"width": torch.tensor([[40], [32], [40], [24], [36]]), "height": torch.tensor([[30], [30], [20], [30], [26]])},
        {"cx": torch.full((5, 1), 20.0), "cy": torch.full((5, 1), 15.0)},
        {
            "camera_to_worlds": torch.eye(4)[:3].repeat(5, 1, 1),
            "cx": torch.full((5, 1), 20.5),
            "cy": torch.full((5, 1), 15.5),
        },
    ],
    ids=["plain", "zero-distortion", "empty-metadata", "photos-of-different-sizes", "float32-centres", "axis-aligned"],
)
def test_pinhole_rays_are_nerfstudios_to_the_bit(dtype, overrides):
    """Undistorted pinholes (intrinsics in float32 or, as blender-data's, float64 focal lengths with float32 centres;
    no distortion parameters or all zero; no metadata or an empty dict; one size or several; axis-aligned poses
    with centres on pixel centres, whose zero sums test the sign of zero) take the short path, and its rays are
    nerfstudio's bit for bit, every field, also from int32 pixel indices (camera indices come back int64, as
    nerfstudio's)."""
    cameras = random_cameras(5, dtype, **overrides)
    fast = PinholeRayGenerator(cameras)
    assert fast.pinholes
    indices = pixels(5, 500)
    if "width" in overrides:  # each pixel inside its own camera's image
        indices[:, 1] %= cameras.height[indices[:, 0], 0]
        indices[:, 2] %= cameras.width[indices[:, 0], 0]
    assert_same_rays(RayGenerator(cameras)(indices), fast(indices))
    assert_same_rays(RayGenerator(cameras)(indices), fast(indices.int()))


@pytest.mark.parametrize(
    "overrides",
    [
        {"distortion_params": torch.tensor([[0.05, -0.01, 0.0, 0.0, 0.001, 0.0]]).repeat(5, 1)},
        {"camera_type": CameraType.FISHEYE},
        {"times": torch.linspace(0.0, 1.0, 5)[:, None]},
    ],
    ids=["lens-distortion", "fisheye", "times"],
)
def test_other_cameras_take_nerfstudios_path(overrides):
    """Distorted lenses, fisheyes and timed cameras are not pinhole cases: the generator says so and hands the
    rays to nerfstudio (the same rays as nerfstudio's own generator)."""
    cameras = random_cameras(5, torch.float32, **overrides)
    assert not undistorted_pinholes(cameras)
    fast = PinholeRayGenerator(cameras)
    indices = pixels(5, 200)
    assert_same_rays(RayGenerator(cameras)(indices), fast(indices))


def test_cameras_with_metadata_take_nerfstudios_path():
    """Per-camera metadata (``ns-export cameras`` writes an index into it) is indexed per ray by nerfstudio; such
    cameras are not the short path's."""
    cameras = random_cameras(5, torch.float32, metadata={"cam_idx": torch.arange(5)[:, None]})
    assert not undistorted_pinholes(cameras)


def test_the_datamanager_generates_training_and_eval_rays_with_it(tiny_scene, tmp_path):
    """accel-ngp's datamanager on a generated (pinhole) scene: its training and eval batches come through the
    short path, and a training batch's rays are the ones nerfstudio's generator makes for its pixels."""
    datamanager = make_trainer(tiny_scene, tmp_path).pipeline.datamanager
    assert isinstance(datamanager.train_ray_generator, PinholeRayGenerator) and datamanager.train_ray_generator.pinholes
    assert isinstance(datamanager.eval_ray_generator, PinholeRayGenerator) and datamanager.eval_ray_generator.pinholes
    rays, batch = datamanager.next_train(0)
    datamanager.close()
    assert_same_rays(RayGenerator(datamanager.train_ray_generator.cameras)(batch["indices"]), rays)
    eval_cameras = datamanager.eval_ray_generator.cameras
    indices = pixels(len(eval_cameras), 64)
    indices[:, 2] %= 32  # the generated scene's images are 32x32
    assert_same_rays(RayGenerator(eval_cameras)(indices), datamanager.eval_ray_generator(indices))
