"""Backend choices: the hash encoding's ``auto`` by device, refusal of a backend that cannot run, the
fallback of a saved one, the kernels' self-check against the torch reference; the field implementation's
refusal of tiny-cuda-nn where it cannot run; the sampler backend written into a resolved config, and the one
line of a model opened where that backend cannot run."""

from __future__ import annotations

import copy
import logging

import pytest
import torch

from nerfstudio_accel.data.scene_checks import SceneFacts
from nerfstudio_accel.errors import BackendUnavailable
from nerfstudio_accel.ops import backends, hash_encoding
from nerfstudio_accel.ops.backends import (
    check_hash_backend,
    check_implementation,
    resolve_hash_backend,
    resolve_implementation,
    runnable_hash_backend,
)


def test_backend_choice_by_device(monkeypatch):
    monkeypatch.setattr(backends, "tcnn_encoding_unavailable_reason", lambda device_type: "no tcnn here")
    assert resolve_hash_backend("auto", "cpu") == "kernel"
    assert resolve_hash_backend("auto", "mps") == "torch"
    assert resolve_hash_backend("torch", "cpu") == "torch"
    monkeypatch.setattr(backends, "tcnn_encoding_unavailable_reason", lambda device_type: "")
    assert resolve_hash_backend("auto", "cuda") == "tcnn"
    assert resolve_hash_backend("auto", "cuda", tcnn_layout=False) in ("kernel", "torch")  # a block's table
    with pytest.raises(ValueError, match="choose auto, torch, kernel or tcnn"):
        resolve_hash_backend("numba", "cpu")


def test_backend_that_cannot_run_is_refused_in_one_line():
    with pytest.raises(ValueError) as refused:
        check_hash_backend("kernel", "mps")
    message = str(refused.value)
    assert "\n" not in message and message.startswith("--pipeline.model.hash-backend kernel cannot run on mps")
    check_hash_backend("kernel", "cpu")  # runs here: no error
    check_hash_backend("torch", "mps")


def test_saved_backend_that_cannot_run_falls_back_to_one_that_does(caplog):
    """A model saved with the kernel backend opens where the kernel cannot run, on the same table."""
    assert runnable_hash_backend("kernel", "cpu") == "kernel"
    with caplog.at_level("WARNING"):
        assert runnable_hash_backend("kernel", "mps") == "torch"
    assert "hash backend kernel cannot run on mps" in caplog.text


def test_kernel_self_check_reports_a_broken_kernel(monkeypatch):
    """``auto`` only picks the kernel after it ran and agreed with the reference on this device."""

    def broken(*args, **kwargs):
        raise RuntimeError("compiler exploded\nsecond line")

    monkeypatch.setattr(hash_encoding.FusedHashEncoding, "apply", broken)
    hash_encoding.kernel_unavailable_reason.cache_clear()
    try:
        reason = hash_encoding.kernel_unavailable_reason("cpu")
        assert reason == "its numba kernels failed to run: compiler exploded"
        monkeypatch.setattr(backends, "tcnn_encoding_unavailable_reason", lambda device_type: "no tcnn here")
        assert resolve_hash_backend("auto", "cpu") == "torch"
    finally:
        hash_encoding.kernel_unavailable_reason.cache_clear()


def test_tcnn_implementation_where_it_cannot_run_is_refused_in_one_line():
    """A model configured for tiny-cuda-nn (whose parameters do not load into the torch field) is refused
    on a CPU with the fix; ``auto`` takes torch there."""
    assert resolve_implementation("auto", "cpu") == "torch"
    with pytest.raises(BackendUnavailable) as refused:
        check_implementation("tcnn", "cpu", "accel-ngp")
    message = str(refused.value)
    assert "\n" not in message and message.startswith("this accel-ngp model uses tiny-cuda-nn")
    assert "--pipeline.model.implementation torch" in message
    check_implementation("torch", "cpu", "accel-ngp")
    with pytest.raises(BackendUnavailable, match="choose auto, tcnn or torch"):
        resolve_implementation("cuda", "cpu")


def small_accel_ngp_config():
    """accel-ngp's registered model config, copied, with a small grid and table (explicit: resolution keeps them)."""
    from nerfstudio_accel.methods import accel_ngp

    config = copy.deepcopy(accel_ngp.config.pipeline.model)
    config.log2_hashmap_size, config.num_levels, config.max_res, config.occupancy.resolution = 10, 4, 64, 16
    return config


def test_a_resolved_config_names_a_concrete_sampler_backend():
    """config.yml holds the marcher training used, not ``auto`` (which another machine would resolve to another
    lattice): the fused marcher on this CPU. Only the chosen sampler's options are resolved."""
    config = small_accel_ngp_config()
    assert config.occupancy.backend == "auto"
    config.resolve("cpu", SceneFacts(bounded=True, images_have_alpha=None))
    assert config.occupancy.backend == "kernel" and config.proposal.num_samples is None
    captured = small_accel_ngp_config()
    captured.resolve("cpu", SceneFacts(bounded=False, images_have_alpha=None))
    assert captured.proposal.num_samples == 32 and captured.occupancy.backend == "auto"


def test_a_model_trained_with_a_backend_that_cannot_run_here_opens_with_one_line(monkeypatch, caplog):
    """Trained on a CUDA machine whose nerfacc ops load, ``auto`` is written as ``nerfacc``; ns-eval or the viewer
    on this CPU marches with the fused marcher instead and says so once, in one line naming both."""
    from nerfstudio.data.scene_box import SceneBox

    config = small_accel_ngp_config()
    config.implementation, config.hash_backend = "torch", "torch"  # whatever this machine has: they open anywhere
    with monkeypatch.context() as cuda_machine:
        cuda_machine.setattr(backends, "nerfacc_ops_unavailable_reason", lambda: "")
        config.resolve("cuda", SceneFacts(bounded=True, images_have_alpha=True))
    assert config.occupancy.backend == "nerfacc"
    with caplog.at_level(logging.WARNING):
        model = config.setup(
            scene_box=SceneBox(aabb=torch.tensor([[-1.0] * 3, [1.0] * 3])), num_train_data=1, metadata={}, device="cpu"
        )
        assert model.sampler.backend_for(torch.device("cpu")) == "kernel"
    warnings = [record.getMessage() for record in caplog.records if "sampler backend" in record.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0], warnings
    assert "nerfacc" in warnings[0] and "kernel" in warnings[0], warnings
