"""accel-ngp's sampler options that moved into their own groups: every old name maps to a field that exists, an old
flag stops with the new one's name, and a config written with the old names opens with them moved."""

from __future__ import annotations

import operator

import pytest
import yaml

from nerfstudio_accel.errors import ConfigError
from nerfstudio_accel.models.accel_ngp import AccelNGPModelConfig
from nerfstudio_accel.renamed_flags import MOVED_MODEL_FIELDS, refuse_moved_flags


def test_every_moved_field_has_a_new_home_and_no_old_name_is_left():
    config = AccelNGPModelConfig()
    for old, new in MOVED_MODEL_FIELDS.items():
        group, name = new.split(".")
        assert name in type(getattr(config, group)).__dataclass_fields__, new
        assert old not in AccelNGPModelConfig.__dataclass_fields__, old


@pytest.mark.parametrize(
    "args, named",
    [
        (["--pipeline.model.grid-resolution", "32"], "--pipeline.model.occupancy.resolution"),
        (["--pipeline.model.sampler_backend=torch"], "--pipeline.model.occupancy.backend"),
        (
            ["--vis", "viewer", "--pipeline.model.proposal-samples", "64", "32"],
            "--pipeline.model.proposal.samples-per-round",
        ),
    ],
)
def test_an_old_flag_is_refused_with_its_new_name(args, named):
    with pytest.raises(ConfigError, match=f" is now {named} "):
        refuse_moved_flags(args)


def test_current_flags_and_other_arguments_pass():
    refuse_moved_flags(["--pipeline.model.occupancy.resolution", "32", "--pipeline.model.sampler", "proposal"])
    refuse_moved_flags(["grid_resolution", "--pipeline.model.num-levels=8", "--data", "x"])


def test_a_saved_config_with_the_old_names_opens_with_them_moved():
    """As yaml (nerfstudio's config.yml) writes a config of before the move: the flat fields land in their groups."""
    before = AccelNGPModelConfig()
    del vars(before)["occupancy"], vars(before)["proposal"]
    vars(before).update(grid_resolution=32, sampler_backend="torch", num_samples=24, proposal_samples=(64, 32))
    text = yaml.dump(before)
    assert "grid_resolution: 32" in text and "occupancy:" not in text
    config = yaml.load(text, Loader=yaml.Loader)
    assert isinstance(config, AccelNGPModelConfig)
    values = {new: operator.attrgetter(new)(config) for new in MOVED_MODEL_FIELDS.values()}
    assert values["occupancy.resolution"] == 32 and values["occupancy.backend"] == "torch"
    assert values["proposal.num_samples"] == 24 and list(values["proposal.samples_per_round"]) == [64, 32]
    assert values["occupancy.update_every"] == 16, "an option the old file did not name keeps its default"
    assert not any(old in vars(config) for old in MOVED_MODEL_FIELDS)


def test_methods_that_keep_the_old_names_are_not_stopped(monkeypatch, tiny_scene, tmp_path):
    """nerfacto and accel-nerfacto still have --pipeline.model.distortion-loss-mult: loading the catalogue for their
    ns-train, and building their config with it, go through; accel-ngp's is refused."""
    import importlib

    import nerfstudio_accel.methods as methods
    from nerfstudio_accel.engine.build import build_trainer_config

    monkeypatch.setattr("sys.argv", ["ns-train", "nerfacto", "--pipeline.model.distortion-loss-mult", "0"])
    importlib.reload(methods)
    monkeypatch.setattr("sys.argv", ["ns-train", "accel-ngp", "--pipeline.model.distortion-loss-mult", "0"])
    with pytest.raises(ConfigError, match="is now --pipeline.model.proposal.distortion-loss-mult"):
        importlib.reload(methods)
    monkeypatch.setattr("sys.argv", ["pytest"])
    importlib.reload(methods)
    config = build_trainer_config(
        methods.accel_nerfacto.config, tiny_scene, "cpu", flags=["--pipeline.model.distortion-loss-mult", "0.01"],
        output_dir=tmp_path, resolve=False,
    )  # fmt: skip
    assert config.pipeline.model.distortion_loss_mult == 0.01
    with pytest.raises(ConfigError, match="is now"):
        build_trainer_config(
            methods.accel_ngp.config, tiny_scene, "cpu", flags=["--pipeline.model.grid-resolution", "32"],
            output_dir=tmp_path, resolve=False,
        )  # fmt: skip
