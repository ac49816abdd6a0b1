"""Normals from the density's gradient: rendered outside training only, and what
``ns-export pointcloud`` and ``ns-export poisson`` read with their default ``--normal-method model_output``.

The export test trains one short accel-ngp run in process on the tiny scene, then runs nerfstudio's
``ns-export`` console script on its folder, as a user does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from accel_test_helpers import make_trainer, train_run
from conftest import RunCli, ns_export_missing_reason
from nerfstudio_accel.fields import density_normals
from nerfstudio_accel.methods import accel_nerfacto


def ball(points: torch.Tensor) -> torch.Tensor:
    """A pre-activation density falling away from the origin: its surfaces' normals point along ``points``."""
    return 4.0 - points.norm(dim=-1, keepdim=True) ** 2


def test_density_normals_point_out_of_the_density_even_without_grad():
    points = torch.tensor([[1.0, 0.0, 0.0], [0.0, -2.0, 0.0], [0.3, 0.4, 0.0]])
    with torch.no_grad():
        normals = density_normals.density_normals(ball, points)
    assert torch.allclose(normals, torch.nn.functional.normalize(points, dim=-1), atol=1e-6)
    assert density_normals.density_normals(ball, torch.zeros(0, 3)).shape == (0, 3)


def test_rendered_normals_average_by_weight_and_shade_into_the_unit_interval():
    """Ray 0: samples facing +x (weight 0.9) and +y (weight 0.1); ray 1: no sample, shaded mid-grey."""
    positions = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    weights = torch.tensor([0.9, 0.1])
    shaded = density_normals.rendered_normals(ball, positions, weights, torch.tensor([0, 0]), n_rays=2)
    expected = torch.nn.functional.normalize(torch.tensor([0.9, 0.1, 0.0]), dim=0)
    assert torch.allclose(shaded[0], (expected + 1.0) / 2.0, atol=1e-6)
    assert torch.allclose(shaded[1], torch.full((3,), 0.5))


@pytest.mark.parametrize("method", ["accel-ngp", "accel-nerfacto"])
def test_normals_are_rendered_outside_training_only(tiny_scene, tmp_path, monkeypatch, method):
    """A training forward computes no gradient normals; an evaluation forward (ns-export's, without grad)
    returns unit normals shaded into [0, 1], one per ray."""
    calls = []
    gradient_normals = density_normals.density_normals

    def counted(*args):
        calls.append(args)
        return gradient_normals(*args)

    monkeypatch.setattr(density_normals, "density_normals", counted)
    overrides = {"method": accel_nerfacto.config, "model": {"implementation": "torch"}} if method != "accel-ngp" else {}
    pipeline = make_trainer(tiny_scene, tmp_path, **overrides).pipeline
    model = pipeline.model
    ray_bundle, _ = pipeline.datamanager.next_train(0)

    model.train()
    assert "normals" not in model(ray_bundle) and not calls

    model.eval()
    with torch.no_grad():
        outputs = model(ray_bundle)
    normals = outputs["normals"]
    assert len(calls) == 1 and normals.shape == (len(ray_bundle), 3)
    assert float(normals.min()) >= 0.0 and float(normals.max()) <= 1.0
    lengths = torch.linalg.norm(normals * 2.0 - 1.0, dim=-1)
    assert torch.allclose(lengths[outputs["accumulation"][:, 0] > 0.01], torch.tensor(1.0), atol=1e-4)


@pytest.fixture(scope="module")
def trained_run(tiny_scene, tmp_path_factory) -> Path:
    """config.yml of a short accel-ngp run on the tiny scene, long enough for opaque pixels."""
    trainer = train_run(tiny_scene, tmp_path_factory.mktemp("export_run"), 300)
    return trainer.base_dir / "config.yml"


EXPORTS = {
    "pointcloud": (["--num-points", "500", "--num-rays-per-batch", "4096"], ["point_cloud.ply"]),
    "poisson": (
        ["--num-points", "500", "--num-rays-per-batch", "4096", "--target-num-faces", "500"]
        + ["--num-pixels-per-side", "128"],
        ["poisson_mesh.ply", "mesh.obj"],
    ),
    "tsdf": (
        ["--resolution", "32", "--target-num-faces", "500", "--num-pixels-per-side", "128"],
        ["tsdf_mesh.ply", "mesh.obj"],
    ),
}
"""Each export's flags for a tiny run (fewer points, rays, faces and texels than the defaults; the normal
method stays the default) and the files it writes."""


@pytest.mark.slow
@pytest.mark.skipif(bool(ns_export_missing_reason()), reason=ns_export_missing_reason() or "ok")
@pytest.mark.parametrize("export", sorted(EXPORTS))
def test_ns_export_writes_its_file_with_default_normals(trained_run, tmp_path, run_cli: RunCli, export):
    flags, files = EXPORTS[export]
    code, out, err = run_cli(
        "ns-export", export, "--load-config", trained_run, "--output-dir", tmp_path, *flags, timeout=600
    )
    assert code == 0, (out + err)[-3000:]
    for name in files:
        assert (tmp_path / name).is_file(), f"no {name}\n{(out + err)[-2000:]}"
    if export == "pointcloud":
        import open3d as o3d

        cloud = o3d.io.read_point_cloud(str(tmp_path / "point_cloud.ply"))
        normals = np.asarray(cloud.normals)
        assert cloud.has_normals() and len(normals) > 0
        assert np.allclose(np.linalg.norm(normals, axis=-1), 1.0, atol=1e-3)
