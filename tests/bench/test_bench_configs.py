"""ns-accel-bench's inputs: method entries, dataparser choice, the ns-train config it builds, unsupported methods."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nerfstudio_accel.bench.configs import (
    BenchError,
    MethodSpec,
    build_config,
    check_data,
    parse_methods,
    prescaled_factor,
    resolve_dataparser,
    unsupported_reason,
)


def test_method_entries_split_on_commas_with_flags_after_a_colon():
    specs = parse_methods(
        ["accel-ngp,accel-ngp:--pipeline.hard-mining=False", "nerfacto:--precision bf16 --pipeline.hard-mining False"]
    )
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
    with pytest.raises(
        BenchError, match="no COLMAP model .* in colmap/sparse/0, sparse/0, sparse, which --dataparser colmap reads"
    ):
        resolve_dataparser(captured, "colmap")


def colmap_folder(
    root: Path,
    model: str = "sparse/0",
    prescaled: tuple = (),
    photos: tuple = ("a.jpg", "b.jpg"),
    registered: bool = True,
) -> Path:
    """A COLMAP-layout folder as far as the bench looks before training: a text model registering ``photos``
    (without ``registered``, a bare cameras.bin) and the photos in images/ (and images_N/ for each N in
    ``prescaled``)."""
    (root / model).mkdir(parents=True)
    if registered:
        (root / model / "cameras.txt").write_text("1 PINHOLE 4 4 2 2 2 2\n")
        (root / model / "images.txt").write_text(
            "".join(f"{index + 1} 1 0 0 0 0 0 0 1 {name}\n\n" for index, name in enumerate(photos))
        )
    else:
        (root / model / "cameras.bin").write_bytes(b"")
    for folder in ("images", *(f"images_{factor}" for factor in prescaled)):
        for name in photos:
            (root / folder / name).parent.mkdir(parents=True, exist_ok=True)
            (root / folder / name).write_bytes(b"")
    return root


def test_colmap_scenes_are_found_with_the_model_where_colmap_wrote_it(tmp_path: Path):
    from nerfstudio.data.dataparsers.colmap_dataparser import ColmapDataParserConfig

    mipnerf_like = colmap_folder(tmp_path / "garden", "sparse/0", prescaled=(4,))
    assert resolve_dataparser(mipnerf_like, "auto") == resolve_dataparser(mipnerf_like, "colmap") == "colmap"
    spec = MethodSpec.parse("accel-ngp")
    config = build_config(spec, mipnerf_like, "colmap", 4.0, "cpu", 0, tmp_path)
    parser = config.pipeline.datamanager.dataparser
    assert (
        isinstance(parser, ColmapDataParserConfig)
        and parser.data == mipnerf_like
        and parser.colmap_path == Path("sparse/0")
    )
    # --downscale 4 with images_4/ there: the parser reads those (ns-train ... colmap --downscale-factor 4); no resize on top.
    assert parser.downscale_factor == 4 and config.pipeline.datamanager.camera_res_scale_factor == 1.0
    # Without images_2/, --downscale 2 resizes the originals on load; the parser's own factor is pinned to 1.
    config = build_config(spec, mipnerf_like, "colmap", 2.0, "cpu", 0, tmp_path)
    assert (
        config.pipeline.datamanager.dataparser.downscale_factor == 1
        and config.pipeline.datamanager.camera_res_scale_factor == 0.5
    )
    processed = colmap_folder(tmp_path / "processed", "colmap/sparse/0")
    assert build_config(
        spec, processed, "colmap", 1.0, "cpu", 0, tmp_path
    ).pipeline.datamanager.dataparser.colmap_path == Path("colmap/sparse/0")


def test_downscale_maps_to_the_parsers_own_factor_only_where_its_images_exist(tiny_scene: Path, tmp_path: Path):
    capture = tmp_path / "capture"
    (capture / "images_2").mkdir(parents=True)
    (capture / "transforms.json").write_text(
        json.dumps({"frames": [{"file_path": "images/a.png"}, {"file_path": "images/b.png"}]})
    )
    (capture / "images_2" / "a.png").write_bytes(b"")
    assert prescaled_factor(capture, "nerfstudio-data", 2.0) == 1  # b.png is not downscaled
    (capture / "images_2" / "b.png").write_bytes(b"")
    assert prescaled_factor(capture, "nerfstudio-data", 2.0) == 2
    assert prescaled_factor(capture, "nerfstudio-data", 2.5) == prescaled_factor(capture, "nerfstudio-data", 1.0) == 1
    assert prescaled_factor(tiny_scene, "blender-data", 2.0) == 1
    config = build_config(MethodSpec.parse("nerfacto"), capture, "nerfstudio-data", 2.0, "cpu", 0, tmp_path)
    assert (
        config.pipeline.datamanager.dataparser.downscale_factor == 2
        and config.pipeline.datamanager.camera_res_scale_factor == 1.0
    )


def test_colmap_prescaled_factor_looks_only_at_the_photos_the_model_registers(tmp_path: Path):
    """The colmap parser reads images_N/<name> for each photo the model registers (names may hold folders):
    photos it did not register, anywhere under images/, neither count nor are listed."""
    capture = colmap_folder(tmp_path / "capture", prescaled=(2,), photos=("a.jpg", "day/b.jpg"))
    (capture / "images" / "rejected" / "blurry").mkdir(parents=True)
    (capture / "images" / "rejected" / "blurry" / "c.jpg").write_bytes(b"")
    assert prescaled_factor(capture, "colmap", 2.0) == 2
    assert prescaled_factor(capture, "colmap", 4.0) == 1  # no images_4/
    (capture / "images_2" / "day" / "b.jpg").unlink()
    assert prescaled_factor(capture, "colmap", 2.0) == 1
    (capture / "images_2" / "day" / "b.jpg").write_bytes(b"")
    (capture / "sparse" / "0" / "images.txt").write_text("not a model\n")
    assert prescaled_factor(capture, "colmap", 2.0) == 1  # unreadable: the originals, resized on load
    assert prescaled_factor(colmap_folder(tmp_path / "bare", prescaled=(2,), registered=False), "colmap", 2.0) == 1


def test_scene_checks_become_one_line_bench_errors(tmp_path: Path):
    folder = colmap_folder(tmp_path / "garden", registered=False)  # a cameras.bin but no images.bin
    with pytest.raises(BenchError, match=r"sparse/0 has cameras.bin but no images.bin"):
        check_data(folder, "colmap")
    capture = tmp_path / "capture"
    capture.mkdir()
    identity = [[1.0 if row == col else 0.0 for col in range(4)] for row in range(4)]
    (capture / "transforms.json").write_text(
        json.dumps({"frames": [{"file_path": "a.png", "transform_matrix": identity}]})
    )
    with pytest.raises(BenchError, match="no camera intrinsics fl_x, fl_y, cx, cy, w, h"):
        check_data(capture, "nerfstudio-data")


def test_blender_scene_checks_cover_the_splits_the_bench_trains_and_scores(tiny_scene: Path, tmp_path: Path):
    """train and test: a Blender scene without transforms_val.json passes, one without transforms_test.json not."""
    scene = tmp_path / "scene"
    shutil.copytree(tiny_scene, scene)
    (scene / "transforms_val.json").unlink()
    check_data(scene, "blender-data")
    (scene / "transforms_test.json").unlink()
    with pytest.raises(BenchError, match="has no transforms_test.json, which blender-data needs"):
        check_data(scene, "blender-data")


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
    assert (
        build_config(
            MethodSpec.parse("accel-ngp"), tiny_scene, "blender-data", 1.0, "cpu", 7, tmp_path
        ).pipeline.hard_mining
        == "auto"
    )


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
        return unsupported_reason(
            build_config(MethodSpec.parse(name), tiny_scene, "blender-data", 1.0, device, 0, tmp_path), device
        )

    assert "CUDA device" in reason("instant-ngp", "cpu")
    assert "CUDA device" in reason("splatfacto", "mps")
    assert reason("instant-ngp", "cuda") is None
    assert reason("accel-ngp", "cpu") is None
    assert reason("nerfacto", "cpu") is None
