"""Front-to-back culling keeps exactly the samples of one pass over every candidate, reading fewer densities."""

from __future__ import annotations

from typing import List, Optional

import pytest
import torch

from accel_test_helpers import full_grid_sampler, make_trainer, run_steps
from nerfstudio_accel.fields.hash_grid_field import HashGridField
from nerfstudio_accel.ops import precision
from nerfstudio_accel.ops.volume_rendering import render_visibility_from_density
from nerfstudio_accel.sampling.base import DensityRecord
from nerfstudio_accel.sampling.front_to_back_culling import (
    AUTO_CANDIDATES_PER_KEPT,
    AUTO_FIRST_SAMPLES,
    chosen_first_samples,
    densities_front_to_back,
    rows_in_call_order,
)
from nerfstudio_accel.sampling.occupancy import MarchingOptions, OccupancySampler

AABB = torch.tensor([-1.0, -1.0, -1.0, 1.0, 1.0, 1.0])


class RecordingDensity(DensityRecord):
    """A density function ``(n, 3) -> (n, 1)`` (opaque ball of radius 0.8, faint haze elsewhere) that keeps the
    points it was called on, call by call, as DensityPassRecord keeps encodings, and the rows a sampler kept."""

    def __init__(self, nan_below_z: float = -10.0) -> None:
        self.calls: List[torch.Tensor] = []
        self.nan_below_z = nan_below_z
        self.kept: Optional[torch.Tensor] = None

    def drop_below(self, density: torch.Tensor) -> None:
        pass

    def keep(self, rows: torch.Tensor) -> None:
        self.kept = rows

    def __call__(self, points: torch.Tensor) -> torch.Tensor:
        self.calls.append(points.clone())
        inside = points.norm(dim=-1, keepdim=True) < 0.8
        density = torch.where(inside, torch.full_like(points[:, :1], 300.0), torch.full_like(points[:, :1], 0.5))
        return torch.where(points[:, 2:3] < self.nan_below_z, torch.full_like(density, float("nan")), density)

    @property
    def seen(self) -> torch.Tensor:
        return torch.cat(self.calls)


def packed_candidates(n_rays: int, seed: int):
    """Rays from a sphere of radius 2 through jittered points near the origin, marched on a full grid:
    ``(origins, directions, ray_indices, t_starts, t_ends, positions)``."""
    generator = torch.Generator().manual_seed(seed)
    origins = 2.0 * torch.nn.functional.normalize(torch.randn(n_rays, 3, generator=generator), dim=-1)
    directions = torch.nn.functional.normalize(0.6 * torch.randn(n_rays, 3, generator=generator) - origins, dim=-1)
    sampler = OccupancySampler(AABB, resolution=16, backend="torch", marching=MarchingOptions(render_step_size=0.02))
    sampler.grid.binaries.fill_(True)
    ray_indices, t_starts, t_ends = sampler.march(origins, directions)
    positions = origins[ray_indices] + directions[ray_indices] * (0.5 * (t_starts + t_ends))[:, None]
    return origins, directions, ray_indices, t_starts, t_ends, positions


def visible(densities, ray_indices, t_starts, t_ends, n_rays):
    return render_visibility_from_density(
        t_starts, t_ends, densities, ray_indices, n_rays, early_stop_eps=1e-4, alpha_threshold=1e-2
    )


@pytest.mark.parametrize("first_samples", [1, 16, 48])
def test_the_kept_samples_are_those_of_one_pass_and_fewer_densities_are_read(first_samples):
    """Rounds of 1, 1, 2, 4, ... candidates, of 16, 16, 32, ... or of 48, 48, ...: every ray that the ball stops
    is read only up to the round where it became opaque."""
    origins, _, ray_indices, t_starts, t_ends, positions = packed_candidates(200, seed=3)
    n_rays = origins.shape[0]
    one_pass = RecordingDensity()
    full = one_pass(positions).reshape(-1)
    expected = visible(full, ray_indices, t_starts, t_ends, n_rays)
    assert 0 < int(expected.sum()) < expected.numel() // 2  # the ball stops most rays that reach it

    rounds = RecordingDensity()
    densities, evaluated = densities_front_to_back(
        lambda points: rounds(points).reshape(-1), positions, ray_indices, t_starts, t_ends, n_rays, 1e-4, first_samples
    )
    assert evaluated is not None and len(rounds.calls) >= 2
    assert torch.equal(torch.sort(evaluated).values, torch.arange(positions.shape[0])[densities != 0])
    assert evaluated.numel() < positions.shape[0]
    assert torch.equal(densities[evaluated], full[evaluated])
    assert torch.equal(visible(densities, ray_indices, t_starts, t_ends, n_rays), expected)
    keep = torch.nonzero(expected).reshape(-1)
    assert torch.equal(rounds.seen[rows_in_call_order(keep, evaluated, positions.shape[0])], positions[keep])


def test_a_nan_density_stops_its_ray_in_both_passes():
    origins, _, ray_indices, t_starts, t_ends, positions = packed_candidates(100, seed=5)
    n_rays = origins.shape[0]
    poisoned = RecordingDensity(nan_below_z=-0.3)
    full = poisoned(positions).reshape(-1)
    densities, evaluated = densities_front_to_back(
        lambda points: poisoned(points).reshape(-1), positions, ray_indices, t_starts, t_ends, n_rays, 1e-4, 4
    )
    assert evaluated is not None
    expected = visible(full, ray_indices, t_starts, t_ends, n_rays)
    assert torch.equal(visible(densities, ray_indices, t_starts, t_ends, n_rays), expected)


def test_zero_first_samples_is_one_pass_in_order():
    origins, _, ray_indices, t_starts, t_ends, positions = packed_candidates(50, seed=7)
    density = RecordingDensity()
    densities, evaluated = densities_front_to_back(
        lambda points: density(points).reshape(-1), positions, ray_indices, t_starts, t_ends, origins.shape[0], 1e-4, 0
    )
    assert evaluated is None and len(density.calls) == 1 and torch.equal(density.seen, positions)
    keep = torch.arange(0, positions.shape[0], 3)
    assert torch.equal(rows_in_call_order(keep, None, positions.shape[0]), keep)


def test_the_sampler_keeps_the_same_samples_and_rows_with_front_to_back_culling():
    """OccupancySampler.sample: same packed samples with ``culling_first_samples`` on and off, the kept rows naming
    each kept sample's row among the points the density record saw, and fewer points seen."""
    origins, directions, *_ = packed_candidates(300, seed=11)
    results = {}
    for first_samples in (0, 16):
        sampler = full_grid_sampler(AABB, render_step_size=0.02, culling_first_samples=first_samples)
        density = RecordingDensity()
        samples = sampler.sample(origins, directions, density_fn=density)
        positions = (
            origins[samples.ray_indices]
            + directions[samples.ray_indices] * (0.5 * (samples.t_starts + samples.t_ends))[:, None]
        )
        torch.testing.assert_close(density.seen[density.kept], positions, rtol=0, atol=1e-6)
        results[first_samples] = (samples, density.seen.shape[0], sampler.figures())
    (plain, plain_seen, plain_figures), (culled, culled_seen, culled_figures) = results[0], results[16]
    assert torch.equal(culled.ray_indices, plain.ray_indices) and torch.equal(culled.t_starts, plain.t_starts)
    assert culled_seen < plain_seen
    assert culled_figures["evaluated"] == culled_seen and plain_figures["evaluated"] == plain_figures["candidates"]
    assert culled_figures["kept"] == plain_figures["kept"] > 0


def test_automatic_rounds_follow_the_last_batchs_candidates_per_kept_sample():
    """None reads in rounds only on the CPU, after a training batch marched more than AUTO_CANDIDATES_PER_KEPT
    candidates per kept sample (none before the first, none from counts held as tensors); an explicit length always
    wins. Through
    the sampler: the first training batch (an opaque ball behind a deep grid) is one pass, the next reads in rounds
    and keeps the same samples."""
    ratio = AUTO_CANDIDATES_PER_KEPT
    assert chosen_first_samples(None, {}, "cpu") == 0
    assert chosen_first_samples(None, {"candidates": int(10 * ratio) + 1, "kept": 10}, "cpu") == AUTO_FIRST_SAMPLES
    assert chosen_first_samples(None, {"candidates": int(10 * ratio) + 1, "kept": 10}, "cuda") == 0  # not measured
    assert chosen_first_samples(None, {"candidates": int(10 * ratio), "kept": 10}, "cpu") == 0
    assert chosen_first_samples(None, {"candidates": 100, "kept": torch.tensor(1)}, "cpu") == 0
    assert (
        chosen_first_samples(8, {}, "cuda") == 8 and chosen_first_samples(0, {"candidates": 100, "kept": 1}, "cpu") == 0
    )
    origins, directions, *_ = packed_candidates(300, seed=11)
    sampler = full_grid_sampler(AABB, render_step_size=0.02, culling_first_samples=None)
    seen, kept = [], []
    for _ in range(2):
        density = RecordingDensity()
        kept.append(sampler.sample(origins, directions, density_fn=density))
        seen.append(density.seen.shape[0])
        figures = sampler.figures()
        assert figures["candidates"] > ratio * figures["kept"]  # the ball hides most candidates
    assert seen[0] == figures["candidates"] > seen[1] == figures["evaluated"]
    assert torch.equal(kept[0].ray_indices, kept[1].ray_indices) and torch.equal(kept[0].t_starts, kept[1].t_starts)


def assert_variant_samples_and_renders_as_one_pass(trainer, one_pass, variant, tolerance: float) -> None:
    """On one trained model, ``one_pass()`` then ``variant()`` switch the culling pass (the first to the reference
    that reads every candidate); a training batch's samples and raw outputs, and an evaluation render, are the same
    with both, and the variant reads fewer densities."""
    model, sampler = trainer.pipeline.model, trainer.pipeline.model.own_sampler()
    run_steps(trainer, 0, 20)
    sampler.marching.early_stop_eps = 0.9999  # a young field is nowhere near opaque: stop rays at its first haze
    ray_bundle, _ = trainer.pipeline.datamanager.next_train(20)
    camera = trainer.pipeline.datamanager.eval_dataset.cameras[0:1]
    forwards, renders, figures = [], [], []
    for switch in (one_pass, variant):
        switch()
        model.train()
        torch.manual_seed(1)  # the same stratified jitter
        with torch.no_grad():
            forwards.append(model.sample_and_forward(ray_bundle))
        figures.append(sampler.figures())
        model.eval()
        renders.append(model.get_outputs_for_camera(camera))
    (plain, *plain_raw), (culled, *culled_raw) = forwards
    assert plain.ray_indices.numel() > 0
    assert figures[1]["evaluated"] < figures[0]["evaluated"] == figures[0]["candidates"]
    assert torch.equal(culled.ray_indices, plain.ray_indices)
    assert torch.equal(culled.packed.t_starts, plain.packed.t_starts)
    for culled_values, plain_values in zip(culled_raw, plain_raw):
        torch.testing.assert_close(culled_values, plain_values, atol=tolerance, rtol=tolerance)
    assert renders[0]["accumulation"].max() > 0
    for key in ("rgb", "accumulation", "depth"):
        torch.testing.assert_close(renders[1][key], renders[0][key], atol=tolerance, rtol=1e-5)


def test_accel_ngp_samples_and_renders_the_same_with_front_to_back_culling(tiny_scene, tmp_path):
    """The flag reaches the sampler, and rounds change no sample (the torch hash backend: the kernel's field culls
    in one fused pass, where rounds do not apply)."""
    trainer = make_trainer(tiny_scene, tmp_path, model={"occupancy.culling_first_samples": 8, "hash_backend": "torch"})
    marching = trainer.pipeline.model.own_sampler().marching
    assert marching.culling_first_samples == 8

    def rounds(first_samples: int):
        return lambda: setattr(marching, "culling_first_samples", first_samples)

    assert_variant_samples_and_renders_as_one_pass(trainer, rounds(0), rounds(8), tolerance=1e-6)


def test_accel_ngp_samples_and_renders_the_same_with_the_fused_culling_pass(tiny_scene, tmp_path, monkeypatch):
    """accel-ngp's CPU defaults cull in the fused kernel (reading no candidate behind a ray's stop), which changes
    no sample of the reference pass (the field's densities through calls)."""
    trainer = make_trainer(tiny_scene, tmp_path)
    marching = trainer.pipeline.model.own_sampler().marching
    fused_network = HashGridField.density_network

    def reference() -> None:
        marching.culling_first_samples = 0  # every candidate read
        monkeypatch.setattr(HashGridField, "density_network", lambda self, heads=False: None)

    def fused() -> None:
        monkeypatch.setattr(HashGridField, "density_network", fused_network)

    assert_variant_samples_and_renders_as_one_pass(trainer, reference, fused, tolerance=1e-5)


def test_rays_opaque_at_once_are_read_in_the_first_round_only():
    origins, _, ray_indices, t_starts, t_ends, positions = packed_candidates(60, seed=9)
    calls: List[torch.Tensor] = []

    def opaque(points: torch.Tensor) -> torch.Tensor:
        calls.append(points)
        return torch.full((points.shape[0],), 1e4)

    densities, evaluated = densities_front_to_back(
        opaque, positions, ray_indices, t_starts, t_ends, origins.shape[0], 1e-4, 2
    )
    counts = torch.bincount(ray_indices, minlength=origins.shape[0])
    assert len(calls) == 1 and evaluated is not None and evaluated.numel() == int(counts.clamp(max=2).sum())
    kept = visible(densities, ray_indices, t_starts, t_ends, origins.shape[0])
    assert int(kept.sum()) == int((counts > 0).sum())  # each ray keeps its first candidate only
    keep = torch.nonzero(kept).reshape(-1)
    assert torch.equal(calls[0][rows_in_call_order(keep, evaluated, positions.shape[0])], positions[keep])


def test_rays_that_never_close_are_read_in_every_round_and_their_rows_follow_the_calls():
    """No ray becomes opaque: every candidate is read, round after round, so the rows are not the candidates'."""
    origins, _, ray_indices, t_starts, t_ends, positions = packed_candidates(40, seed=13)
    calls: List[torch.Tensor] = []

    def clear(points: torch.Tensor) -> torch.Tensor:
        calls.append(points)
        return torch.full((points.shape[0],), 1e-3)

    densities, evaluated = densities_front_to_back(
        clear, positions, ray_indices, t_starts, t_ends, origins.shape[0], 1e-4, 2
    )
    assert len(calls) > 2 and evaluated is not None and evaluated.numel() == positions.shape[0]
    assert not torch.equal(evaluated, torch.arange(positions.shape[0]))
    keep = torch.arange(0, positions.shape[0], 5)
    assert torch.equal(torch.cat(calls)[rows_in_call_order(keep, evaluated, positions.shape[0])], positions[keep])


def test_devices_without_float64_sum_in_float32_and_keep_the_same_samples(monkeypatch):
    """MPS has no float64: the rounds' optical depths are float32 there."""
    monkeypatch.setattr(precision, "supports_float64", lambda device: False)
    origins, _, ray_indices, t_starts, t_ends, positions = packed_candidates(120, seed=17)
    density = RecordingDensity()
    full = density(positions).reshape(-1)
    exp, depth_dtypes = torch.exp, []
    monkeypatch.setattr(torch, "exp", lambda x: depth_dtypes.append(x.dtype) or exp(x))
    densities, evaluated = densities_front_to_back(
        lambda points: density(points).reshape(-1), positions, ray_indices, t_starts, t_ends, origins.shape[0], 1e-4, 16
    )
    monkeypatch.setattr(torch, "exp", exp)
    assert depth_dtypes and set(depth_dtypes) == {torch.float32}  # the rounds' transmittance, never float64
    assert evaluated is not None and evaluated.numel() < positions.shape[0]
    n_rays = origins.shape[0]
    assert torch.equal(
        visible(densities, ray_indices, t_starts, t_ends, n_rays), visible(full, ray_indices, t_starts, t_ends, n_rays)
    )
