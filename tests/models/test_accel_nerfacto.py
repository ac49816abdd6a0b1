"""accel-nerfacto: nerfacto behind the hard-mining seams, mined main field, proposal networks as usual."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from nerfstudio.field_components.field_heads import FieldHeadNames

import accel_test_helpers
from nerfstudio_accel import metrics as accel_metrics
from nerfstudio_accel.bench.budget import train_for_budget
from nerfstudio_accel.data.scene_checks import SceneFacts
from nerfstudio_accel.methods import accel_nerfacto
from nerfstudio_accel.models.accel_nerfacto import AccelNerfactoModelConfig
from nerfstudio_accel.pipelines.hard_mining import HardSampleMiningPipelineConfig


def make_trainer(scene, output_dir, **pipeline_overrides):
    """accel-nerfacto as ns-train builds it, mining (unless overridden), on CPU with torch encodings, on a
    Blender-format scene."""
    assert isinstance(accel_nerfacto.config.pipeline, HardSampleMiningPipelineConfig)
    return accel_test_helpers.make_trainer(
        scene,
        output_dir,
        method=accel_nerfacto.config,
        pipeline={"hard_mining": True, **pipeline_overrides},
        model={"implementation": "torch"},
    )


def test_auto_mines_object_scenes_and_not_captures():
    """accel-nerfacto's measured default (docs/hard_mining.md): ahead on lego, behind on the capture fruit
    (CPU); off on CUDA, where a mined proposal step costs more than an ordinary one."""
    config = AccelNerfactoModelConfig()
    assert config.hard_mining_pays("cpu", SceneFacts(bounded=True, images_have_alpha=True))
    assert not config.hard_mining_pays("cpu", SceneFacts(bounded=False, images_have_alpha=False))
    assert not config.hard_mining_pays("cuda", SceneFacts(bounded=True, images_have_alpha=True))


def test_mining_is_on_by_default_and_off_when_asked(tiny_scene, tmp_path):
    """auto resolves to hard mining for accel-nerfacto on an object scene (measured ahead: docs/hard_mining.md)."""
    assert accel_nerfacto.config.pipeline.hard_mining == "auto"
    default = make_trainer(tiny_scene, tmp_path / "default", hard_mining="auto")
    assert default.config.pipeline.hard_mining is True and default.pipeline.mines_hard_samples()
    assert not make_trainer(tiny_scene, tmp_path / "ordinary", hard_mining=False).pipeline.mines_hard_samples()


def test_seams_reproduce_nerfactos_field(tiny_scene, tmp_path):
    """field_raw + activations give what the field's own forward gives (nerfacto's outputs)."""
    torch.manual_seed(0)
    pipeline = make_trainer(tiny_scene, tmp_path).pipeline
    model = pipeline.model
    ray_bundle, _ = pipeline.datamanager.next_train(0)
    with torch.no_grad():
        samples = model.sample(ray_bundle)
        raw_density, raw_color = model.field_raw(samples)
        reference = model.field(samples.ray_samples)
    assert torch.allclose(torch.sigmoid(raw_color), reference[FieldHeadNames.RGB], atol=1e-6)
    assert torch.allclose(
        model.field.activate_density(samples.ray_samples, raw_density), reference[FieldHeadNames.DENSITY], atol=1e-6
    )


def test_all_samples_mined_gives_nerfactos_gradients(tiny_scene, tmp_path):
    """With b = B, every parameter (main field, proposal networks, camera optimizer) gets the gradient
    of ordinary nerfacto training, and the loss value (rgb + interlevel + distortion) is the same."""
    pipeline = make_trainer(tiny_scene, tmp_path, min_hard_fraction=1.0).pipeline
    model = pipeline.model
    model.train()
    ray_bundle, batch = pipeline.datamanager.next_train(0)
    names, params = zip(*[(name, p) for name, p in model.named_parameters() if p.requires_grad])

    def gradients(loss_fn):
        model.zero_grad(set_to_none=False)
        torch.manual_seed(1)  # the proposal sampler's jitter draws alike in both runs
        loss = loss_fn(copy.deepcopy(ray_bundle))
        loss.backward()
        return float(loss), [None if p.grad is None else p.grad.clone() for p in params]

    def ordinary(bundle):
        outputs = model(bundle)
        metrics = model.get_metrics_dict(outputs, batch)
        return sum(model.get_loss_dict(outputs, batch, metrics).values())

    ordinary_loss, expected = gradients(ordinary)
    mined_loss, mined = gradients(lambda bundle: sum(pipeline.mined_loss(bundle, batch)[1].values()))
    assert mined_loss == pytest.approx(ordinary_loss, rel=1e-6)
    assert any(g is not None and g.abs().sum() > 0 for g in expected)
    proposal_params = {id(p) for p in model.proposal_networks.parameters()}
    checked_proposal = False
    for name, param, want, got in zip(names, params, expected, mined):
        assert (want is None) == (got is None), name
        if want is None:
            continue
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-8), name
        checked_proposal |= id(param) in proposal_params and bool(want.abs().sum() > 0)
    assert checked_proposal, "the proposal networks must get their usual (non-zero) gradient"


def test_mined_nerfacto_trains_and_evaluates_offline(tiny_scene, tmp_path, monkeypatch):
    """A few mined steps through nerfstudio's Trainer, then evaluation without LPIPS weights on disk."""
    monkeypatch.setattr(accel_metrics, "alexnet_checkpoint_path", lambda: str(tmp_path / "absent.pth"))
    torch.manual_seed(0)
    trainer = make_trainer(tiny_scene, tmp_path)
    before = [p.detach().clone() for p in trainer.pipeline.model.field.parameters()]
    run = train_for_budget(trainer, budget_seconds=math.inf, max_steps=6)  # the step count ends it, never the clock
    assert run.steps == 6
    assert any(not torch.equal(a, b) for a, b in zip(trainer.pipeline.model.field.parameters(), before))
    _, _, metrics = trainer.pipeline.get_train_loss_dict(6)
    assert 0 < float(metrics["hard_mining_b"]) <= float(metrics["hard_mining_B"])
    metrics = trainer.pipeline.get_average_eval_image_metrics()
    assert {"psnr", "ssim"} <= set(metrics) and "lpips" not in metrics
