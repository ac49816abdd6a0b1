"""Coarse-to-fine hash-grid levels (--pipeline.model.coarse-to-fine-steps): the schedule and what it does to a step."""

from __future__ import annotations

import pytest
import torch

from accel_test_helpers import make_trainer, run_steps
from nerfstudio_accel.fields.coarse_to_fine import level_weights


def test_schedule_values():
    start = level_weights(0, num_levels=16, features_per_level=2, start_levels=4, ramp_steps=120)
    assert start.shape == (32,) and start[:8].eq(1).all() and start[8:].eq(0).all()
    # step 25: active = 4 + 12 * 25/120 = 6.5 -> levels 0-5 full, level 6 half, the rest off
    middle = level_weights(25, 16, 2, 4, 120).reshape(16, 2)[:, 0]
    assert middle[:6].eq(1).all() and middle[6] == pytest.approx(0.5) and middle[7:].eq(0).all()
    weights = [level_weights(step, 16, 2, 4, 120) for step in range(0, 120, 7)]
    assert all(torch.all(later >= earlier) for earlier, later in zip(weights, weights[1:]))  # levels only enter
    assert level_weights(120, 16, 2, 4, 120) is None and level_weights(5000, 16, 2, 4, 120) is None
    assert level_weights(0, 16, 2, 4, 0) is None  # off
    assert level_weights(0, 4, 2, 4, 100) is None  # every level active from the start


def test_finer_levels_get_no_gradient_until_they_enter(tiny_scene, tmp_path):
    """At step 0 only the start levels' table rows learn; once the ramp is over, the weights are gone and a
    checkpoint loaded at a step inside the ramp gets that step's weights back."""
    torch.manual_seed(0)
    trainer = make_trainer(tiny_scene, tmp_path, model={"coarse_to_fine_steps": 50, "coarse_to_fine_start_levels": 3})
    model = trainer.pipeline.model
    layout = model.field.position_encoding.layout
    with torch.no_grad():
        model.field.density_mlp.layers[-1].bias[0] += 4.0  # samples survive the first grid update's culling
    run_steps(trainer, 0, 1)
    grad = model.field.position_encoding.table.grad.reshape(-1, layout.features_per_level)
    boundary = layout.level_offsets[3]
    assert grad[:boundary].abs().sum() > 0 and grad[boundary:].abs().sum() == 0
    model.update_to_step(50)
    assert model.field.level_weights is None
    model.update_to_step(10)  # what loading a step-10 checkpoint does
    assert model.field.level_weights is not None and model.field.level_weights[-1] == 0
