"""Ray geometry stays fp32 in every precision: a pose-corrected ray under bf16 autocast is the fp32 one."""

from __future__ import annotations

import copy

import torch

from accel_test_helpers import make_trainer, run_steps
from nerfstudio_accel.methods import accel_nerfacto
from nerfstudio_accel.models.accel_ngp import AutoCameraOptimizerConfig


def trainer_with_pose_refinement(tiny_scene, tmp_path, method: str):
    """A trainer whose camera optimizer holds non-identity corrections (as after some training)."""
    torch.manual_seed(0)
    if method == "accel-nerfacto":
        trainer = make_trainer(tiny_scene, tmp_path, method=accel_nerfacto.config, model={"implementation": "torch"})
    else:
        trainer = make_trainer(
            tiny_scene, tmp_path, model={"camera_optimizer": AutoCameraOptimizerConfig(mode="SO3xR3")}
        )
    run_steps(trainer, 0, 1)  # with the first occupancy-grid update
    model = trainer.pipeline.model
    with torch.no_grad():
        model.camera_optimizer.pose_adjustment.normal_(0.0, 0.05)
    model.train()
    return trainer, model


def field_inputs(model, samples, autocast: bool):
    """The positions and directions accel-ngp's field_raw hands to its hash-grid field."""
    seen = {}
    field_raw = model.field.field_raw

    def recording(positions, directions, *args, **kwargs):
        seen.update(positions=positions.detach().clone(), directions=directions.detach().clone())
        return field_raw(positions, directions, *args, **kwargs)

    model.field.field_raw = recording
    try:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            model.field_raw(samples)
    finally:
        model.field.field_raw = field_raw
    return seen


def test_accel_ngp_corrected_rays_under_bf16_equal_fp32(tiny_scene, tmp_path):
    trainer, model = trainer_with_pose_refinement(tiny_scene, tmp_path, "accel-ngp")
    ray_bundle, _ = trainer.pipeline.datamanager.next_train(1)
    model.config.stratified_sampling = False
    samples = model.sample(ray_bundle)
    assert samples.packed.n_samples > 0
    fp32, bf16 = field_inputs(model, samples, autocast=False), field_inputs(model, samples, autocast=True)
    for name in ("positions", "directions"):
        assert bf16[name].dtype == torch.float32
        assert torch.equal(bf16[name], fp32[name]), (
            f"{name} differ by {float((bf16[name] - fp32[name]).abs().max()):.2e}"
        )
    uncorrected = samples.packed.directions[samples.ray_indices]
    assert not torch.allclose(fp32["directions"], uncorrected), "the corrections should move the rays"


def test_accel_nerfacto_corrected_rays_under_bf16_equal_fp32(tiny_scene, tmp_path):
    trainer, model = trainer_with_pose_refinement(tiny_scene, tmp_path, "accel-nerfacto")
    ray_bundle, _ = trainer.pipeline.datamanager.next_train(1)
    frustums = {}
    for autocast in (False, True):
        torch.manual_seed(1)  # the proposal sampler's stratified jitter
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            frustums[autocast] = model.sample(copy.copy(ray_bundle)).ray_samples.frustums
    for name in ("origins", "directions"):
        fp32, bf16 = getattr(frustums[False], name), getattr(frustums[True], name)
        assert bf16.dtype == torch.float32
        assert torch.equal(bf16, fp32), f"{name} differ by {float((bf16 - fp32).abs().max()):.2e}"
    assert not torch.allclose(frustums[False].directions[:, 0], ray_bundle.directions), (
        "the corrections should move the rays"
    )
