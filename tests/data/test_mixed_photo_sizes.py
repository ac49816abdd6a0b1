"""A capture with photos of different sizes (portrait and landscape): nerfstudio then hands the pixel sampler
lists of images (``variable_res_collate``) and its sampler splits a batch into even shares per photo, so
every batch size the pipeline sets, at the start and as it resizes the batch, must be one it accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from nerfstudio.data.datamanagers.base_datamanager import variable_res_collate
from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig
from nerfstudio.data.pixel_samplers import PatchPixelSamplerConfig, PixelSamplerConfig
from PIL import Image

from accel_test_helpers import make_trainer, run_steps
from nerfstudio_accel.scenes.object_scene import (
    SceneSpec,
    build_primitives,
    look_at_origin,
    render_view,
    train_directions,
)

SQUARE = SceneSpec(resolution=24, supersample=1)
"""Views are rendered 24x24 and cropped to landscape 24x16 or portrait 16x24 (the principal point moves)."""


@pytest.fixture(scope="module")
def mixed_capture(tmp_path_factory) -> Path:
    """A nerfstudio-data capture of object_scene.py's object in 8 photos, two landscape then two portrait in turn,
    with per-frame intrinsics; with ``eval_interval`` 2 both splits hold both orientations."""
    root = tmp_path_factory.mktemp("mixed_capture")
    (root / "images").mkdir()
    primitives, frames = build_primitives(SQUARE.seed), []
    for index, direction in enumerate(train_directions(8)):
        camera_to_world = look_at_origin(SQUARE.camera_distance * direction)
        view = render_view(primitives, camera_to_world, SQUARE)
        landscape = index // 2 % 2 == 0
        photo = view[4:20] if landscape else view[:, 4:20]
        file_path = f"images/frame_{index + 1:05d}.png"
        Image.fromarray(photo).save(root / file_path)
        height, width = photo.shape[:2]
        frames.append(
            {
                "file_path": file_path,
                "transform_matrix": camera_to_world.tolist(),
                "w": width,
                "h": height,
                "fl_x": SQUARE.focal,
                "fl_y": SQUARE.focal,
                "cx": 12.0 if landscape else 8.0,
                "cy": 8.0 if landscape else 12.0,
            }
        )
    (root / "transforms.json").write_text(json.dumps({"frames": frames}))
    return root


def mixed_trainer(capture: Path, output_dir: Path, **overrides):
    torch.manual_seed(0)
    parser = NerfstudioDataParserConfig(eval_mode="interval", eval_interval=2)
    return make_trainer(capture, output_dir, dataparser=parser, **overrides)


def test_training_and_eval_on_portrait_and_landscape_photos(mixed_capture, tmp_path):
    """accel-ngp trains on the mixed capture as ns-train would, with the occupancy sampler (its samples per
    ray vary once the grid culls, and so does the ray batch sized from them; nerfstudio's sampler refuses
    odd sizes), through enough steps that the batch takes many sizes; eval batches work between steps."""
    trainer = mixed_trainer(mixed_capture, tmp_path, model={"sampler": "occupancy"})
    pipeline = trainer.pipeline
    assert pipeline.datamanager.config.collate_fn is variable_res_collate
    train_images = next(pipeline.datamanager.iter_train_image_dataloader)["image"]
    assert {tuple(image.shape[:2]) for image in train_images} == {(16, 24), (24, 16)}
    sizes = set()
    try:
        for step in range(24):
            run_steps(trainer, step, 1)
            sizes.add(int(trainer.last_metrics["num_rays_per_batch"]))
            if step % 4 == 3:
                _, loss_dict, metrics = pipeline.get_eval_loss_dict(step)
                assert all(torch.isfinite(value) for value in loss_dict.values())
                assert int(metrics["num_rays_per_batch"]) % 2 == 0
    finally:
        pipeline.datamanager.close()
    assert len(sizes) > 4 and all(size % 2 == 0 for size in sizes)


@pytest.mark.parametrize("patch_size", [1, 2])
def test_every_size_the_sizing_sets_is_drawn_exactly(mixed_capture, tmp_path, patch_size):
    """Whatever the samples per ray, the batch size the pipeline sets for the next step is one nerfstudio's
    own sampler for this capture (plain, or patches) draws exactly, and so are the sizes the datamanager's
    train and eval samplers hold after it; odd sizes from the config and the first step's estimate too."""
    trainer = mixed_trainer(
        mixed_capture,
        tmp_path,
        setup=False,
        pipeline={"max_num_samples_per_ray": 963},  # the first step's estimate: 2^14 // 963 = 17 rays
    )
    trainer.config.pipeline.datamanager.patch_size = patch_size
    trainer.config.pipeline.datamanager.train_num_rays_per_batch = 1023
    trainer.setup()
    pipeline, datamanager = trainer.pipeline, trainer.pipeline.datamanager
    reference = PatchPixelSamplerConfig(patch_size=patch_size) if patch_size > 1 else PixelSamplerConfig()
    train_batch = next(datamanager.iter_train_image_dataloader)
    eval_batch = next(datamanager.iter_eval_image_dataloader)

    def drawn(sampler, image_batch) -> int:
        return sampler.sample(image_batch)["image"].shape[0]

    for sampler, image_batch in (
        (datamanager.train_pixel_sampler, train_batch),
        (datamanager.eval_pixel_sampler, eval_batch),
    ):
        assert drawn(sampler, image_batch) == sampler.num_rays_per_batch > 0
    sizes = set()
    for rays, samples in [(17, 16384), (64, 1000), (100, 3001), (333, 7777), (4095, 16383), (513, 99999), (1, 3)]:
        pipeline._update_dynamic_num_rays_per_batch(rays, samples)
        pipeline._update_pixel_samplers()
        size = pipeline.dynamic_num_rays_per_batch
        sizes.add(size)
        assert drawn(reference.setup(num_rays_per_batch=size), train_batch) == size
        assert (
            drawn(datamanager.train_pixel_sampler, train_batch)
            == datamanager.train_pixel_sampler.num_rays_per_batch
            == size
        )
        assert drawn(datamanager.eval_pixel_sampler, eval_batch) == datamanager.eval_pixel_sampler.num_rays_per_batch
    assert len(sizes) > 3
    datamanager.close()
