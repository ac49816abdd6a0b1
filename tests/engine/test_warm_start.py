"""Warm start (--pipeline.model.init-from): which tensors load from another run, as groups or alone, when two
runs count as one scene, and what is reported."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from accel_test_helpers import make_trainer, run_steps
from nerfstudio_accel.data.scene_identity import scene_fingerprint
from nerfstudio_accel.engine.warm_start import checkpoint_of, network_tensor_names, warm_start
from nerfstudio_accel.errors import CheckpointError
from nerfstudio_accel.methods import accel_nerfacto
from nerfstudio_accel.ops._hash_encoding_torch import encode_torch

GRID_TENSORS = ("sampler.warmed_up", "sampler.grid.resolution", "sampler.grid.aabbs", "sampler.grid.occs")


def train_run(scene: Path, output_dir: Path, steps: int = 3, **overrides) -> Path:
    """An accel-ngp run folder as ns-train leaves it (config.yml, a checkpoint of its last step), trained
    ``steps`` steps with a grid warm-up of one step (so its sampler is warmed up); its absolute path."""
    torch.manual_seed(0)
    overrides["model"] = {"occupancy.warmup_steps": 1, **overrides.get("model", {})}
    trainer = make_trainer(scene, output_dir, **overrides)
    run_steps(trainer, 0, steps)
    trainer.config.save_config()
    trainer.save_checkpoint(steps - 1)
    return trainer.base_dir.absolute()


def console(capsys) -> str:
    """What was printed, its wrapping undone."""
    return " ".join(capsys.readouterr().out.split())


def other_camera_files(scene: Path, out: Path) -> Path:
    """A copy of ``scene`` whose training cameras see a wider angle: the same images, another scene."""
    shutil.copytree(scene, out)
    transforms = json.loads((out / "transforms_train.json").read_text())
    transforms["camera_angle_x"] *= 1.1
    (out / "transforms_train.json").write_text(json.dumps(transforms))
    return out


@pytest.fixture(scope="module")
def source_run(tiny_scene, tmp_path_factory):
    """A run folder trained 3 steps on the tiny scene (its grid warmed up); and its model's state."""
    run_folder = train_run(tiny_scene, tmp_path_factory.mktemp("source"))
    state = torch.load(checkpoint_of(run_folder), map_location="cpu")["pipeline"]
    return run_folder, {name.removeprefix("_model."): tensor for name, tensor in state.items()}


def test_same_scene_loads_every_tensor_and_a_fresh_optimizer(tiny_scene, source_run, tmp_path, capsys):
    run_folder, source_state = source_run
    assert bool(source_state["sampler.warmed_up"])
    torch.manual_seed(1)
    trainer = make_trainer(tiny_scene, tmp_path, model={"init_from": run_folder})
    state = trainer.pipeline.model.state_dict()
    for name, tensor in state.items():
        assert torch.equal(tensor, source_state[name]), name
    assert all(not optimizer.state for optimizer in trainer.optimizers.optimizers.values())
    printed = console(capsys)
    assert "Warm start from" in printed and "same scene (same camera files)" in printed
    assert f"loaded {len(state)} tensors" in printed
    assert "carried whole: field (HashGridField), sampler (OccupancySampler)" in printed
    assert "not carried" not in printed


def test_the_source_run_records_its_scene_in_config_yml(tiny_scene, source_run):
    run_folder, _ = source_run
    text = (run_folder / "config.yml").read_text()
    assert f"scene_path: {tiny_scene.resolve()}" in text
    assert f"scene_fingerprint: {scene_fingerprint(tiny_scene)}" in text


def test_a_grid_of_another_resolution_is_not_carried(tiny_scene, tmp_path, capsys):
    """A 32^3 grid into a 64^3 run: none of its buffers load (nerfacc's resolution, the warm-up flag), so
    the grid, fresh and consistent, is rebuilt from the warm field; the field loads."""
    source = train_run(tiny_scene, tmp_path / "source", model={"occupancy.resolution": 32})
    capsys.readouterr()
    trainer = make_trainer(tiny_scene, tmp_path / "run", model={"occupancy.resolution": 64, "init_from": source})
    sampler = trainer.pipeline.model.sampler
    assert sampler.grid.resolution.tolist() == [64, 64, 64]
    assert sampler.grid.binaries.shape == (1, 64, 64, 64) and sampler.grid.occs.shape == (64**3,)
    assert not bool(sampler.warmed_up) and not bool(sampler.grid.occs.any())
    printed = console(capsys)
    assert "carried whole: field (HashGridField)" in printed
    assert "not carried: sampler (OccupancySampler: sampler.grid.occs of another shape)" in printed
    run_steps(trainer, 0, 2)  # the first update evaluates the 64^3 cells
    assert sampler.grid.resolution.tolist() == [64, 64, 64] and bool(sampler.grid.binaries.any())


def test_a_hash_table_of_the_same_length_but_another_layout_is_not_carried(tiny_scene, tmp_path, capsys):
    """With 2^10 rows per level every level is hashed, so another --max-res keeps the table's length while
    moving every level's cells: the table stays this run's, and the grid, which summarised the old field, too."""
    model = {"log2_hashmap_size": 10}
    source = train_run(tiny_scene, tmp_path / "source", model={**model, "max_res": 2048})
    trainer = make_trainer(tiny_scene, tmp_path / "run", model={**model, "max_res": 512, "init_from": source})
    source_table = torch.load(checkpoint_of(source))["pipeline"]["_model.field.position_encoding.table"]
    table = trainer.pipeline.model.field.position_encoding.table
    assert table.shape == source_table.shape and not torch.equal(table, source_table)
    assert not bool(trainer.pipeline.model.sampler.warmed_up)
    printed = console(capsys)
    assert "not carried: field (HashGridField: hash grid of other sizes: max_res)" in printed
    assert "sampler (OccupancySampler: the field it summarises did not load whole)" in printed


def test_a_hash_table_of_fewer_rows_a_level_grows_into_this_runs(tiny_scene, tmp_path, capsys):
    """A 2^10-row run into a 2^12-row one: the table is laid out in the new rows (level 0 goes from hashed to
    dense, the others stay hashed), so the field reads the same features at points inside the grid, and the grid
    that summarises it is carried too."""
    source = train_run(tiny_scene, tmp_path / "source", model={"log2_hashmap_size": 10})
    capsys.readouterr()
    trainer = make_trainer(tiny_scene, tmp_path / "run", model={"log2_hashmap_size": 12, "init_from": source})
    encoding = trainer.pipeline.model.field.position_encoding
    source_table = torch.load(checkpoint_of(source))["pipeline"]["_model.field.position_encoding.table"]
    small = dataclasses.replace(encoding.layout, log2_hashmap_size=10)
    assert not small.level_is_dense(0) and encoding.layout.level_is_dense(0)
    points = torch.rand(2048, 3, generator=torch.Generator().manual_seed(0)) * 0.5 + 0.25
    before = encode_torch(points, source_table, small)
    assert torch.equal(encode_torch(points, encoding.table.detach(), encoding.layout), before)
    assert bool(trainer.pipeline.model.sampler.warmed_up)
    printed = console(capsys)
    assert "carried whole: field (HashGridField), sampler (OccupancySampler)" in printed
    assert "hash tables grown to this run's rows a level: field.position_encoding.table (2^10 to 2^12)" in printed


def test_the_same_folder_by_another_path_and_working_directory_is_the_same_scene(
    tiny_scene, tmp_path, monkeypatch, capsys
):
    """Trained from one folder with a relative --data; warm-started from another working directory through a
    symlink to the scene."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b" / "c").mkdir(parents=True)
    (tmp_path / "b" / "link").symlink_to(tiny_scene)
    monkeypatch.chdir(tmp_path / "a")
    source = train_run(Path(os.path.relpath(tiny_scene)), Path("outputs"))
    monkeypatch.chdir(tmp_path / "b" / "c")
    capsys.readouterr()
    trainer = make_trainer(Path("../link"), Path("outputs"), model={"init_from": source})
    assert trainer.pipeline.model.sampler.warmed_up
    assert "same scene (same camera files)" in console(capsys)


def test_a_folder_of_the_same_relative_name_with_other_cameras_is_another_scene(tiny_scene, tmp_path, monkeypatch):
    """``--data scene`` in two working directories names two folders: the second's cameras differ."""
    shutil.copytree(tiny_scene, tmp_path / "a" / "scene")
    other_camera_files(tiny_scene, tmp_path / "b" / "scene")
    monkeypatch.chdir(tmp_path / "a")
    source = train_run(Path("scene"), Path("outputs"))
    monkeypatch.chdir(tmp_path / "b")
    trainer = make_trainer(Path("scene"), Path("outputs"))
    report = warm_start(trainer.pipeline.model, source, Path("scene"))
    assert not report.same_scene and "another scene (other camera files): networks only" in report.line()
    assert "field.position_encoding.table" not in report.loaded and "sampler.grid.occs" not in report.loaded


def test_a_copy_of_the_scene_is_the_same_scene(tiny_scene, source_run, tmp_path):
    """The same camera files in another folder: the scene tensors load too."""
    run_folder, _ = source_run
    shutil.copytree(tiny_scene, tmp_path / "copy")
    trainer = make_trainer(tmp_path / "copy", tmp_path / "run")
    report = warm_start(trainer.pipeline.model, run_folder, tmp_path / "copy")
    assert report.same_scene and set(GRID_TENSORS) <= set(report.loaded)


def test_a_run_saved_before_scenes_were_recorded_reads_its_data_from_where_it_ran(tiny_scene, tmp_path, monkeypatch):
    """No recorded path or fingerprint: the source's relative --data is taken from the folder it was trained
    in (its run folder less output_dir/experiment/method/timestamp), not from today's working directory."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b" / "c").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a")
    source = train_run(Path(os.path.relpath(tiny_scene)), Path("outputs"))
    config = source / "config.yml"
    recorded = ("scene_path:", "scene_fingerprint:")
    lines = config.read_text().splitlines(keepends=True)
    assert sum(line.lstrip().startswith(recorded) for line in lines) == 2
    config.write_text("".join(line for line in lines if not line.lstrip().startswith(recorded)))
    monkeypatch.chdir(tmp_path / "b" / "c")
    trainer = make_trainer(tiny_scene, Path("outputs"))
    report = warm_start(trainer.pipeline.model, source, Path(os.path.relpath(tiny_scene)))
    assert report.same_scene and "sampler.grid.occs" in report.loaded
    assert "same scene (its relative --data, from the folder it ran in)" in report.line()


def test_another_scene_loads_the_networks_only(tiny_scene, source_run, tmp_path, capsys):
    """The MLPs load; the hash table, occupancy grid, scene box and per-image tensors keep this run's values."""
    run_folder, source_state = source_run
    other_scene = other_camera_files(tiny_scene, tmp_path / "other_scene")
    torch.manual_seed(1)
    trainer = make_trainer(other_scene, tmp_path / "run", model={"init_from": run_folder})
    model = trainer.pipeline.model
    networks = network_tensor_names(model)
    assert any(name.startswith("field.density_mlp.") for name in networks)
    assert "field.position_encoding.table" not in networks
    state = model.state_dict()
    for name, tensor in state.items():
        if name in networks:
            assert torch.equal(tensor, source_state[name]), name
    assert not torch.equal(state["field.position_encoding.table"], source_state["field.position_encoding.table"])
    assert not bool(model.sampler.warmed_up)
    printed = console(capsys)
    assert "another scene (other camera files): networks only" in printed and "scene tensors" in printed
    assert f"loaded {len(networks)} tensors" in printed


def test_a_run_of_another_method_is_refused_in_one_line(tiny_scene, tmp_path):
    """accel-nerfacto into accel-ngp, same folder: only the scene box would load, a cold start in disguise."""
    source = make_trainer(tiny_scene, tmp_path / "source", method=accel_nerfacto.config)
    source.config.save_config()
    source.save_checkpoint(0)
    with pytest.raises(SystemExit) as exited:
        make_trainer(tiny_scene, tmp_path / "run", model={"init_from": source.base_dir})
    message = str(exited.value)
    assert message.startswith("error: ") and "\n" not in message
    assert "no network or field tensor" in message and "init-from" in message


def test_a_checkpoint_file_of_another_shape_skips_what_does_not_fit(tiny_scene, source_run, tmp_path):
    """A .ckpt given directly; a model with a smaller hash table loads the MLPs and says why the field's group
    (box and table) and the grid that summarises it did not."""
    run_folder, _ = source_run
    checkpoint = checkpoint_of(run_folder)
    assert checkpoint.suffix == ".ckpt" and checkpoint_of(checkpoint) == checkpoint
    trainer = make_trainer(tiny_scene, tmp_path, model={"log2_hashmap_size": 10})
    datamanager = trainer.config.pipeline.datamanager
    report = warm_start(trainer.pipeline.model, checkpoint, datamanager.data)
    assert report.same_scene and report.step == 2
    assert report.groups["field"] == ("HashGridField", "field.position_encoding.table of another shape")
    assert report.groups["sampler"] == ("OccupancySampler", "the field it summarises did not load whole")
    assert "field.aabb" not in report.loaded
    assert "field.density_mlp.layers.0.weight" in report.loaded
    assert "\n" not in report.line()


def test_a_path_without_checkpoint_is_refused_in_one_line(tiny_scene, tmp_path):
    with pytest.raises(CheckpointError) as refused:
        checkpoint_of(tmp_path)
    message = str(refused.value)
    assert "\n" not in message and str(tmp_path) in message and "init-from" in message


def test_a_run_in_another_number_of_blocks_is_refused_in_one_line(tiny_scene, source_run, tmp_path):
    run_folder, _ = source_run
    with pytest.raises(SystemExit) as exited:
        make_trainer(tiny_scene, tmp_path / "run", pipeline={"spatial_blocks": 2}, model={"init_from": run_folder})
    message = str(exited.value)
    assert message.startswith("error: ") and "\n" not in message
    assert "in 1 spatial block(s) and this run has 2" in message and "--pipeline.spatial-blocks 2" in message


def test_a_run_in_as_many_blocks_loads_every_tensor(tiny_scene, tmp_path, capsys):
    source = train_run(tiny_scene, tmp_path / "source", pipeline={"spatial_blocks": 2})
    source_state = torch.load(checkpoint_of(source), map_location="cpu")["pipeline"]
    trainer = make_trainer(tiny_scene, tmp_path / "run", pipeline={"spatial_blocks": 2}, model={"init_from": source})
    state = trainer.pipeline.model.state_dict()
    assert any(name.startswith("field.fields.1.") for name in state)
    for name, tensor in state.items():
        assert torch.equal(tensor, source_state[f"_model.{name}"]), name
    assert "not carried" not in console(capsys)
