"""What AccelTrainer says on the console: one precision line (none of nerfstudio's CPU note or scaler warnings),
the loss scale's calibration once rather than a line per skipped step, and a loss dict the loggers can read."""

from __future__ import annotations

import warnings

import torch

from accel_test_helpers import make_trainer, run_steps
from nerfstudio_accel.engine.trainer import CPU_MIXED_PRECISION_NOTE


def test_bf16_on_cpu_is_said_once_without_nerfstudios_note_or_scaler_warnings(tiny_scene, tmp_path, capsys):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_trainer(tiny_scene, tmp_path, setup=False, precision="bf16")
    out = capsys.readouterr().out
    assert "Training precision: bf16 on cpu" in out
    assert CPU_MIXED_PRECISION_NOTE not in out
    assert not [w for w in caught if "GradScaler" in str(w.message)], [str(w.message) for w in caught]


def test_loss_scale_calibration_is_said_once_then_real_skips_per_step(tiny_scene, tmp_path, capsys):
    """fp16's scaler (simulated by an enabled CPU GradScaler): the first three steps' gradients overflow with a
    finite loss, as a too-large initial scale makes them; one line says so, one says where it settled."""
    torch.manual_seed(0)
    trainer = make_trainer(tiny_scene, tmp_path)
    trainer.use_grad_scaler = True
    trainer.grad_scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    param = next(trainer.pipeline.model.field.parameters())
    hook = param.register_hook(lambda grad: torch.full_like(grad, float("inf")))
    capsys.readouterr()
    run_steps(trainer, 0, 3)
    hook.remove()
    run_steps(trainer, 3, 1)
    out = capsys.readouterr().out
    assert out.count("Calibrating the loss scale") == 1 and "step skipped" not in out
    assert "Loss scale calibrated: 8192 after 3 skipped steps" in out
    hook = param.register_hook(lambda grad: torch.full_like(grad, float("inf")))
    run_steps(trainer, 4, 2)
    out = capsys.readouterr().out
    assert "step 4: non-finite loss or gradients, step skipped (1 in a row)" in out
    assert "step 5: non-finite loss or gradients, step skipped (2 in a row)" in out


def test_the_logged_loss_dict_holds_no_graph(tiny_scene, tmp_path):
    trainer = make_trainer(tiny_scene, tmp_path)
    _, loss_dict, _ = trainer.train_iteration(0)
    assert loss_dict and not any(value.requires_grad for value in loss_dict.values())
