"""OccupancySampler: backend selection, grid updates, and culling of marched samples on CPU."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch

from accel_test_helpers import sample, update
from nerfstudio_accel.ops import backends
from nerfstudio_accel.ops._torch_impl import grid_cell_of_points
from nerfstudio_accel.ops.backends import check_sampler_backend, resolve_sampler_backend
from nerfstudio_accel.ops.marching import traverse_occupancy_grid
from nerfstudio_accel.ops.volume_rendering import render_weight_from_density
from nerfstudio_accel.sampling.base import SamplerScene
from nerfstudio_accel.sampling.occupancy import (
    MarchingOptions,
    OccupancySampler,
    OccupancySamplerConfig,
)

AABB = torch.tensor([-1.0, -1.0, -1.0, 1.0, 1.0, 1.0])
CPU = torch.device("cpu")


def rays_towards_centre(n_rays: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit rays from a sphere of radius 2.5 aimed at jittered points near the origin."""
    generator = torch.Generator().manual_seed(seed)
    origins = 2.5 * torch.nn.functional.normalize(torch.randn(n_rays, 3, generator=generator), dim=-1)
    targets = 0.4 * torch.randn(n_rays, 3, generator=generator)
    return origins, torch.nn.functional.normalize(targets - origins, dim=-1)


def gaussian_blob_density(points: torch.Tensor) -> torch.Tensor:
    """Densities ``(n, 1)``: 200 at the origin falling off as a Gaussian (opaque core, faint rim)."""
    return 200.0 * torch.exp(-(points**2).sum(dim=-1, keepdim=True) / 0.1)


def sampler_with_grid(binaries: torch.Tensor, occupancy_mean: float, warmed_up: bool = True) -> OccupancySampler:
    """A torch-backend sampler over ``AABB`` whose grid is ``binaries`` and whose occupancies
    average ``occupancy_mean`` (which caps the alpha threshold, as in nerfacc); alpha culling is
    enabled only once ``warmed_up``."""
    sampler = OccupancySampler(AABB, resolution=binaries.shape[-1], levels=binaries.shape[0], backend="torch")
    sampler.grid.binaries = binaries.clone()
    sampler.grid.occs = torch.full_like(sampler.grid.occs, occupancy_mean)
    sampler.warmed_up.fill_(warmed_up)
    return sampler


def constant_alpha_density(alpha: float, step_size: float):
    """A density function giving every sample of length ``step_size`` the opacity ``alpha``."""
    sigma = -math.log(1.0 - alpha) / step_size
    return lambda points: torch.full((points.shape[0], 1), sigma)


def reference_visibility(t_starts, t_ends, sigmas, ray_indices, early_stop_eps, alpha_threshold):
    """float64 loop: ``(visible, near_tie, weights)`` of sorted packed samples."""
    optical_depth: dict[int, float] = {}
    visible, near_tie, weights = [], [], []
    for t0, t1, sigma, ray in zip(
        t_starts.double().tolist(), t_ends.double().tolist(), sigmas.double().tolist(), ray_indices.tolist()
    ):
        depth = optical_depth.get(ray, 0.0)
        transmittance, alpha = math.exp(-depth), 1.0 - math.exp(-sigma * (t1 - t0))
        visible.append(transmittance >= early_stop_eps and alpha >= alpha_threshold)
        near_tie.append(abs(transmittance / early_stop_eps - 1.0) < 1e-4 or abs(alpha - alpha_threshold) < 1e-5)
        weights.append(transmittance * alpha)
        optical_depth[ray] = depth + sigma * (t1 - t0)
    return torch.tensor(visible), torch.tensor(near_tie), torch.tensor(weights, dtype=torch.float64)


def packed_sample_keys(ray_indices: torch.Tensor, t_starts: torch.Tensor) -> list[tuple[int, float]]:
    return list(zip(ray_indices.tolist(), t_starts.tolist()))


# ---------------------------------------------------------------------------------------------
# Backend selection
# ---------------------------------------------------------------------------------------------


def test_unknown_backend_is_rejected_with_the_choices():
    """A misspelt backend fails at construction and names the valid ones."""
    with pytest.raises(ValueError, match="auto, nerfacc, kernel, torch"):
        OccupancySampler(AABB, resolution=8, backend="cuda")
    with pytest.raises(ValueError, match="auto, nerfacc, kernel, torch"):
        resolve_sampler_backend("pytorch", "cpu")


def test_nerfacc_backend_is_refused_for_training_on_cpu_with_the_fix():
    """Training with nerfacc on CPU is refused with the command-line fix in the message."""
    with pytest.raises(ValueError, match="--pipeline.model.occupancy.backend torch"):
        check_sampler_backend("nerfacc", "cpu")
    with pytest.raises(ValueError, match="--pipeline.model.occupancy.backend torch"):
        resolve_sampler_backend("nerfacc", "cpu")


@pytest.mark.parametrize(
    "chosen, device, fallback", [("nerfacc", "cpu", "kernel"), ("kernel", "mps", "torch"), ("kernel", "cuda", None)]
)
def test_a_chosen_backend_that_cannot_run_falls_back_with_one_warning(chosen, device, fallback, caplog, monkeypatch):
    """A model trained with ``nerfacc`` (CUDA) or ``kernel`` (CPU) opens on another device with auto's pick
    there and one warning: the grid does not depend on the backend."""
    if device == "cuda":  # as on a GPU machine without nerfacc's compiled ops
        monkeypatch.setattr(backends, "nerfacc_ops_unavailable_reason", lambda: "nerfacc's CUDA ops did not build")
        fallback = "torch"
    sampler = OccupancySampler(AABB, resolution=8, backend=chosen)
    with caplog.at_level(logging.WARNING, logger=backends.__name__):
        assert sampler.backend_for(torch.device(device)) == fallback
        assert sampler.backend_for(torch.device(device)) == fallback
    warnings = [r.getMessage() for r in caplog.records if "cannot run" in r.getMessage()]
    assert len(warnings) == 1 and chosen in warnings[0] and fallback in warnings[0], warnings
    if device == "cpu":  # and it marches
        origins, directions = rays_towards_centre(4, seed=0)
        sample(sampler, origins, directions, MarchingOptions(render_step_size=0.01))


def test_auto_backend_resolves_to_the_fused_marcher_on_cpu():
    """``auto`` runs the numba marcher on CPU, ``torch`` the reference; ``kernel`` refuses other devices."""
    assert OccupancySampler(AABB, resolution=8, backend="auto").backend_for(CPU) == "kernel"
    assert resolve_sampler_backend("torch", "cpu") == "torch"
    assert resolve_sampler_backend("auto", "mps") == "torch"
    with pytest.raises(ValueError, match="no fused marcher for mps.*--pipeline.model.occupancy.backend torch"):
        resolve_sampler_backend("kernel", "mps")


def test_auto_backend_on_cuda_without_nerfacc_marches_with_triton(monkeypatch, caplog):
    """On a GPU machine where nerfacc's ops do not build, ``auto`` picks the fused (Triton) marcher without a
    warning; where that cannot run either, the torch reference, with one warning naming both reasons."""
    monkeypatch.setattr(backends, "nerfacc_ops_unavailable_reason", lambda: "nerfacc's CUDA ops did not build")
    monkeypatch.setattr(backends, "marcher_unavailable_reason", lambda device_type: "")
    with caplog.at_level(logging.WARNING, logger=backends.__name__):
        assert resolve_sampler_backend("auto", "cuda") == "kernel"
        assert not caplog.records
        monkeypatch.setattr(backends, "marcher_unavailable_reason", lambda device_type: "triton is not installed")
        assert resolve_sampler_backend("auto", "cuda") == "torch"
    assert len(caplog.records) == 1
    assert (
        "did not build" in caplog.records[0].getMessage()
        and "triton is not installed" in caplog.records[0].getMessage()
    )


# ---------------------------------------------------------------------------------------------
# Sampling and culling
# ---------------------------------------------------------------------------------------------


def test_sample_without_density_is_plain_marching_within_planes():
    """No density_fn: the samples are the grid traversal between the option planes narrowed by
    the per-ray planes."""
    binaries = torch.rand(1, 16, 16, 16, generator=torch.Generator().manual_seed(1)) < 0.4
    sampler = sampler_with_grid(binaries, occupancy_mean=0.5)
    origins, directions = rays_towards_centre(32, seed=1)
    options = MarchingOptions(render_step_size=0.01, near_plane=0.2, far_plane=4.0)
    per_ray_near = torch.linspace(0.0, 2.0, 32)
    per_ray_far = torch.linspace(5.0, 2.5, 32)
    result = sample(sampler, origins, directions, options, near_planes=per_ray_near, far_planes=per_ray_far)
    expected = traverse_occupancy_grid(
        origins,
        directions,
        binaries,
        sampler.grid.aabbs,
        torch.clamp(per_ray_near, min=0.2),
        torch.clamp(per_ray_far, max=4.0),
        0.01,
        0.0,
    )
    for actual, wanted in zip(result, expected):
        assert torch.equal(actual, wanted)
    assert result[0].numel() > 0


def test_sample_culls_occluded_and_transparent_samples():
    """With a density_fn, kept samples are exactly the marched ones with transmittance >= early_stop_eps
    and alpha >= alpha_threshold (float64 reference), and their weights match the reference."""
    binaries = torch.ones(1, 16, 16, 16, dtype=torch.bool)
    sampler = sampler_with_grid(binaries, occupancy_mean=0.5)  # mean >= alpha threshold: no cap
    origins, directions = rays_towards_centre(48, seed=2)
    options = MarchingOptions(render_step_size=0.01, near_plane=0.0, alpha_threshold=1e-2, early_stop_eps=1e-4)

    all_rays, all_starts, all_ends = sample(sampler, origins, directions, options)
    t_mids = 0.5 * (all_starts + all_ends)
    sigmas = gaussian_blob_density(origins[all_rays] + directions[all_rays] * t_mids[:, None]).reshape(-1)
    expected, near_tie, _ = reference_visibility(all_starts, all_ends, sigmas, all_rays, 1e-4, 1e-2)

    kept_rays, kept_starts, kept_ends = sample(sampler, origins, directions, options, density_fn=gaussian_blob_density)
    kept_keys = set(packed_sample_keys(kept_rays, kept_starts))
    kept = torch.tensor([key in kept_keys for key in packed_sample_keys(all_rays, all_starts)])
    assert int(kept.sum()) == kept_rays.numel()
    assert int(near_tie.sum()) < 5
    assert torch.equal(kept[~near_tie], expected[~near_tie])
    # culling removed most samples (opaque core, faint rim) and kept some
    assert 0 < int(expected.sum()) < int(0.5 * expected.numel())

    assert torch.equal(kept_starts, all_starts[kept]) and torch.equal(kept_ends, all_ends[kept])
    weights = render_weight_from_density(kept_starts, kept_ends, sigmas[kept], kept_rays, 48)
    _, _, reference_weights = reference_visibility(kept_starts, kept_ends, sigmas[kept], kept_rays, 1e-4, 1e-2)
    torch.testing.assert_close(weights.double(), reference_weights, rtol=0, atol=1e-5)


@pytest.mark.parametrize("occupancy_mean, expect_kept", [(0.5, False), (1e-3, True)])
def test_alpha_threshold_is_capped_by_mean_occupancy(occupancy_mean, expect_kept):
    """Samples of alpha 0.005 are culled at alpha_threshold 0.01, unless the grid's mean occupancy
    (1e-3) is lower: nerfacc's ``min(alpha_thre, occs.mean())`` cap, mirrored on purpose."""
    sampler = sampler_with_grid(torch.ones(1, 8, 8, 8, dtype=torch.bool), occupancy_mean)
    origins, directions = rays_towards_centre(16, seed=3)
    options = MarchingOptions(render_step_size=0.01, alpha_threshold=1e-2, early_stop_eps=1e-4)
    marched = sample(sampler, origins, directions, options)
    culled = sample(sampler, origins, directions, options, density_fn=constant_alpha_density(0.005, 0.01))
    assert marched[0].numel() > 0
    assert culled[0].numel() == (marched[0].numel() if expect_kept else 0)


def test_alpha_culling_waits_for_warmup():
    """Before the grid has seen ``warmup_steps`` updates only early stopping culls; an update call at
    a step >= warmup_steps switches alpha culling on (early stopping applies throughout)."""
    sampler = sampler_with_grid(torch.ones(1, 8, 8, 8, dtype=torch.bool), occupancy_mean=0.5, warmed_up=False)
    origins, directions = rays_towards_centre(16, seed=3)
    options = MarchingOptions(render_step_size=0.01, alpha_threshold=1e-2, early_stop_eps=1e-4)
    marched = sample(sampler, origins, directions, options)
    faint = constant_alpha_density(0.005, 0.01)
    assert sample(sampler, origins, directions, options, density_fn=faint)[0].numel() == marched[0].numel()
    opaque = constant_alpha_density(0.5, 0.01)  # transmittance < 1e-4 after 14 samples
    assert sample(sampler, origins, directions, options, density_fn=opaque)[0].numel() < marched[0].numel()

    update(sampler, 300, faint, render_step_size=0.01, warmup_steps=256, every_n_steps=7)  # not an update step
    assert torch.equal(sampler.grid.occs, torch.full_like(sampler.grid.occs, 0.5))
    assert sample(sampler, origins, directions, options, density_fn=faint)[0].numel() == 0


def test_sample_returns_nothing_for_an_empty_grid():
    """An empty grid yields no samples, with or without a density function."""
    sampler = sampler_with_grid(torch.zeros(1, 8, 8, 8, dtype=torch.bool), occupancy_mean=0.5)
    origins, directions = rays_towards_centre(8, seed=4)
    for density_fn in (None, gaussian_blob_density):
        ray_indices, t_starts, t_ends = sample(
            sampler, origins, directions, MarchingOptions(render_step_size=0.01), density_fn
        )
        assert ray_indices.numel() == t_starts.numel() == t_ends.numel() == 0


# ---------------------------------------------------------------------------------------------
# Grid updates
# ---------------------------------------------------------------------------------------------

SPHERE_CENTRE = torch.tensor([0.2, -0.1, 0.3])
SPHERE_RADIUS = 0.35


def solid_sphere_density(points: torch.Tensor) -> torch.Tensor:
    """Density 1000 inside a small off-centre sphere, 0 elsewhere."""
    inside = (points - SPHERE_CENTRE).norm(dim=-1, keepdim=True) < SPHERE_RADIUS
    return inside.float() * 1000.0


def cells_against_sphere(resolution: int) -> tuple[np.ndarray, np.ndarray]:
    """``(fully_inside, fully_outside)`` boolean grids of cells of ``AABB`` relative to the sphere."""
    edges = np.linspace(-1.0, 1.0, resolution + 1)
    lower = np.stack(np.meshgrid(edges[:-1], edges[:-1], edges[:-1], indexing="ij"), axis=-1)
    upper = lower + 2.0 / resolution
    centre = SPHERE_CENTRE.numpy()
    farthest = np.maximum(np.abs(lower - centre), np.abs(upper - centre))
    nearest = np.clip(centre, lower, upper) - centre
    fully_inside = np.linalg.norm(farthest, axis=-1) < SPHERE_RADIUS
    fully_outside = np.linalg.norm(nearest, axis=-1) > SPHERE_RADIUS
    return fully_inside, fully_outside


def test_warmup_updates_mark_the_cells_of_the_density():
    """After warm-up updates the occupied cells are those of the sphere: every cell inside it is
    occupied, none outside it is, and boundary cells may go either way."""
    torch.manual_seed(0)  # the update samples one random point per cell
    sampler = OccupancySampler(AABB, resolution=16, levels=1, backend="torch")
    for step in (0, 16, 32, 48):
        update(sampler, step, solid_sphere_density, render_step_size=0.01)
    occupied = sampler.grid.binaries[0].numpy()
    fully_inside, fully_outside = cells_against_sphere(16)
    assert fully_inside.sum() >= 8
    assert occupied[fully_inside].all()
    assert not occupied[fully_outside].any()
    boundary = ~fully_inside & ~fully_outside
    assert occupied[boundary].mean() > 0.3  # several draws per boundary cell mostly hit the sphere


def test_update_honours_every_n_steps():
    """Steps that are not a multiple of ``every_n_steps`` leave the grid untouched; multiples update it."""
    sampler = OccupancySampler(AABB, resolution=8, levels=1, backend="torch")
    update(sampler, 3, solid_sphere_density, render_step_size=0.01, every_n_steps=16)
    assert not bool(sampler.grid.occs.any()) and not bool(sampler.grid.binaries.any())
    update(sampler, 16, solid_sphere_density, render_step_size=0.01, every_n_steps=16)
    assert bool(sampler.grid.binaries.any())


def cell_constant_density(points: torch.Tensor) -> torch.Tensor:
    """A density constant over each cell of a 8^3 grid of [-2, 2]^3, hence over every cell of both levels
    of a 2-level 8^3 grid of ``AABB`` (level 1 is that grid; level 0's cells nest in it): the jitter of a
    point inside its cell does not matter."""
    cell = torch.floor((points + 2.0) / 4.0 * 8).clamp(0, 7)
    key = (cell * torch.tensor([1.0, 7.0, 49.0])).sum(dim=-1)
    return (torch.sin(key) > 0.3).float()[:, None] * (3.0 + torch.cos(key)[:, None]) * 100.0


@pytest.mark.parametrize("levels", [1, 2])
def test_warmup_update_matches_nerfacc(levels):
    """During warm-up every cell is evaluated once: with a density constant over each cell the grid's
    occupancies and binaries equal nerfacc's own ``OccGridEstimator._update``, over two updates (the EMA)."""
    from nerfacc.estimators.occ_grid import OccGridEstimator

    density = cell_constant_density
    ours = OccupancySampler(AABB, resolution=8, levels=levels, backend="torch")
    theirs = OccGridEstimator(roi_aabb=AABB, resolution=8, levels=levels)
    for step in (0, 16):
        update(ours, step, density, render_step_size=0.01, ema_decay=0.9, every_n_steps=16)
        theirs._update(step=step, occ_eval_fn=lambda x: density(x) * 0.01, ema_decay=0.9, warmup_steps=256)
    assert 0.2 < theirs.binaries.float().mean() < 0.8
    torch.testing.assert_close(ours.grid.occs, theirs.occs)
    assert torch.equal(ours.grid.binaries, theirs.binaries)


def test_update_after_warmup_draws_a_quarter_and_the_occupied_cells_from_the_step_seed():
    """After warm-up an update evaluates a quarter of the cells drawn uniformly plus the occupied cells
    (at most as many), from a generator seeded by the step: the same step picks the same cells and
    points on every rank and every run, and another step picks others."""
    sampler = OccupancySampler(AABB, resolution=8, levels=1, backend="torch")
    sampler.grid.binaries[0, :2] = True  # 128 occupied cells, the quarter is also 128
    ids, points = sampler._update_points(False, torch.Generator().manual_seed(300))
    again, same_points = sampler._update_points(False, torch.Generator().manual_seed(300))
    other, _ = sampler._update_points(False, torch.Generator().manual_seed(316))
    assert torch.equal(ids, again) and torch.equal(points, same_points) and not torch.equal(ids, other)
    assert ids.numel() == 128 + 128 and set(ids[128:].tolist()) == set(range(128))
    cells = torch.floor((points + 1.0) / 2.0 * 8).long()
    assert torch.equal(cells[:, 0] * 64 + cells[:, 1] * 8 + cells[:, 2], ids)  # each point lies in its cell
    sampler.grid.binaries[0] = True  # 512 occupied: capped at the quarter, 128 of them
    assert sampler._update_points(False, torch.Generator().manual_seed(300))[0].numel() == 256


def _probe_with_backend_module(monkeypatch, compiled_ops):
    """Run the nerfacc-ops probe as if on a CUDA machine whose nerfacc backend module holds ``compiled_ops``."""
    import sys
    import types

    backend = types.ModuleType("nerfacc.cuda._backend")
    backend._C = compiled_ops
    monkeypatch.setitem(sys.modules, "nerfacc.cuda._backend", backend)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(backends, "_NERFACC_OPS_STATUS", None)
    return backends.nerfacc_ops_unavailable_reason()


def test_nerfacc_probe_finds_the_compiled_extension(monkeypatch):
    """On CUDA, ops that loaded (nerfacc.cuda._backend._C set) count as available; a failed build
    (``_C`` None) gives a one-line reason, so auto falls back to torch instead of crashing."""
    assert _probe_with_backend_module(monkeypatch, object()) == ""
    reason = _probe_with_backend_module(monkeypatch, None)
    assert reason and "\n" not in reason and "did not build" in reason


def test_stratified_marching_shifts_each_ray_lattice_by_under_one_step():
    """stratified=True starts each ray's lattice a uniform random fraction of a step after the near plane
    (one shift per ray, new on every call); stratified=False keeps the lattice on the near plane."""
    sampler = OccupancySampler(
        torch.tensor([-1.0, -1.0, -1.0, 1.0, 1.0, 1.0]), resolution=16, levels=1, backend="torch"
    )
    sampler.grid.binaries.fill_(True)
    generator = torch.Generator().manual_seed(0)
    origins = torch.tensor([0.0, 0.0, -3.0]).expand(256, 3) + 0.2 * torch.randn(256, 3, generator=generator)
    directions = torch.nn.functional.normalize(
        torch.tensor([0.0, 0.0, 1.0]) + 0.1 * torch.randn(256, 3, generator=generator), dim=-1
    )
    options = MarchingOptions(render_step_size=0.05, near_plane=0.5)

    def lattice_phase(stratified: bool) -> torch.Tensor:
        """Per sample: (t_start - near) / step, modulo one step."""
        sampler.marching = options
        ray_indices, t_starts, _ = sampler.march(origins, directions, stratified=stratified)
        steps = (t_starts - options.near_plane) / options.render_step_size
        return ray_indices, torch.remainder(steps + 1e-4, 1.0) - 1e-4

    ray_indices, phase = lattice_phase(False)
    assert phase.abs().max() < 1e-3
    ray_indices, phase = lattice_phase(True)
    first = torch.zeros(256).index_reduce_(0, ray_indices, phase, "amin", include_self=False)
    last = torch.zeros(256).index_reduce_(0, ray_indices, phase, "amax", include_self=False)
    assert (last - first).max() < 1e-3, "one shift per ray"
    assert 0.2 < float(first.std()) < 0.4 and float(first.min()) >= -1e-4 and float(first.max()) < 1.0
    assert not torch.equal(lattice_phase(True)[1], lattice_phase(True)[1])


def test_the_state_overlay_is_exactly_the_occupied_cells_of_the_finest_level():
    """What the viewer draws of the grid, and a version that changes with every update."""
    sampler = OccupancySampler(
        aabb=torch.tensor([-1.0, -2.0, -0.5, 1.0, 2.0, 1.5]), resolution=8, levels=2, backend="torch"
    )
    binaries = torch.zeros_like(sampler.grid.binaries)
    binaries[0, 1, 5, 6] = binaries[0, 7, 0, 2] = binaries[1, 3, 3, 3] = True  # two fine cells, one coarse
    sampler.grid.binaries.copy_(binaries)
    overlay = sampler.state_overlay()
    centres = overlay.points
    cell_ids, inside = grid_cell_of_points(centres, sampler.grid.aabbs, torch.tensor(binaries.shape[1:]))
    assert centres.shape == (2, 3) and inside.all() and binaries.reshape(-1)[cell_ids].all()
    assert (cell_ids < 8**3).all()  # the finest level's cells, not the coarse one
    assert overlay.cell_size == pytest.approx(0.25)  # x and z: 2 units over 8 cells
    before = sampler.state_version()
    sampler.update(0, lambda points: torch.ones(points.shape[0], 1))
    assert sampler.state_version() == before + 1


AABB_CORNERS = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]])


def sampler_scene(contract: bool) -> SamplerScene:
    return SamplerScene(AABB_CORNERS, contract, 0.05, 100.0, torch.device("cpu"), "torch", "torch")


@pytest.mark.parametrize("contract, cap, levels, cone", [(False, 1024, 1, 0.0), (True, 256, 4, 1 / 256)])
def test_occupancy_defaults_follow_the_device_and_the_scene(contract, cap, levels, cone):
    config = OccupancySamplerConfig(backend="torch")
    config.resolve("cpu", contract)
    assert (config.resolution, config.max_samples_per_ray, config.backend) == (64, cap, "torch")
    sampler = config.setup(sampler_scene(contract))
    assert isinstance(sampler, OccupancySampler)
    assert sampler.grid.resolution.tolist() == [64, 64, 64] and sampler.grid.levels == levels
    assert sampler.marching.cone_angle == cone and sampler.marching.max_samples_per_ray == cap
    assert sampler.marching.render_step_size == pytest.approx(
        float(torch.linalg.norm(AABB_CORNERS[1] - AABB_CORNERS[0])) / 1000
    )
    assert (sampler.marching.near_plane, sampler.marching.far_plane) == (0.05, 100.0)


def test_occupancy_explicit_options_reach_the_sampler():
    config = OccupancySamplerConfig(
        backend="torch",
        resolution=16,
        levels=2,
        render_step_size=0.02,
        cone_angle=0.01,
        max_samples_per_ray=0,
        update_every=4,
        warmup_steps=8,
        ema_decay=0.5,
        threshold=0.2,
    )
    config.resolve("cpu", contract=False)
    sampler = config.setup(sampler_scene(False))
    assert sampler.grid.resolution.tolist() == [16, 16, 16] and sampler.grid.levels == 2
    assert (sampler.marching.render_step_size, sampler.marching.cone_angle) == (0.02, 0.01)
    assert sampler.marching.max_samples_per_ray is None, "0: no cap"
    update = sampler.grid_update
    assert (update.every_n_steps, update.warmup_steps, update.ema_decay, update.occupancy_threshold) == (4, 8, 0.5, 0.2)


def test_occupancy_resolve_picks_a_backend_that_runs_and_refuses_one_that_cannot():
    config = OccupancySamplerConfig()
    config.resolve("cpu", contract=False)
    assert config.backend in ("kernel", "torch")
    with pytest.raises(ValueError, match="--pipeline.model.occupancy.backend torch"):
        OccupancySamplerConfig(backend="nerfacc").resolve("cpu", contract=False)


def test_culling_rounds_stay_automatic_on_the_cpu_only():
    """The automatic rounds (None) were measured on the CPU: resolved for another device they become one pass (0),
    written so into config.yml; an explicit length is kept on every device."""
    on_cpu, on_cuda = OccupancySamplerConfig(backend="torch"), OccupancySamplerConfig(backend="torch")
    on_cpu.resolve("cpu", contract=False)
    on_cuda.resolve("cuda", contract=False)
    assert on_cpu.culling_first_samples is None and on_cuda.culling_first_samples == 0
    explicit = OccupancySamplerConfig(backend="torch", culling_first_samples=16)
    explicit.resolve("cuda", contract=False)
    assert explicit.culling_first_samples == 16
