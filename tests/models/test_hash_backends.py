"""accel-ngp with each hash backend: checkpoints move between backends, and the fused kernel learns as
the torch reference does (same steps, same seed). How much faster it learns is a benchmark, not a test:
``benchmarks/hash_encoding.py`` and ``ns-accel-bench`` (docs/hash_encoding.md)."""

from __future__ import annotations

import time

import pytest
import torch

from nerfstudio_accel.bench.budget import train_for_budget
from nerfstudio_accel.data.scenes import SceneSpec, generate_scene

from accel_test_helpers import make_trainer, run_steps

PARITY_STEPS = 150
MAX_PSNR_GAP_DB = 0.5


@pytest.mark.parametrize("saved_with, opened_with", [("kernel", "torch"), ("torch", "kernel")])
def test_checkpoint_from_one_backend_renders_the_same_with_another(tiny_scene, tmp_path, saved_with, opened_with):
    torch.manual_seed(0)
    trained = make_trainer(tiny_scene, tmp_path / saved_with, model={"hash_backend": saved_with})
    run_steps(trained, 0, 20)
    trained.save_checkpoint(19)
    reopened = make_trainer(
        tiny_scene, tmp_path / opened_with, model={"hash_backend": opened_with}, load_dir=trained.checkpoint_dir
    )
    assert reopened.pipeline.model.field.position_encoding.backend == opened_with
    camera = trained.pipeline.datamanager.eval_dataset.cameras[0:1]
    renders = []
    for trainer in (trained, reopened):
        trainer.pipeline.model.eval()
        renders.append(trainer.pipeline.model.get_outputs_for_camera(camera))
    assert renders[0]["accumulation"].mean() > 0.01  # the views show something learnt
    for key in ("rgb", "accumulation", "depth"):
        torch.testing.assert_close(renders[1][key], renders[0][key], atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def parity_scene(tmp_path_factory):
    return generate_scene(tmp_path_factory.mktemp("scene"), SceneSpec(num_train=40, num_val=2, num_test=4, resolution=48, seed=3))


@pytest.mark.slow
def test_kernel_backend_learns_like_the_torch_reference(parity_scene, tmp_path):
    """Same seed and steps: the fused kernel's test PSNR is within 0.5 dB of the reference's."""
    results = {}
    for backend in ("torch", "kernel"):
        torch.manual_seed(0)
        trainer = make_trainer(parity_scene, tmp_path / backend, model={"hash_backend": backend})
        started = time.process_time()
        run = train_for_budget(trainer, 3600.0, max_steps=PARITY_STEPS)
        results[backend] = (run.curve[-1]["psnr"], time.process_time() - started)
    print("hash backends, PSNR and CPU seconds:", results)  # seconds are reported, never asserted
    assert results["torch"][0] > 18.0  # the reference learnt the scene at all
    assert results["kernel"][0] >= results["torch"][0] - MAX_PSNR_GAP_DB
