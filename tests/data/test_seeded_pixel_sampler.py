"""The seeded pixel samplers draw every random number from their own generator, in each of nerfstudio's
sampling paths: whatever the training step draws from torch's (or python's) global generator in between,
a sampler made after the same seed draws the same pixels."""

from __future__ import annotations

import copy
import random
from typing import Callable

import pytest
import torch
from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig
from nerfstudio.data.pixel_samplers import PatchPixelSampler, PixelSampler

from nerfstudio_accel.data.prefetching_datamanager import AccelDataManagerConfig
from nerfstudio_accel.data.seeded_pixel_sampler import SeededPixelSamplerConfig

NUM_IMAGES, HEIGHT, WIDTH = 3, 12, 16


def image_batch(with_mask: bool) -> dict:
    """Three 12x16 images; the mask (if any) keeps a 6x8 window of each, one pixel off the borders."""
    batch = {"image": torch.rand(NUM_IMAGES, HEIGHT, WIDTH, 3), "image_idx": torch.arange(NUM_IMAGES)}
    if with_mask:
        mask = torch.zeros(NUM_IMAGES, HEIGHT, WIDTH, 1, dtype=torch.bool)
        mask[:, 3:9, 4:12] = True
        batch["mask"] = mask
    return batch


def plain(rejection_sample_mask: bool = True, max_num_iterations: int = 100, **kwargs) -> Callable[[], PixelSampler]:
    """The seeded sampler as nerfstudio's datamanager sets it up (``kwargs``: its camera options)."""
    config = SeededPixelSamplerConfig(
        rejection_sample_mask=rejection_sample_mask, max_num_iterations=max_num_iterations
    )
    return lambda: copy.deepcopy(config).setup(num_rays_per_batch=64, **kwargs)


def patches(scene, rejection_sample_mask: bool = True) -> Callable[[], PixelSampler]:
    """The sampler the datamanager makes for ``--pipeline.datamanager.patch-size 2``."""

    def make() -> PixelSampler:
        config = AccelDataManagerConfig(dataparser=BlenderDataParserConfig(data=scene), patch_size=2)
        sampler = config.setup(device="cpu").train_pixel_sampler
        sampler.config.rejection_sample_mask = rejection_sample_mask
        sampler.set_num_rays_per_batch(64)
        return sampler

    return make


PATHS = {
    "uniform": (plain(), False),
    "mask by index": (plain(rejection_sample_mask=False), True),
    "rejection-sampled mask": (plain(), True),
    "rejection sampling given up": (plain(max_num_iterations=1), True),  # nerfstudio's fallback: by index
    "fisheye": (plain(fisheye_crop_radius=5.0), False),
    "equirectangular": (plain(is_equirectangular=True), False),
}


def draws_between_global_draws(make_sampler: Callable[[], PixelSampler], with_mask: bool, global_seed: int):
    """Two batches' pixel indices from a sampler made after ``torch.manual_seed(0)``, with the global
    generators reseeded with ``global_seed`` and drawn from before each batch."""
    torch.manual_seed(0)
    sampler = make_sampler()
    batches = []
    for offset in range(2):
        torch.manual_seed(global_seed + offset)
        random.seed(global_seed + offset)
        torch.rand(101)
        batches.append(sampler.sample(image_batch(with_mask))["indices"])
    return sampler, batches


def assert_same_draws_whatever_the_global_generators(make_sampler, with_mask: bool):
    sampler, first = draws_between_global_draws(make_sampler, with_mask, global_seed=1)
    _, second = draws_between_global_draws(make_sampler, with_mask, global_seed=50)
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    assert not torch.equal(first[0], first[1])  # the sampler's own stream moves on
    for indices in first:
        assert indices.shape == (sampler.num_rays_per_batch, 3)
        assert (indices >= 0).all() and (indices < torch.tensor([NUM_IMAGES, HEIGHT, WIDTH])).all()
        if with_mask:
            assert image_batch(True)["mask"][indices[:, 0], indices[:, 1], indices[:, 2]].all()


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.filterwarnings("ignore:masked sampling failed")
def test_pixel_draws_ignore_the_global_generators(path):
    assert_same_draws_whatever_the_global_generators(*PATHS[path])


@pytest.mark.parametrize("with_mask, rejection", [(False, True), (True, True), (True, False)])
def test_patch_draws_ignore_the_global_generators(tiny_scene, with_mask, rejection):
    """Patches (uniform, and within a mask by rejection or by index) from the datamanager's patch sampler."""
    make_sampler = patches(tiny_scene, rejection)
    assert isinstance(make_sampler(), PatchPixelSampler)
    assert_same_draws_whatever_the_global_generators(make_sampler, with_mask)
    squares = make_sampler().sample(image_batch(with_mask))["indices"].view(-1, 4, 3)
    assert torch.equal(
        squares - squares[:, :1], torch.tensor([[0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 1, 1]]).expand_as(squares)
    )


def test_draws_keep_nerfstudios_distributions():
    """Equirectangular rows follow sin(polar angle) (few near the poles); fisheye pixels lie in the crop circle."""
    torch.manual_seed(0)
    equirectangular = SeededPixelSamplerConfig().setup(num_rays_per_batch=20000, is_equirectangular=True)
    rows = equirectangular.sample(image_batch(False))["indices"][:, 1].float()
    polar = ((rows < HEIGHT / 6) | (rows >= HEIGHT * 5 / 6)).float().mean()
    assert abs(float(polar) - 0.134) < 0.02  # 1 - cos(30 degrees); uniform rows would give 0.33
    fisheye = SeededPixelSamplerConfig().setup(num_rays_per_batch=2000, fisheye_crop_radius=5.0)
    pixels = fisheye.sample(image_batch(False))["indices"][:, 1:].float()
    assert ((pixels - torch.tensor([HEIGHT // 2, WIDTH // 2])).norm(dim=-1) <= 5.0 + 1.5).all()
