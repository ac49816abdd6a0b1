"""The pipelined input sampler: same batches as without it, in order; errors reach the step; it stops."""

from __future__ import annotations

import gc
import random
import time

import pytest
import torch
from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig

from accel_test_helpers import make_trainer, run_steps
from nerfstudio_accel.data.prefetching_datamanager import AccelDataManagerConfig, BatchPrefetcher, tensors_in
from nerfstudio_accel.engine.build import build_trainer_config
from nerfstudio_accel.methods import accel_ngp


def trainer_with_prefetch(
    scene, output_dir, prefetch_batches: int, seed: int = 5, patch_size: int = 1, **trainer_overrides
):
    random.seed(seed)  # as nerfstudio's train_loop seeds each rank before building the trainer (python's
    torch.manual_seed(seed)  # generator orders the cached images, torch's seeds the pixel sampler)
    trainer = make_trainer(scene, output_dir, setup=False, **trainer_overrides)
    trainer.config.pipeline.datamanager.prefetch_batches = prefetch_batches
    trainer.config.pipeline.datamanager.patch_size = patch_size
    trainer.setup()
    return trainer


@pytest.mark.parametrize("patch_size", [1, 2])
def test_prefetched_batches_are_the_plain_batches_in_order(tiny_scene, tmp_path, patch_size):
    """With the same seed, prefetching 2 batches ahead yields exactly the batches (pixels, ground truth,
    rays) that preparing each on the training thread yields, in the same order, even while the training
    thread draws from torch's global generator in between; pixels or ``--pipeline.datamanager.patch-size``
    2 patches."""
    plain = trainer_with_prefetch(tiny_scene, tmp_path / "plain", 0, patch_size=patch_size).pipeline.datamanager
    ahead = trainer_with_prefetch(tiny_scene, tmp_path / "ahead", 2, patch_size=patch_size).pipeline.datamanager
    for datamanager in (plain, ahead):
        datamanager.train_pixel_sampler.set_num_rays_per_batch(96)
    try:
        for step in range(6):
            (rays_plain, batch_plain), (rays_ahead, batch_ahead) = plain.next_train(step), ahead.next_train(step)
            torch.rand(1000)  # the training step's own draws (stratified sampling, backgrounds)
            assert batch_plain.keys() == batch_ahead.keys()
            for key in batch_plain:
                assert torch.equal(batch_plain[key], batch_ahead[key]), (step, key)
            assert torch.equal(rays_plain.origins, rays_ahead.origins) and torch.equal(
                rays_plain.directions, rays_ahead.directions
            )
            assert rays_plain.origins.shape[0] == 96
        assert ahead._prefetcher is not None and ahead._prefetcher.running
        assert plain._prefetcher is None
        producer = ahead._prefetcher._thread
    finally:
        ahead.close()
    assert not producer.is_alive()


def test_other_seeds_draw_other_batches(tiny_scene, tmp_path):
    first = trainer_with_prefetch(tiny_scene, tmp_path / "a", 0, seed=5).pipeline.datamanager.next_train(0)[1]
    second = trainer_with_prefetch(tiny_scene, tmp_path / "b", 0, seed=6).pipeline.datamanager.next_train(0)[1]
    assert not torch.equal(first["indices"], second["indices"])


def test_training_stops_the_producer_and_logs_the_stall(tiny_scene, tmp_path):
    """ns-train's loop (AccelTrainer.train) with prefetching: the steps get their batches from the producer,
    the step's wait for its batch is logged as a fraction of the step, and when training ends no producer
    thread is left running."""
    trainer = trainer_with_prefetch(tiny_scene, tmp_path, 2, max_num_iterations=6)
    run_steps(trainer, 0, 2)
    metrics = trainer.last_metrics
    assert 0.0 <= float(metrics["input_stall_fraction"]) <= 1.0 and float(metrics["input_wait_ms"]) >= 0.0
    producer = trainer.pipeline.datamanager._prefetcher._thread
    assert producer.is_alive()
    trainer.train()
    assert trainer.pipeline.datamanager._prefetcher is None
    assert not producer.is_alive()


def test_a_datamanager_dropped_without_close_ends_its_producer(tiny_scene, tmp_path):
    """The producer holds its datamanager weakly: a trainer dropped mid-training (no train() end, no
    close()) leaves no thread behind once it is garbage."""
    trainer = trainer_with_prefetch(tiny_scene, tmp_path, 2)
    trainer.pipeline.datamanager.next_train(0)
    producer = trainer.pipeline.datamanager._prefetcher._thread
    del trainer
    gc.collect()
    producer.join(timeout=5)
    assert not producer.is_alive()


def test_a_failing_producer_raises_in_the_step_and_close_unblocks_a_full_queue():
    """An error while preparing a batch is raised by next() with its cause; a producer blocked on a full
    queue stops at close()."""
    calls = iter(range(3))

    def make_batch():
        index = next(calls)
        if index == 2:
            raise ValueError("image 7 is unreadable")
        return torch.tensor([index])

    failing = BatchPrefetcher(make_batch, depth=1, device=torch.device("cpu"))
    assert int(failing.next()) == 0 and int(failing.next()) == 1
    with pytest.raises(RuntimeError, match="image 7 is unreadable"):
        failing.next()
    failing.close()

    endless = BatchPrefetcher(lambda: torch.zeros(3), depth=2, device=torch.device("cpu"))
    deadline = time.monotonic() + 5
    while endless._queue.qsize() < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert endless._queue.full() and endless.running  # blocked on put
    endless.close()
    assert not endless.running
    with pytest.raises(RuntimeError, match="closed"):
        endless.next()


def test_tensors_in_finds_every_tensor_of_a_batch(tiny_scene, tmp_path):
    """The CUDA hand-over marks every tensor of a batch as used on the step's stream: the walk over a
    RayBundle and its ground-truth dict finds them all."""
    ray_bundle, batch = trainer_with_prefetch(tiny_scene, tmp_path, 0).pipeline.datamanager.next_train(0)
    found = {id(tensor) for tensor in tensors_in((ray_bundle, batch))}
    expected = [
        ray_bundle.origins,
        ray_bundle.directions,
        ray_bundle.pixel_area,
        ray_bundle.camera_indices,
        *batch.values(),
    ]
    assert all(id(tensor) in found for tensor in expected)


def test_the_default_depth_follows_the_device(tiny_scene, tmp_path):
    """Unset, the depth is 0 on the CPU (a producer thread would take the step's cores) and 2 elsewhere; a depth
    given is kept. A data manager built from an unresolved config resolves it for its own device."""
    for device_type, depth in (("cpu", 0), ("cuda", 2), ("mps", 2)):
        config = AccelDataManagerConfig()
        config.resolve(device_type)
        config.resolve("cpu" if device_type != "cpu" else "cuda")  # idempotent: a resolved depth stays
        assert config.prefetch_batches == depth, device_type
    given = AccelDataManagerConfig(prefetch_batches=3)
    given.resolve("cpu")
    assert given.prefetch_batches == 3
    trainer_config = build_trainer_config(accel_ngp.config, tiny_scene, "cpu", BlenderDataParserConfig(), resolve=False)
    config = trainer_config.pipeline.datamanager
    assert config.prefetch_batches is None
    datamanager = config.setup(device="cpu")
    datamanager.next_train(0)
    assert config.prefetch_batches == 0 and datamanager._prefetcher is None


def test_negative_prefetch_is_refused_in_one_line(tiny_scene, tmp_path):
    with pytest.raises(SystemExit, match="prefetch-batches must be 0 or more"):
        trainer_with_prefetch(tiny_scene, tmp_path, -1)


def test_patch_size_still_takes_patches(tiny_scene, tmp_path):
    """nerfstudio takes patches only when the pixel sampler config is exactly its own: the seeded one must
    not turn --pipeline.datamanager.patch-size off."""
    from nerfstudio.data.pixel_samplers import PatchPixelSampler

    torch.manual_seed(0)
    trainer = make_trainer(tiny_scene, tmp_path, setup=False)
    trainer.config.pipeline.datamanager.patch_size = 2
    trainer.setup()
    datamanager = trainer.pipeline.datamanager
    assert isinstance(datamanager.train_pixel_sampler, PatchPixelSampler)
    indices = datamanager.next_train(0)[1]["indices"]
    assert torch.equal(indices[1, 1:] - indices[0, 1:], torch.tensor([0, 1]))  # neighbours within a 2x2 patch
    datamanager.close()


def test_ns_exports_camera_poses_of_a_blender_scene(tiny_scene, tmp_path):
    """``ns-export cameras`` collects each training camera through the model's camera optimizer, asserting a
    metadata dict that nerfstudio's blender parser leaves None."""
    from nerfstudio.exporter.exporter_utils import collect_camera_poses

    trainer = make_trainer(tiny_scene, tmp_path)
    train_frames, eval_frames = collect_camera_poses(trainer.pipeline)
    assert len(train_frames) == len(trainer.pipeline.datamanager.train_dataset) and eval_frames


def test_producers_still_running_at_exit_are_stopped_and_joined():
    """The interpreter's exit hook stops every producer left running (a datamanager never closed), so no daemon
    thread is inside a torch op while the interpreter finalizes."""
    from nerfstudio_accel.data import prefetching_datamanager

    prefetcher = BatchPrefetcher(lambda: torch.zeros(4), depth=2, device=torch.device("cpu"))
    assert prefetcher.running
    prefetching_datamanager._close_running_prefetchers()
    assert not prefetcher.running
