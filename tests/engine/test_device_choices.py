"""Device-dependent choices are resolved into config.yml, so a model trained on one device opens on any other.

nerfstudio writes config.yml before it builds the model, and ``ns-eval``/``ns-viewer``/``ns-render`` pick
CUDA whenever it exists. A choice left unset in the saved config would be made again from the loading
device: a CPU-trained accel-ngp would be rebuilt with CUDA's table and grid sizes and fail to load.
"""

from __future__ import annotations

import copy

import pytest
import torch
import yaml
from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig

from accel_test_helpers import make_trainer, run_steps
from nerfstudio_accel.data.scene_checks import SceneFacts
from nerfstudio_accel.engine import trainer as trainer_module
from nerfstudio_accel.engine.trainer import AccelTrainerConfig
from nerfstudio_accel.errors import BackendUnavailable
from nerfstudio_accel.methods import accel_nerfacto, accel_ngp
from nerfstudio_accel.models import accel_ngp as accel_ngp_model


@pytest.fixture(autouse=True)
def machine_with_every_device(monkeypatch):
    """This CPU machine stands in for one with a CUDA GPU and MPS: ns-train checks the device before it saves."""
    monkeypatch.setattr(trainer_module, "require_device", lambda device_type: None)


def saved_config(method_config: AccelTrainerConfig, device_type: str, tmp_path, scene) -> AccelTrainerConfig:
    """``method_config`` saved as ``ns-train --machine.device-type DEVICE`` saves it, then read back."""
    config = copy.deepcopy(method_config)
    config.machine.device_type = device_type
    config.output_dir = tmp_path
    config.experiment_name, config.timestamp = "exp", "run"
    config.pipeline.datamanager.dataparser = BlenderDataParserConfig(data=scene)
    config.save_config()
    return yaml.load((config.get_base_dir() / "config.yml").read_text(), Loader=yaml.Loader)


@pytest.mark.parametrize(
    "device_type, table, grid, samples, rays, precision, hash_backend, prefetch",
    [
        ("cuda", 19, 128, 1 << 18, 1 << 16, "fp16", None, 2),  # tcnn, kernel or torch: what runs on this machine's GPU
        ("cpu", 15, 64, 1 << 14, 1 << 12, "fp32", "kernel", 0),
        ("mps", 15, 64, 1 << 14, 1 << 12, "fp32", "torch", 2),
    ],
)
def test_saved_accel_ngp_config_holds_every_device_choice(
    tiny_scene, tmp_path, device_type, table, grid, samples, rays, precision, hash_backend, prefetch
):
    """Table size, grid resolution, field implementation, hash backend, batch sizes, prefetch depth and precision
    are numbers and names in config.yml, chosen from --machine.device-type (tiny-cuda-nn is not installed here:
    torch)."""
    loaded = saved_config(accel_ngp.config, device_type, tmp_path, tiny_scene)
    model = loaded.pipeline.model
    assert (model.log2_hashmap_size, model.occupancy.resolution, model.implementation) == (table, grid, "torch")
    assert model.hash_backend == hash_backend if hash_backend else model.hash_backend in ("tcnn", "kernel", "torch")
    assert (loaded.pipeline.target_num_samples, loaded.pipeline.max_num_rays_per_batch) == (samples, rays)
    assert loaded.pipeline.datamanager.prefetch_batches == prefetch
    assert loaded.precision == precision
    assert (loaded.mixed_precision, loaded.use_grad_scaler) == (precision != "fp32", precision == "fp16")


@pytest.mark.parametrize(
    "device_type, threshold, image_scale, table",
    [
        ("cpu", 8 * 32 * 32, 1.0, 17),  # tiny_scene's 8 training views of 32x32 reach the threshold
        ("cpu", 8 * 32 * 32 + 1, 1.0, 15),
        ("cpu", 8 * 32 * 32, 0.5, 15),  # trained at half size: a quarter of the pixels
        ("mps", 8 * 32 * 32, 1.0, 17),
        ("cuda", 8 * 32 * 32 + 1, 1.0, 19),
    ],
)
def test_table_size_follows_the_training_pixel_count(
    tiny_scene, tmp_path, monkeypatch, capsys, device_type, threshold, image_scale, table
):
    """Off CUDA, config.yml gets 2^17 rows per level from LARGE_SCENE_PIXELS training pixels (counted at the data
    manager's image scale), 2^15 below; CUDA 2^19 whatever the scene. The choice is printed."""
    monkeypatch.setattr(accel_ngp_model, "LARGE_SCENE_PIXELS", threshold)
    config = copy.deepcopy(accel_ngp.config)
    config.pipeline.datamanager.camera_res_scale_factor = image_scale
    assert saved_config(config, device_type, tmp_path, tiny_scene).pipeline.model.log2_hashmap_size == table
    pixels = round(8 * 32 * 32 * image_scale**2) / 1e6
    assert f"Hash table: 2^{table} rows per level, auto for {pixels:.1f} M training pixels" in capsys.readouterr().out


def test_table_size_rule_at_the_measured_scene_sizes():
    """The rule's threshold between the scene sizes measured (docs/hash_encoding.md): lego 100x100's 1 M training
    pixels and the fruit capture's 2.2 M at a quarter of its size keep 2^15, lego 200x200's 4 M and 400x400's 16 M
    get 2^17; a parser without a check (count unknown) keeps 2^15."""

    def table(device_type: str, pixels) -> int:
        return accel_ngp_model.default_table_log2(device_type, SceneFacts(True, True, train_pixels=pixels))

    sizes = (100 * 100 * 100, 73 * 151 * 202, 100 * 200 * 200, 100 * 400 * 400, None)  # fruit: 73 views at 151x202
    assert [table("cpu", pixels) for pixels in sizes] == [15, 15, 17, 17, 15]
    assert table("cuda", 100 * 100 * 100) == 19


def test_an_explicit_table_size_is_kept_whatever_the_scene(tiny_scene, tmp_path, monkeypatch):
    monkeypatch.setattr(accel_ngp_model, "LARGE_SCENE_PIXELS", 1)
    config = copy.deepcopy(accel_ngp.config)
    config.pipeline.model.log2_hashmap_size = 16
    assert saved_config(config, "cpu", tmp_path, tiny_scene).pipeline.model.log2_hashmap_size == 16


def test_saved_accel_nerfacto_config_names_its_implementation(tiny_scene, tmp_path):
    loaded = saved_config(accel_nerfacto.config, "cuda", tmp_path, tiny_scene)
    assert loaded.pipeline.model.implementation == "torch"
    assert loaded.precision == "fp16"


def test_fp16_on_cpu_is_refused_in_one_line_before_anything_is_written(tiny_scene, tmp_path):
    config = copy.deepcopy(accel_ngp.config)
    config.precision = "fp16"
    with pytest.raises(SystemExit, match=r"^error: --precision fp16 needs a CUDA device") as stopped:
        saved_config(config, "cpu", tmp_path, tiny_scene)
    assert "\n" not in str(stopped.value)
    assert not (tmp_path / "exp").exists()


def test_hash_backend_that_cannot_run_is_refused_before_anything_is_written(tiny_scene, tmp_path):
    config = copy.deepcopy(accel_ngp.config)
    config.pipeline.model.hash_backend = "kernel"
    with pytest.raises(SystemExit, match=r"^error: --pipeline.model.hash-backend kernel cannot run on mps") as stopped:
        saved_config(config, "mps", tmp_path, tiny_scene)
    assert "\n" not in str(stopped.value)
    assert not (tmp_path / "exp").exists()


def test_cpu_checkpoint_rebuilds_and_loads_where_cuda_is_picked(tiny_scene, tmp_path):
    """The README's recipe: train with --machine.device-type cpu, then open the run where ns-eval picks CUDA.
    The model is rebuilt from the saved config as a CUDA pipeline would build it (device="cuda"); its
    parameters and grid have the checkpoint's shapes and load strictly."""
    torch.manual_seed(0)
    trainer = make_trainer(tiny_scene, tmp_path)
    trainer.config.save_config()
    run_steps(trainer, 0, 2)
    trainer.save_checkpoint(1)
    loaded = yaml.load((trainer.config.get_base_dir() / "config.yml").read_text(), Loader=yaml.Loader)
    state = torch.load(trainer.checkpoint_dir / "step-000000001.ckpt", map_location="cpu")["pipeline"]
    model_state = {key[len("_model.") :]: value for key, value in state.items() if key.startswith("_model.")}

    trained = trainer.pipeline.model
    rebuilt = loaded.pipeline.model.setup(
        scene_box=trained.scene_box, num_train_data=trained.num_train_data, metadata={}, device="cuda"
    )
    rebuilt.load_state_dict(model_state, strict=True)
    assert torch.equal(rebuilt.sampler.grid.binaries, trained.sampler.grid.binaries)


def test_tcnn_model_where_tcnn_cannot_run_says_what_to_do(tiny_scene):
    """A config that names tiny-cuda-nn (its parameters do not load into the torch field) stops in one line
    on a machine without it, instead of silently building the torch twin."""
    config = copy.deepcopy(accel_ngp.config.pipeline.model)
    config.implementation = "tcnn"
    config.resolve("cpu", SceneFacts(bounded=True, images_have_alpha=True))  # explicit choices pass; building refuses
    from nerfstudio.data.scene_box import SceneBox

    with pytest.raises(BackendUnavailable) as stopped:
        config.setup(
            scene_box=SceneBox(aabb=torch.tensor([[-1.0] * 3, [1.0] * 3])), num_train_data=1, metadata={}, device="cpu"
        )
    message = str(stopped.value)
    assert "\n" not in message and message.startswith("this accel-ngp model uses tiny-cuda-nn")
    assert "--pipeline.model.implementation torch" in message


def test_resume_with_other_model_sizes_says_which_in_one_line(tiny_scene, tmp_path):
    """Resuming a CPU run (2^15 table) with a config of other sizes (say a GPU's 2^19) stops in one line naming
    the flag, from the config.yml ns-train saved beside the checkpoints."""
    first = make_trainer(tiny_scene, tmp_path / "a", setup=False, resolve=False)
    first.setup()
    first.save_checkpoint(0)
    with pytest.raises(SystemExit) as stopped:
        make_trainer(tiny_scene, tmp_path / "b", model={"log2_hashmap_size": 19}, load_dir=first.checkpoint_dir)
    message = str(stopped.value)
    assert "\n" not in message and "--pipeline.model.log2-hashmap-size 15 (this run: 19)" in message
