"""ns-accel-bench's inputs: method entries, dataparser choice, the ns-train config it builds, unsupported methods."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nerfstudio_accel.bench.configs import BenchError, MethodSpec, build_config, parse_methods, resolve_dataparser, unsupported_reason


def test_method_entries_split_on_commas_with_flags_after_a_colon():
    specs = parse_methods(["accel-ngp,accel-ngp:--pipeline.hard-mining=False", "nerfacto:--precision bf16 --pipeline.hard-mining False"])
    assert [spec.name for spec in specs] == ["accel-ngp", "accel-ngp", "nerfacto"]
    assert specs[0].flags == ()
    assert specs[1].flags == ("--pipeline.hard-mining=False",)
    assert specs[2].flags == ("--precision", "bf16", "--pipeline.hard-mining", "False")
    assert specs[1].label == "accel-ngp:--pipeline.hard-mining=False"


@pytest.mark.parametrize(
    "values, message",
    [
        (["accel-ngp,accel-ngp"], "twice"),
        ([" , "], "lists no method"),
        ([":--precision=bf16"], "no method name"),
        (["accel-ngp:--viewer.quit-on-train-completion 'True"], "cannot split"),
    ],
)
def test_bad_method_entries_are_refused(values, message):
    with pytest.raises(BenchError, match=message):
        parse_methods(values)


def test_dataparser_follows_the_scene_files(tiny_scene: Path, tmp_path: Path):
    assert resolve_dataparser(tiny_scene, "auto") == "blender-data"
    assert resolve_dataparser(tiny_scene, "blender-data") == "blender-data"
    captured = tmp_path / "captured"
    captured.mkdir()
    (captured / "transforms.json").write_text(json.dumps({"frames": []}))
    assert resolve_dataparser(captured, "auto") == "nerfstudio-data"
    with pytest.raises(BenchError, match="no transforms.json"):
        resolve_dataparser(tiny_scene, "nerfstudio-data")
    with pytest.raises(BenchError, match="no transforms_train.json"):
        resolve_dataparser(captured, "blender-data")
    with pytest.raises(BenchError, match="neither"):
        resolve_dataparser(tmp_path, "auto")
    with pytest.raises(BenchError, match="not a folder"):
        resolve_dataparser(tmp_path / "missing", "auto")


def test_config_is_ns_trains_with_the_entry_flags_and_bench_settings(tiny_scene: Path, tmp_path: Path):
    from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig

    spec = MethodSpec.parse("accel-ngp:--pipeline.hard-mining=False --precision bf16")
    config = build_config(spec, tiny_scene, "blender-data", 4.0, "cpu", 7, tmp_path)
    assert config.pipeline.hard_mining is False
    assert config.precision == "bf16"
    assert config.machine.device_type == "cpu" and config.machine.seed == 7
    assert isinstance(config.pipeline.datamanager.dataparser, BlenderDataParserConfig)
    assert config.pipeline.datamanager.dataparser.data == tiny_scene
    assert config.pipeline.datamanager.camera_res_scale_factor == 0.25
    assert config.vis == "tensorboard"
    # The registered config is not touched: a second entry of the same method starts from ns-train's defaults.
    assert build_config(MethodSpec.parse("accel-ngp"), tiny_scene, "blender-data", 1.0, "cpu", 7, tmp_path).pipeline.hard_mining is True


@pytest.mark.parametrize(
    "entry, message",
    [
        ("accel-ngpp", "unknown method 'accel-ngpp' in --methods; did you mean 'accel-ngp'?"),
        ("accel-ngp:--pipeline.hard-mining=Flase", "invalid choice 'Flase' for argument '--pipeline.hard-mining'"),
        ("accel-ngp:--no-such-flag=1", "Unrecognized options: --no-such-flag=1"),
    ],
)
def test_unknown_methods_and_bad_flags_give_one_line(entry: str, message: str, tiny_scene: Path, tmp_path: Path):
    with pytest.raises(BenchError) as error:
        build_config(MethodSpec.parse(entry), tiny_scene, "blender-data", 1.0, "cpu", 0, tmp_path)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_cuda_only_methods_are_unsupported_off_cuda(tiny_scene: Path, tmp_path: Path):
    def reason(name: str, device: str):
        return unsupported_reason(build_config(MethodSpec.parse(name), tiny_scene, "blender-data", 1.0, device, 0, tmp_path), device)

    assert "CUDA device" in reason("instant-ngp", "cpu")
    assert "CUDA device" in reason("splatfacto", "mps")
    assert reason("instant-ngp", "cuda") is None
    assert reason("accel-ngp", "cpu") is None
    assert reason("nerfacto", "cpu") is None
