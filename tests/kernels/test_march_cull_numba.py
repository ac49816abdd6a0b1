"""The fused marching and culling kernel against the marcher followed by the culling pass: bit-identical samples and
encodings to the numba marcher and fused culling kernel (the same walk and arithmetic), the reference's samples
(torch marcher, densities through calls, torch scan) up to candidates on a threshold's edge, and no step marched
behind a ray's early stop."""

from __future__ import annotations

import math

import pytest
import torch

from accel_test_helpers import CULLING_AABB as AABB
from accel_test_helpers import CULLING_EPS as EPS
from accel_test_helpers import hilly_field
from nerfstudio_accel.fields.density_pass_record import DensityPassRecord
from nerfstudio_accel.kernels import marching_numba
from nerfstudio_accel.kernels.culling_numba import cull_fused
from nerfstudio_accel.kernels.march_cull_numba import CHUNK_RAYS, march_and_cull
from nerfstudio_accel.ops import _torch_impl
from nerfstudio_accel.sampling.culling_pass import cull_marched
from nerfstudio_accel.sampling.occupancy import MarchingOptions, OccupancySampler

DEPTH_CAP = 1e4


def rays(n_rays: int = 70, seed: int = 3):
    """Rays from z = -2.5 towards +z through the box, slightly tilted (the last chunk is partly filled)."""
    generator = torch.Generator().manual_seed(seed)
    origins = torch.cat([(torch.rand(n_rays, 2, generator=generator) - 0.5) * 2.4, torch.full((n_rays, 1), -2.5)], 1)
    directions = torch.nn.functional.normalize(
        torch.cat([0.2 * (torch.rand(n_rays, 2, generator=generator) - 0.5), torch.ones(n_rays, 1)], 1), dim=-1
    )
    return origins, directions


def grid(levels: int = 1, seed: int = 1):
    """A random grid, 40% of its cells occupied, over the box (each further level twice as large)."""
    binaries = torch.rand(levels, 32, 32, 32, generator=torch.Generator().manual_seed(seed)) < 0.4
    aabbs = torch.cat([AABB.reshape(1, 6) * 2**level for level in range(levels)])
    return binaries, aabbs


def marched_then_culled(field, origins, directions, binaries, aabbs, step, cone, cap, alpha_threshold):
    """The numba marcher, then the fused culling kernel (every head row): kept ``ray_indices, t_starts, t_ends,
    encodings, heads, counts``."""
    near, far = torch.zeros(len(origins)), torch.full((len(origins),), 1e3)
    ray_indices, t_starts, t_ends = marching_numba.traverse_occupancy_grid(
        origins, directions, binaries, aabbs, near, far, step, cone, cap
    )
    keep, encodings, heads, counts = cull_fused(
        field.density_network(heads=True),
        ray_indices,
        t_starts,
        t_ends,
        origins,
        directions,
        alpha_threshold,
        EPS,
        DEPTH_CAP,
    )
    kept = torch.nonzero(keep).reshape(-1)
    counts = {**counts, "candidates": len(t_starts)}
    return ray_indices[kept], t_starts[kept], t_ends[kept], encodings[kept], heads[kept], counts


def fused(field, origins, directions, binaries, aabbs, step, cone, cap, alpha_threshold, expected=16.0, prefetch=True):
    near, far = torch.zeros(len(origins)), torch.full((len(origins),), 1e3)
    return march_and_cull(
        field.density_network(heads=True), origins, directions, binaries, aabbs, near, far, step, cone, cap, alpha_threshold,
        EPS, DEPTH_CAP, expected, prefetch,
    )  # fmt: skip


@pytest.mark.parametrize(
    "levels, cone, cap, alpha_threshold, expected",
    [
        (1, 0.0, None, 0.01, 64.0),
        (1, 0.0, None, 0.01, 4.0),
        (1, 0.0, 7, 0.01, 16.0),
        (1, 0.0, None, 0.0, 64.0),
        (2, 1 / 64, None, 0.01, 64.0),
    ],
    ids=["uniform", "scratch-overflows", "capped", "no-alpha-threshold", "cone-two-levels"],
)
def test_fused_marching_and_culling_equals_the_marcher_then_the_culling_kernel(
    levels, cone, cap, alpha_threshold, expected
):
    """Bit for bit, whether the kept samples fit the scratch rows or chunks are marched again, and with or without
    the prefetch."""
    field = hilly_field(contract=levels > 1)
    origins, directions = rays()
    binaries, aabbs = grid(levels)
    step = 3 * math.sqrt(3) / 300
    reference = marched_then_culled(field, origins, directions, binaries, aabbs, step, cone, cap, alpha_threshold)
    mine = fused(field, origins, directions, binaries, aabbs, step, cone, cap, alpha_threshold, expected)
    assert 0 < len(mine[0]) <= reference[5]["evaluated"] < reference[5]["candidates"]  # rays stopped early
    for ours, theirs in zip(mine[:5], reference[:5]):
        assert torch.equal(ours, theirs)
    assert mine[5] == {"evaluated": reference[5]["evaluated"], "alpha_culled": reference[5]["alpha_culled"]}
    unprefetched = fused(field, origins, directions, binaries, aabbs, step, cone, cap, alpha_threshold, expected, False)
    for ours, without_prefetch in zip(mine[:5], unprefetched[:5]):  # the prefetch changes the speed only
        assert torch.equal(ours, without_prefetch)
    assert mine[5] == unprefetched[5]
    fits = torch.bincount(mine[0] // CHUNK_RAYS) <= CHUNK_RAYS * min(expected, cap or math.inf)
    if expected < 16:  # some chunks kept more than their scratch rows and were marched again, others were not
        assert fits.any() and not fits.all()
    else:  # every chunk packed from its scratch rows
        assert fits.all()
    if cap is not None:  # the cap binds: without it more candidates are marched
        uncapped = marched_then_culled(field, origins, directions, binaries, aabbs, step, cone, None, alpha_threshold)
        assert reference[5]["candidates"] < uncapped[5]["candidates"]
        assert torch.bincount(reference[0]).max() <= cap


def test_fused_marching_and_culling_keeps_what_the_reference_keeps():
    """Against the torch marcher and the reference culling pass (densities through a record's calls, the torch
    scan): the same samples, up to one on a threshold's edge, and the same encodings."""
    field = hilly_field()
    origins, directions = rays()
    binaries, aabbs = grid()
    step = 3 * math.sqrt(3) / 300
    near, far = torch.zeros(len(origins)), torch.full((len(origins),), 1e3)
    ray_indices, t_starts, t_ends = _torch_impl.traverse_occupancy_grid(
        origins, directions, binaries, aabbs, near, far, step, 0.0
    )
    record = DensityPassRecord(field, keep_heads=False)
    keep, counts = cull_marched(ray_indices, t_starts, t_ends, origins, directions, record, 0.01, EPS, 0, "torch")
    mine = fused(field, origins, directions, binaries, aabbs, step, 0.0, None, 0.01)
    theirs = {(int(r), float(t)) for r, t in zip(ray_indices[keep], t_starts[keep])}
    ours = {(int(r), float(t)) for r, t in zip(mine[0], mine[1])}
    assert len(ours ^ theirs) <= 1 and len(ours) > 100
    both = [i for i, key in enumerate(zip(mine[0].tolist(), mine[1].tolist())) if key in theirs]
    reference_rows = {key: i for i, key in enumerate(zip(ray_indices[keep].tolist(), t_starts[keep].tolist()))}
    rows = [reference_rows[key] for key in zip(mine[0][both].tolist(), mine[1][both].tolist())]
    assert torch.equal(mine[3][both], record.kept_encodings()[rows])


def test_an_opaque_field_marches_each_ray_to_its_first_occupied_step_only():
    field = hilly_field()
    with torch.no_grad():
        field.density_mlp.layers[1].bias[0] = 200.0
    origins, directions = rays()
    binaries, aabbs = grid()
    step = 3 * math.sqrt(3) / 300
    reference = marched_then_culled(field, origins, directions, binaries, aabbs, step, 0.0, None, 0.01)
    ray_indices, t_starts, _, _, _, counts = fused(field, origins, directions, binaries, aabbs, step, 0.0, None, 0.01)
    hit = torch.unique(reference[0])
    assert torch.equal(ray_indices, hit) and counts["evaluated"] == len(hit) == len(origins)
    assert torch.equal(t_starts, reference[1])


def test_nan_densities_keep_nothing_and_stop_their_rays():
    field = hilly_field()
    with torch.no_grad():
        field.density_mlp.layers[1].bias[0] = float("nan")
    origins, directions = rays()
    binaries, aabbs = grid()
    ray_indices, _, _, encodings, heads, counts = fused(
        field, origins, directions, binaries, aabbs, 0.02, 0.0, None, 0.01
    )
    assert ray_indices.numel() == 0 and encodings.shape == (0, 16) and heads.shape == (0, 16)
    assert counts == {"evaluated": len(origins), "alpha_culled": 0}


def test_no_rays_and_rays_that_miss_keep_nothing():
    field = hilly_field()
    binaries, aabbs = grid()
    empty = fused(field, torch.zeros(0, 3), torch.zeros(0, 3), binaries, aabbs, 0.02, 0.0, None, 0.01)
    assert empty[0].shape == (0,) and empty[3].shape == (0, 16) and empty[4].shape == (0, 16)
    assert empty[5] == {"evaluated": 0, "alpha_culled": 0}
    away = fused(field, torch.full((5, 3), 4.0), torch.ones(5, 3) / 3**0.5, binaries, aabbs, 0.02, 0.0, None, 0.01)
    assert away[0].numel() == 0 and away[5]["evaluated"] == 0


def test_the_sampler_marches_and_culls_in_one_pass_through_a_record():
    """OccupancySampler.sample with a record of a kernel field on the ``kernel`` backend: the samples of marching then
    culling (the ``torch`` backend), the record holding their encodings, and candidates counted as marched."""
    field = hilly_field()
    origins, directions = rays()
    binaries, _ = grid()
    outcomes = {}
    for backend in ("kernel", "torch"):
        sampler = OccupancySampler(
            AABB.flatten(), resolution=32, backend=backend, marching=MarchingOptions(render_step_size=0.02)
        )
        sampler.grid.binaries = binaries.clone()
        sampler.warmed_up.fill_(True)
        sampler.grid.occs.fill_(1.0)
        record = DensityPassRecord(field, keep_heads=True)
        samples = sampler.sample(origins, directions, density_fn=record)
        outcomes[backend] = samples, record, sampler.figures()
    (ours, record, figures), (theirs, reference, reference_figures) = outcomes["kernel"], outcomes["torch"]
    assert len(ours.ray_indices) > 100
    assert torch.equal(ours.ray_indices, theirs.ray_indices) and torch.equal(ours.t_starts, theirs.t_starts)
    assert torch.equal(record.kept_encodings(), reference.kept_encodings())
    torch.testing.assert_close(record.kept_heads(), reference.kept_heads(), rtol=1e-5, atol=1e-5)
    assert figures["candidates"] == figures["evaluated"] < reference_figures["evaluated"]
    assert figures["kept"] == reference_figures["kept"] == len(ours.ray_indices)
