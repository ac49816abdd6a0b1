"""Paths that only a CUDA GPU runs: fp16 loss scaling with hard mining, resume of a CPU checkpoint under
fp16, and the README's recipe (train with --machine.device-type cpu, ns-eval where CUDA is picked).
Their CPU simulations live beside the code they test; these run the real thing and skip without a GPU."""

from __future__ import annotations

import json
import math

import pytest
import torch

from accel_test_helpers import make_trainer, run_steps

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_fp16_mined_training_survives_an_empty_step(tiny_scene, tmp_path):
    """accel-ngp on CUDA with --precision auto (fp16 + GradScaler) and hard mining: a step that marches no
    sample leaves the scale alone, ordinary steps log it, and losses stay finite."""
    torch.manual_seed(0)
    trainer = make_trainer(tiny_scene, tmp_path, device="cuda", pipeline={"hard_mining": True})
    assert trainer.precision == "fp16" and trainer.grad_scaler.is_enabled()
    losses = run_steps(trainer, 0, 20)
    assert all(math.isfinite(loss) for loss in losses)
    scale = trainer.grad_scaler.get_scale()
    grid = trainer.pipeline.model.sampler.grid
    occupied = grid.binaries.clone()
    grid.binaries.zero_()
    _, _, metrics = trainer.train_iteration(20)
    assert float(metrics["hard_mining_B"]) == 0 and trainer.grad_scaler.get_scale() == scale
    grid.binaries.copy_(occupied)
    _, _, metrics = trainer.train_iteration(21)
    assert "loss_scale" in metrics


def test_cpu_checkpoint_resumes_under_fp16_on_cuda(tiny_scene, tmp_path):
    """A CPU run (fp32, no scaler state) resumed on CUDA with fp16, given the CPU run's sizes."""
    torch.manual_seed(0)
    first = make_trainer(tiny_scene, tmp_path / "cpu")
    run_steps(first, 0, 3)
    first.save_checkpoint(2)
    saved = first.config.pipeline.model  # the CPU run's resolved sizes, which CUDA's defaults would change
    cpu_sizes = {"log2_hashmap_size": saved.log2_hashmap_size, "occupancy.resolution": saved.occupancy.resolution}
    resumed = make_trainer(tiny_scene, tmp_path / "cuda", device="cuda", model=cpu_sizes, load_dir=first.checkpoint_dir)
    assert resumed._start_step == 3 and resumed.grad_scaler.is_enabled()
    assert all(math.isfinite(loss) for loss in run_steps(resumed, 3, 3))


@pytest.mark.slow
def test_readme_recipe_cpu_training_then_ns_eval_on_cuda(run_cli, tiny_scene, tmp_path):
    """ns-train --machine.device-type cpu, then ns-eval, which builds the model on CUDA here."""
    code, out, err = run_cli(
        "ns-train", "accel-ngp", "--machine.device-type", "cpu", "--vis", "tensorboard", "--max-num-iterations", "20",
        "--output-dir", tmp_path, "--experiment-name", "exp", "--timestamp", "run",
        "blender-data", "--data", tiny_scene, timeout=600,
    )  # fmt: skip
    assert code == 0, err[-3000:]
    eval_json = tmp_path / "eval.json"
    code, out, err = run_cli(
        "ns-eval",
        "--load-config",
        tmp_path / "exp" / "accel-ngp" / "run" / "config.yml",
        "--output-path",
        eval_json,
        timeout=600,
    )
    assert code == 0, (out + err)[-3000:]
    assert math.isfinite(json.loads(eval_json.read_text())["results"]["psnr"])


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_triton_hash_encoding_writes_autocast_half_on_cuda(half):
    """Under CUDA autocast the fused encoding returns autocast's half type (no cast pass before the MLP), within
    one rounding of its float32 result, and its table gradient from a half upstream matches float32's."""
    from nerfstudio_accel.encodings.hash_encoding import MultiresHashEncoding
    from nerfstudio_accel.kernels.hash_layout import HashGridLayout

    layout = HashGridLayout.from_resolutions(16, 16, 2048, 19, features_per_level=2)
    encoding = MultiresHashEncoding(layout, backend="kernel").cuda()
    with torch.no_grad():
        encoding.table.uniform_(-1.0, 1.0)
    points = torch.rand(50000, 3, device="cuda")
    full = encoding(points)
    (full.float() * 2).sum().backward()
    full_grad, encoding.table.grad = encoding.table.grad.clone(), None
    with torch.autocast("cuda", dtype=half):
        halved = encoding(points)
    (halved.float() * 2).sum().backward()
    assert full.dtype == torch.float32 and halved.dtype == half
    torch.testing.assert_close(halved.float(), full, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(encoding.table.grad, full_grad, rtol=1e-5, atol=1e-5)
