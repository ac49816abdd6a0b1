"""Configs are built as ns-train builds them and resolved once; an unresolved config is refused."""

from __future__ import annotations

import yaml
from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig

from accel_test_helpers import run_steps
from nerfstudio_accel.engine.build import build_trainer_config
from nerfstudio_accel.methods import accel_ngp


def test_flags_apply_and_the_config_comes_back_resolved(tiny_scene, tmp_path):
    config = build_trainer_config(
        "accel-ngp",
        tiny_scene,
        "cpu",
        BlenderDataParserConfig(),
        flags=["--pipeline.model.background", "black"],
        output_dir=tmp_path,
    )
    model = config.pipeline.model
    assert model.resolved and model.background == "black" and config.precision == "fp32"
    assert (model.scene_contraction, model.sampler, model.hash_backend) == ("off", "occupancy", "kernel")
    assert config.pipeline.datamanager.dataparser.alpha_color is None, "accel-ngp blends its own background into RGBA"
    assert accel_ngp.config.pipeline.model.background == "auto", "the registered config is copied, never changed"


def test_building_and_training_change_nothing_in_a_resolved_config(tiny_scene, tmp_path):
    """Resolution happens once, before config.yml is written: the trainer, pipeline and model only read it."""
    config = build_trainer_config("accel-ngp", tiny_scene, "cpu", BlenderDataParserConfig(), output_dir=tmp_path)

    def resolved_part(config) -> str:
        return yaml.dump((config.pipeline, config.precision, config.mixed_precision, config.use_grad_scaler))

    resolved = resolved_part(config)
    trainer = config.setup(local_rank=0, world_size=1)
    trainer.setup()
    run_steps(trainer, 0, 2)
    assert resolved_part(config) == resolved
