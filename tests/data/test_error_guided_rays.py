"""Error-guided ray sampling: draws follow the error map, weights keep the loss unbiased, batches do not depend
on thread timing, and training reaches it through nerfstudio's set-up."""

from __future__ import annotations

import threading

import pytest
import torch

from accel_test_helpers import make_trainer, run_steps
from nerfstudio_accel.data.error_guided_rays import ErrorGuidedRaysConfig, PixelErrorMap
from nerfstudio_accel.errors import ConfigError


def error_map(height=10, width=7, num_images=3, lag=1, **config) -> PixelErrorMap:
    return PixelErrorMap(ErrorGuidedRaysConfig(enabled=True, **config), num_images, height, width, lag)


def every_pixel(num_images: int, height: int, width: int) -> torch.Tensor:
    grid = torch.meshgrid(torch.arange(num_images), torch.arange(height), torch.arange(width), indexing="ij")
    return torch.stack(grid, dim=-1).reshape(-1, 3)


def test_tiles_cover_every_pixel_once_when_the_sides_do_not_divide():
    """10x7 pixels in at most 4x4 tiles: tiles of 3x2 (edge tiles smaller), each pixel in exactly one tile."""
    errors = error_map(cells=4)
    pixels = every_pixel(3, 10, 7)
    counts = torch.bincount(errors.tiles_of(pixels), minlength=errors.num_tiles)
    assert torch.equal(counts.double(), errors.tile_pixels)
    assert int(errors.tile_pixels.sum()) == 3 * 10 * 7


def test_uniform_draws_reach_every_pixel_with_weight_one():
    errors = error_map(cells=4, uniform_share=1.0)
    indices, weights = errors.draw(20000, torch.Generator().manual_seed(0))
    assert torch.allclose(weights, torch.ones_like(weights))
    drawn = set(map(tuple, indices.tolist()))
    assert drawn == set(map(tuple, every_pixel(3, 10, 7).tolist()))


def recorded_map(**config) -> PixelErrorMap:
    """A map whose first image's tiles erred 16x the others' (one step; the draw distribution published)."""
    errors = error_map(cells=4, refresh_steps=1, rate=1.0, **config)  # 3x2 tiles, smaller ones at the edges
    pixels = every_pixel(3, 10, 7)
    errors.record(pixels, torch.where(pixels[:, 0] == 0, 0.16, 0.01))
    return errors


def test_draws_follow_the_error_map_and_each_weight_makes_the_pixel_uniform():
    """After a step where image 0 erred 16x more, image 0 takes its error share of the draws; every drawn
    pixel's probability times its weight is 1 / N (so the weighted loss's expectation is the uniform one's)."""
    errors = recorded_map(uniform_share=0.25)
    generator = torch.Generator().manual_seed(0)
    errors.draw(1, generator), errors.draw(1, generator)  # batches 0 and 1 draw from before any step (lag 1)
    indices, weights = errors.draw(60000, generator)
    tiles = errors.tiles_of(indices)
    _, probability = errors._published[1]
    pixel_probability = probability[tiles] / errors.tile_pixels[tiles]
    assert torch.allclose(pixel_probability * weights.double(), torch.full_like(pixel_probability, 1 / 210), rtol=1e-5)
    assert len(set(errors.tile_pixels[tiles].tolist())) > 1  # edge tiles drawn too
    expected_share = 0.75 * 16 / 18 + 0.25 / 3
    assert abs(float((indices[:, 0] == 0).double().mean()) - expected_share) < 0.01
    assert float(weights.max()) <= 1 / 0.25 + 1e-5


def test_the_weighted_mean_of_a_pixel_function_matches_its_uniform_mean():
    errors = recorded_map(uniform_share=0.2)
    generator = torch.Generator().manual_seed(1)
    errors.draw(1, generator), errors.draw(1, generator)
    indices, weights = errors.draw(200000, generator)
    value = lambda pixels: (pixels[:, 0] * 7.0 + pixels[:, 1] ** 2 + pixels[:, 2]).double()  # noqa: E731
    uniform_mean = float(value(every_pixel(3, 10, 7)).mean())
    weighted_mean = float((weights.double() * value(indices)).mean())
    assert abs(weighted_mean - uniform_mean) < 0.01 * uniform_mean
    assert abs(float(value(indices).mean()) - uniform_mean) > 0.05 * uniform_mean  # the draws alone are biased


def test_tiles_move_toward_their_rays_errors_and_a_non_finite_step_moves_none():
    errors = error_map(cells=4, rate=0.5)
    pixels = torch.tensor([[0, 0, 0], [0, 1, 1], [2, 9, 6]])
    errors.record(pixels, torch.tensor([0.2, 0.4, 0.0]))
    tiles = errors.tiles_of(pixels)
    assert errors.errors[tiles[0]] == pytest.approx(0.5 * 1.0 + 0.5 * 0.3)  # the mean of its two rays
    assert errors.errors[tiles[2]] == pytest.approx(0.5)
    assert int((errors.errors != 1.0).sum()) == 2
    before = errors.errors.clone()
    errors.record(pixels, torch.tensor([0.2, float("nan"), 0.0]))
    assert torch.equal(errors.errors, before)
    assert errors._recorded == 2


def test_all_zero_errors_draw_uniformly():
    errors = error_map(cells=4, refresh_steps=1, rate=1.0)
    pixels = every_pixel(3, 10, 7)
    errors.record(pixels, torch.zeros(pixels.shape[0]))
    _, probability = errors._distribution()
    assert torch.allclose(probability, errors.tile_pixels / 210)


def draws_when(record_early: bool, lag: int = 2, refresh: int = 3, batches: int = 12) -> list:
    """Each batch's pixels when the steps before batch ``k`` are all recorded (``record_early``: the
    training thread ran ahead of the producer) or only as many as the producer needs."""
    errors = error_map(lag=lag, refresh_steps=refresh, rate=1.0)
    generator = torch.Generator().manual_seed(3)
    step_errors = torch.Generator().manual_seed(4)
    recorded, drawn = 0, []

    def record_one() -> None:
        nonlocal recorded
        pixels = every_pixel(3, 10, 7)
        errors.record(pixels, torch.rand(pixels.shape[0], generator=step_errors))
        recorded += 1

    for batch in range(batches):
        needed = max(0, batch - lag) // refresh * refresh
        while recorded < (batch if record_early else needed):
            record_one()
        drawn.append(errors.draw(16, generator)[0])
    return drawn


def test_a_batch_draws_from_the_same_step_however_far_training_has_gone():
    early, late = draws_when(record_early=True), draws_when(record_early=False)
    assert all(torch.equal(a, b) for a, b in zip(early, late))
    assert not torch.equal(early[0], early[-1])


def test_a_producer_ahead_of_training_waits_for_its_step_and_close_wakes_it():
    errors = error_map(lag=1, refresh_steps=1)
    generator = torch.Generator().manual_seed(0)
    errors.draw(4, generator)
    errors.draw(4, generator)  # batch 1 draws from step 0: published at the start
    results = []
    producer = threading.Thread(target=lambda: results.append(errors.draw(4, generator)))
    producer.start()  # batch 2 needs step 1's errors
    producer.join(0.2)
    assert producer.is_alive() and not results
    errors.record(torch.tensor([[0, 0, 0]]), torch.tensor([0.5]))
    producer.join(10)
    assert len(results) == 1

    failures = []

    def draw_until_closed() -> None:
        try:
            errors.draw(4, generator)
        except RuntimeError as error:
            failures.append(str(error))

    producer = threading.Thread(target=draw_until_closed)
    producer.start()
    producer.join(0.2)
    errors.close()
    producer.join(10)
    assert failures == ["the error map was closed"]


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("cells", 0, "cells must be at least 1"),
        ("uniform_share", 0.0, r"uniform-share must be in \(0, 1\]"),
        ("rate", 1.5, r"rate must be in \(0, 1\]"),
        ("refresh_steps", 0, "refresh-steps must be at least 1"),
    ],
)
def test_values_out_of_range_are_refused_in_one_line(field, value, message):
    with pytest.raises(ConfigError, match=message):
        ErrorGuidedRaysConfig(enabled=True, **{field: value}).check()


def error_guided_trainer(scene, output_dir, **pipeline):
    torch.manual_seed(0)
    return make_trainer(
        scene,
        output_dir,
        pipeline={"datamanager.error_guided_rays.enabled": True, "datamanager.error_guided_rays.cells": 8, **pipeline},
    )


def test_training_steps_record_their_errors_and_later_batches_carry_weights(tiny_scene, tmp_path):
    """ns-train's set-up with the flag on: every step records its rays' errors into the map, batches carry
    one weight per ray, and once the map is refreshed the weights differ from 1. Batches prepared on a producer
    thread (depth 2, the GPUs' default), which draws from the map three steps behind."""
    trainer = error_guided_trainer(
        tiny_scene,
        tmp_path,
        **{"datamanager.error_guided_rays.refresh_steps": 2, "datamanager.prefetch_batches": 2},
    )
    datamanager = trainer.pipeline.datamanager
    try:
        errors = datamanager.error_map
        assert errors is not None and (errors.tile_rows, errors.tile_columns) == (8, 8)
        assert errors.lag == 3
        losses = run_steps(trainer, 0, 6)
        assert all(torch.isfinite(torch.tensor(losses)))
        assert errors._recorded == 6
        assert float(errors.errors.min()) < 1.0  # visited tiles moved toward their (small) errors
        _, batch = datamanager.next_train(6)
        assert batch["ray_weights"].shape == (batch["image"].shape[0],)
        assert float(batch["ray_weights"].std()) > 0
        for ray in range(0, batch["image"].shape[0], 97):  # each ray's ground truth is its pixel's
            image, row, column = batch["indices"][ray].tolist()
            pixel = datamanager.train_dataset[image]["image"][row, column]
            assert torch.allclose(batch["image"][ray], pixel), ray
    finally:
        datamanager.close()


def test_the_benchmark_s_test_mode_draws_from_the_map_too(tiny_scene, tmp_path):
    """ns-accel-bench sets the trainer up in test mode (evaluation on the test split): training there must
    still draw by the error map."""
    torch.manual_seed(0)
    trainer = make_trainer(
        tiny_scene, tmp_path, test_mode="test", pipeline={"datamanager.error_guided_rays.enabled": True}
    )
    try:
        assert trainer.pipeline.datamanager.error_map is not None
        assert "ray_weights" in trainer.pipeline.datamanager.next_train(0)[1]
    finally:
        trainer.pipeline.datamanager.close()


def test_a_config_written_before_error_guided_rays_opens_with_them_off():
    """config.yml of an earlier run (ns-eval, ns-render, ns-viewer load it without calling __init__)."""
    import re

    import yaml

    from nerfstudio_accel.data.prefetching_datamanager import AccelDataManagerConfig

    text = yaml.dump(AccelDataManagerConfig())
    old_text = re.sub(r"error_guided_rays: .*\n(  .*\n)*", "", text)
    assert "error_guided_rays" not in old_text and "prefetch_batches" in old_text
    loaded = yaml.load(old_text, Loader=yaml.Loader)
    assert loaded.error_guided_rays == AccelDataManagerConfig().error_guided_rays
    assert not loaded.error_guided_rays.enabled


def test_the_colour_loss_is_the_weighted_mean_of_the_rays_errors(tiny_scene, tmp_path):
    trainer = make_trainer(tiny_scene, tmp_path)
    model = trainer.pipeline.model
    try:
        ray_bundle, batch = trainer.pipeline.datamanager.next_train(0)
        outputs = model(ray_bundle)
        errors = model.ray_errors(outputs, batch)
        plain = model.get_loss_dict(outputs, batch)["rgb_loss"]
        weights = torch.rand(errors.shape[0])
        weighted = model.get_loss_dict(outputs, {**batch, "ray_weights": weights})["rgb_loss"]
    finally:
        trainer.pipeline.datamanager.close()
    assert errors.shape == (len(ray_bundle),) and not errors.requires_grad
    assert float(plain) == pytest.approx(float(errors.mean()), rel=1e-5)
    assert float(weighted) == pytest.approx(float((errors * weights).mean()), rel=1e-5)


def test_patches_are_refused_in_one_line(tiny_scene, tmp_path):
    with pytest.raises(SystemExit, match="error-guided-rays.enabled does not suit this run: it draws single pixels"):
        error_guided_trainer(tiny_scene, tmp_path, **{"datamanager.patch_size": 2})


def test_a_model_that_does_not_weigh_rays_is_refused_in_one_line(tiny_scene, tmp_path):
    from nerfstudio_accel.methods import accel_nerfacto

    with pytest.raises(ConfigError, match="AccelNerfactoModel does not weigh its rays' losses; leave it off"):
        make_trainer(
            tiny_scene, tmp_path, method=accel_nerfacto.config, pipeline={"datamanager.error_guided_rays.enabled": True}
        )
