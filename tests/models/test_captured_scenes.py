"""accel-ngp on captured-like, unbounded scenes: sampler choice, bounded samples per ray, appearance
embeddings, camera refinement, learning, and ns-eval on a real phone capture."""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

import accel_test_helpers
from nerfstudio_accel.bench.budget import train_for_budget
from nerfstudio_accel.data.scene_checks import SceneFacts
from nerfstudio_accel.errors import ConfigError
from nerfstudio_accel.methods import accel_ngp
from nerfstudio_accel.sampling.proposal import ProposalSampler
from nerfstudio_accel.scenes.unbounded_scene import UnboundedSceneSpec, generate_unbounded_scene

FRUIT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "fruit"
LEARNING_STEPS = 400
LEARNING_TIME_CAP_SECONDS = 600.0  # bounds CPU time on a slow machine; the step count normally ends the run
LEARNING_MIN_PSNR = 20.0


@pytest.fixture(scope="module")
def unbounded_scene(tmp_path_factory) -> Path:
    spec = UnboundedSceneSpec(num_train=30, num_val=2, num_test=4, resolution=48, seed=2)
    return generate_unbounded_scene(tmp_path_factory.mktemp("unbounded"), spec)


def make_trainer(scene: Path, output_dir: Path, setup: bool = True, pipeline=None, **model_overrides):
    """accel-ngp's trainer on CPU on a nerfstudio-data scene, as ns-train builds it."""
    return accel_test_helpers.make_trainer(
        scene,
        output_dir,
        setup=setup,
        dataparser=NerfstudioDataParserConfig(),
        test_mode="test",
        pipeline=pipeline,
        model=model_overrides,
    )


def eval_rays(trainer, index: int = 0):
    camera = trainer.pipeline.datamanager.eval_dataset.cameras[index : index + 1]
    return camera.generate_rays(camera_indices=0).flatten()


@pytest.mark.parametrize(
    "bounded, sampler, appearance, poses",
    [(True, "occupancy", 0, "off"), (False, "proposal", 32, "SO3xR3")],
)
def test_auto_choices_follow_the_data(bounded, sampler, appearance, poses, caplog):
    """auto: the occupancy grid, no appearance embedding and fixed poses for object scenes (blender-data);
    the proposal sampler, 32-wide embeddings and pose refinement for captures; the choice is logged;
    explicit choices are kept."""
    config = copy.deepcopy(accel_ngp.config.pipeline.model)
    assert config.camera_optimizer.mode == "auto"
    with caplog.at_level(logging.INFO, logger="nerfstudio_accel.models.accel_ngp"):
        config.resolve("cpu", SceneFacts(bounded=bounded, images_have_alpha=None))
    assert config.sampler == sampler and config.appearance_embedding_dim == appearance
    assert config.camera_optimizer.mode == poses
    assert f"{sampler} sampler" in caplog.text and "--pipeline.model.sampler" in caplog.text
    explicit = copy.deepcopy(accel_ngp.config.pipeline.model)
    explicit.sampler = "occupancy" if sampler == "proposal" else "proposal"
    explicit.resolve("cpu", SceneFacts(bounded=bounded, images_have_alpha=None))
    assert explicit.sampler != sampler


def test_mismatched_proposal_rounds_are_refused_in_one_line():
    config = copy.deepcopy(accel_ngp.config.pipeline.model)
    config.proposal.samples_per_round = (128, 64, 32)
    with pytest.raises(ConfigError, match="one resolution per round"):
        config.resolve("cpu", SceneFacts(bounded=False, images_have_alpha=None))


@pytest.mark.parametrize("sampler", ["occupancy", "proposal"])
def test_samples_per_ray_are_bounded_on_an_unbounded_scene(unbounded_scene, tmp_path, sampler):
    """A fresh (foggy) field on an unbounded scene: the proposal sampler gives every ray exactly
    num_samples; the occupancy path keeps at most max_samples_per_ray, a cap that binds (uncapped
    marching yields more) — in training and in evaluation alike."""
    trainer = make_trainer(
        unbounded_scene, tmp_path, sampler=sampler, **{"occupancy.max_samples_per_ray": 64, "proposal.num_samples": 24}
    )
    model, pipeline = trainer.pipeline.model, trainer.pipeline
    ray_bundle, _ = pipeline.datamanager.next_train(0)
    model.train()
    if isinstance(model.sampler, ProposalSampler):
        assert torch.equal(model.sample(ray_bundle).packed.samples_per_ray(), torch.full((ray_bundle.shape[0],), 24))
        model.eval()
        with torch.no_grad():
            assert int(model.get_outputs(eval_rays(trainer))["num_samples_per_ray"].max()) == 24
        return
    model.sampler.update(0, model.field.density)
    assert int(model.sample(ray_bundle).packed.samples_per_ray().max()) <= 64
    model.eval()
    bundle = eval_rays(trainer)
    with torch.no_grad():
        per_ray = model.get_outputs(bundle)["num_samples_per_ray"]
        model.sampler.marching = dataclasses.replace(model.sampler.marching, max_samples_per_ray=None)
        marched = model.sampler.march(bundle.origins, bundle.directions)[0]
    assert int(per_ray.max()) <= 64
    assert int(torch.bincount(marched).max()) > 64, "the cap should bind on a fresh field"


def test_appearance_embedding_per_image_in_training_mean_in_evaluation(unbounded_scene, tmp_path):
    """Training rays render with their own image's embedding; evaluation (unseen images) with the mean."""
    trainer = make_trainer(unbounded_scene, tmp_path)
    model = trainer.pipeline.model
    field = model.field
    assert field.appearance is not None and field.appearance.num_embeddings == 30
    with torch.no_grad():
        field.appearance.weight.normal_(std=1.0)
    bundle = eval_rays(trainer)[:64]
    model.train()
    torch.manual_seed(0)
    with torch.no_grad():
        samples = model.sample(bundle)
        first = model.field_raw(samples)[1]
        samples.packed.camera_indices = torch.full_like(samples.packed.camera_indices, 7)
        seventh = model.field_raw(samples)[1]
        model.eval()
        evaluated = model.field_raw(samples)[1]
        samples.packed.camera_indices = torch.zeros_like(samples.packed.camera_indices)
        assert torch.equal(model.field_raw(samples)[1], evaluated)  # any index: the mean embedding
    assert not torch.allclose(first, seventh)
    mean_vector = field.appearance.weight.mean(dim=0)
    assert torch.equal(field.appearance_vectors(None, 3), mean_vector.expand(3, -1))


def test_camera_optimizer_flag_refines_poses_under_hard_mining(unbounded_scene, tmp_path):
    """Pose refinement (auto: SO3xR3 on a capture) adds a camera_opt parameter group that the mined step
    trains (its pose corrections move); --pipeline.model.camera-optimizer.mode off has no such group."""
    from nerfstudio.cameras.camera_optimizers import CameraOptimizerConfig

    plain = make_trainer(unbounded_scene, tmp_path / "plain", camera_optimizer=CameraOptimizerConfig(mode="off"))
    assert "camera_opt" not in plain.pipeline.get_param_groups()
    trainer = make_trainer(unbounded_scene, tmp_path / "refined", pipeline={"hard_mining": True})
    assert trainer.config.pipeline.model.camera_optimizer.mode == "SO3xR3"
    assert "camera_opt" in trainer.pipeline.get_param_groups()
    adjustment = trainer.pipeline.model.camera_optimizer.pose_adjustment
    before = adjustment.detach().clone()
    for step in range(3):
        trainer.pipeline.train()
        _, _, metrics = trainer.train_iteration(step)
    assert "camera_opt_translation_max" in metrics and "hard_mining_b" in metrics
    assert not torch.equal(adjustment.detach(), before)


def test_a_config_from_before_config_resolution_is_refused_in_one_line(unbounded_scene, tmp_path):
    """A config.yml written before configs were resolved once (emulated: the trained model's config without
    its ``resolved`` mark) is refused when nerfstudio's eval_setup opens it, with one line saying to retrain."""
    import yaml
    from nerfstudio.utils.eval_utils import eval_setup

    trainer = make_trainer(unbounded_scene, tmp_path)
    trainer.save_checkpoint(0)
    config = trainer.config
    del config.pipeline.model.__dict__["resolved"]
    config.load_dir = None
    config_path = config.get_base_dir() / "config.yml"
    config_path.write_text(yaml.dump(config), "utf8")
    assert "resolved:" not in config_path.read_text()
    with pytest.raises(ConfigError, match="written before nerfstudio-accel resolved its choices.*retrain") as refused:
        eval_setup(config_path, test_mode="test")
    assert "\n" not in str(refused.value)


@pytest.mark.slow
def test_proposal_sampler_learns_an_unbounded_scene_within_cpu_budget(unbounded_scene, tmp_path):
    """accel-ngp with its captured-scene defaults (proposal sampler, contraction, appearance embeddings)
    reaches a PSNR threshold on held-out views of the generated unbounded scene in a bounded CPU run."""
    torch.manual_seed(0)
    trainer = make_trainer(unbounded_scene, tmp_path)
    assert isinstance(trainer.pipeline.model.sampler, ProposalSampler)
    run = train_for_budget(trainer, LEARNING_TIME_CAP_SECONDS, max_steps=LEARNING_STEPS)
    psnr = run.curve[-1]["psnr"]
    print(
        f"unbounded learning test: {run.steps} steps, {run.train_seconds:.1f} s, {run.ms_per_step:.0f} ms/step, test PSNR {psnr:.2f} dB"
    )
    assert psnr >= LEARNING_MIN_PSNR


@pytest.mark.slow
@pytest.mark.skipif(not (FRUIT / "transforms.json").is_file(), reason=f"the phone capture is not at {FRUIT}")
def test_trains_and_ns_eval_scores_a_real_phone_capture(tmp_path):
    """As a user types it: ns-train accel-ngp on ../shared/data/fruit (COLMAP poses with distortion) at
    1/8 scale for a few steps, then ns-eval over its test views writes finite PSNR and SSIM."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    bin_dir = Path(sys.executable).parent
    train = subprocess.run(
        [
            str(bin_dir / "ns-train"),
            "accel-ngp",
            "--max-num-iterations",
            "60",
            "--vis",
            "tensorboard",
            "--machine.device-type",
            "cpu",
            "--output-dir",
            str(tmp_path),
            "--experiment-name",
            "fruit",
            "--timestamp",
            "run",
            "--steps-per-eval-batch",
            "0",
            "--steps-per-eval-image",
            "0",
            "--steps-per-eval-all-images",
            "100000",
            "--pipeline.datamanager.camera-res-scale-factor",
            "0.125",
            "nerfstudio-data",
            "--data",
            str(FRUIT),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert train.returncode == 0, train.stderr[-2000:]
    config = tmp_path / "fruit" / "accel-ngp" / "run" / "config.yml"
    assert "sampler: proposal" in config.read_text()
    out = tmp_path / "eval.json"
    evaluate = subprocess.run(
        [str(bin_dir / "ns-eval"), "--load-config", str(config), "--output-path", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert evaluate.returncode == 0, evaluate.stderr[-2000:]
    results = json.loads(out.read_text())["results"]
    assert results["psnr"] > 8.0 and 0.0 < results["ssim"] <= 1.0
    assert results["num_samples_per_ray"] == pytest.approx(32.0)  # the CPU default of the proposal sampler
