"""The fused CPU culling pass against the reference pass (the field's densities through a density function, then the
torch visibility scan): the same kept samples, bit-identical encodings, the same density heads, and no candidate
read behind a ray's early stop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from accel_test_helpers import CULLING_AABB as AABB
from accel_test_helpers import CULLING_EPS as EPS
from accel_test_helpers import hilly_field
from nerfstudio_accel.fields.density_pass_record import DensityPassRecord
from nerfstudio_accel.fields.hash_grid_field import HashGridField
from nerfstudio_accel.kernels.culling_numba import _opaque_enough, _sees_past, cull_fused, kept_rule
from nerfstudio_accel.ops._torch_impl import render_transmittance_from_density
from nerfstudio_accel.sampling.culling_pass import cull_marched
from nerfstudio_accel.spatial.block_field import BlockFields


def candidates(n_rays: int = 60, steps: int = 240, seed: int = 3):
    """Ray-sorted candidates: rays from z = -2.5 towards +z (through the box and beyond it), each keeping a random
    subset of ``steps`` intervals in order; the second ray has none."""
    generator = torch.Generator().manual_seed(seed)
    origins = torch.cat([(torch.rand(n_rays, 2, generator=generator) - 0.5) * 2.4, torch.full((n_rays, 1), -2.5)], 1)
    directions = torch.nn.functional.normalize(
        torch.cat([0.2 * (torch.rand(n_rays, 2, generator=generator) - 0.5), torch.ones(n_rays, 1)], 1), dim=-1
    )
    edges = torch.cumsum(torch.rand(steps + 1, generator=generator) * 5.0 / (0.5 * steps), 0)  # uneven intervals
    ray_indices = torch.arange(n_rays).repeat_interleave(steps)
    chosen = torch.rand(n_rays * steps, generator=generator) < 0.7
    chosen[steps : 2 * steps] = False
    return ray_indices[chosen], edges[:-1].repeat(n_rays)[chosen], edges[1:].repeat(n_rays)[chosen], origins, directions


def culled(field: HashGridField, backend: str, alpha_threshold: float = 0.01):
    """cull_marched through a record: fused on the ``kernel`` backend, the reference pass on ``torch``."""
    ray_indices, t_starts, t_ends, origins, directions = candidates()
    record = DensityPassRecord(field, keep_heads=True)
    keep, counts = cull_marched(
        ray_indices, t_starts, t_ends, origins, directions, record, alpha_threshold, EPS, 0, backend
    )
    return keep, {name: int(count) for name, count in counts.items()}, record


def on_an_edge(field: HashGridField, rows: torch.Tensor, alpha_threshold: float) -> torch.Tensor:
    """Whether the reference's opacity or transmittance at candidate ``rows`` is within float32 rounding of its
    threshold (where the MLP's summation order may tip a candidate either way)."""
    ray_indices, t_starts, t_ends, origins, directions = candidates()
    positions = origins[ray_indices] + directions[ray_indices] * (0.5 * (t_starts + t_ends))[:, None]
    with torch.no_grad():
        densities = field.density(positions).reshape(-1)
    transmittance, alphas = render_transmittance_from_density(t_starts, t_ends, densities, ray_indices, len(origins))
    near_alpha = (alphas[rows] - alpha_threshold).abs() <= 1e-4 * alpha_threshold
    near_stop = (transmittance[rows] - EPS).abs() <= 1e-4 * EPS
    return near_alpha | near_stop


@pytest.mark.parametrize(
    "contract, region, level_weights, alpha_threshold, features",
    [
        (False, None, False, 0.01, 2),
        (False, None, True, 0.01, 2),
        (False, None, False, 0.0, 2),
        (True, None, False, 0.01, 2),
        (True, torch.tensor([[0.2, 0.25, 0.3], [0.8, 0.7, 0.75]]), False, 0.01, 2),
        (False, None, False, 0.01, 3),  # the kernel sums features two at a time: an odd width
    ],
    ids=["box", "coarse-to-fine-weights", "no-alpha-threshold", "contracted", "contracted-block-region", "3-features"],
)
def test_the_fused_pass_keeps_what_the_reference_keeps(contract, region, level_weights, alpha_threshold, features):
    field = hilly_field(contract, region, features=features)
    if level_weights:
        field.level_weights = torch.linspace(1.0, 0.0, 16)
    keep, counts, record = culled(field, "kernel", alpha_threshold)
    reference_keep, reference_counts, reference_record = culled(field, "torch", alpha_threshold)
    assert reference_counts["evaluated"] == reference_counts["candidates"]  # the reference reads every candidate
    assert 0 < reference_counts["kept"] < reference_counts["candidates"]
    disagree = torch.tensor(sorted(set(keep.tolist()) ^ set(reference_keep.tolist())), dtype=torch.long)
    assert len(disagree) <= 2 and bool(on_an_edge(field, disagree, alpha_threshold).all()), disagree
    both = torch.tensor(sorted(set(keep.tolist()) & set(reference_keep.tolist())), dtype=torch.long)
    mine, theirs = torch.searchsorted(keep, both), torch.searchsorted(reference_keep, both)
    assert torch.equal(record.kept_encodings()[mine], reference_record.kept_encodings()[theirs])
    torch.testing.assert_close(record.kept_heads()[mine], reference_record.kept_heads()[theirs], rtol=1e-5, atol=1e-5)
    assert counts["candidates"] == reference_counts["candidates"] and counts["kept"] == len(keep)
    assert counts["kept"] + counts["alpha_culled"] <= counts["evaluated"] < counts["candidates"]  # rays stopped
    if alpha_threshold > 0:
        assert counts["alpha_culled"] > 0


def test_the_prefetch_changes_no_value():
    """The kernel with and without the prefetch of each ray's next candidate: the same kept rows, encodings, heads
    and counts, bit for bit."""
    network = hilly_field().density_network(heads=True)
    ray_indices, t_starts, t_ends, origins, directions = candidates()
    with_prefetch, without = (
        cull_fused(network, ray_indices, t_starts, t_ends, origins, directions, 0.01, EPS, 1e4, prefetch)
        for prefetch in (True, False)
    )
    keep = with_prefetch[0]
    assert torch.equal(keep, without[0]) and 0 < int(keep.sum()) < len(keep)
    for ours, theirs in zip(with_prefetch[1:3], without[1:3]):
        assert torch.equal(ours[keep], theirs[keep])
    assert with_prefetch[3] == without[3]


def test_a_ray_reads_nothing_behind_its_first_opaque_candidate():
    """An opaque field: each ray with candidates evaluates and keeps its first one only."""
    field = hilly_field()
    with torch.no_grad():
        field.density_mlp.layers[1].bias[0] = 200.0
    keep, counts, _ = culled(field, "kernel")
    ray_indices = candidates()[0]
    firsts = torch.nonzero(torch.cat([torch.tensor([True]), ray_indices[1:] != ray_indices[:-1]])).reshape(-1)
    assert torch.equal(keep, firsts)
    assert counts["evaluated"] == counts["kept"] == len(firsts) == 59


def test_nan_densities_keep_nothing_and_stop_their_rays():
    """A NaN density is neither kept nor counted as culled by opacity, and it ends its ray (its optical depth counts
    as the cap), as in the reference."""
    field = hilly_field()
    with torch.no_grad():
        field.density_mlp.layers[1].bias[0] = float("nan")
    keep, counts, _ = culled(field, "kernel")
    reference_keep, reference_counts, _ = culled(field, "torch")
    assert keep.numel() == reference_keep.numel() == 0
    assert counts["alpha_culled"] == reference_counts["alpha_culled"] == 0
    assert counts["evaluated"] == 59


def test_no_candidates_keep_nothing():
    field = hilly_field()
    empty = torch.zeros(0)
    keep, encodings, heads, counts = cull_fused(
        field.density_network(), empty.long(), empty, empty, torch.zeros(3, 3), torch.ones(3, 3), 0.01, EPS, 1e4
    )
    assert keep.shape == (0,) and encodings.shape == (0, 16) and heads.shape == (0, 1)
    assert counts == {"evaluated": 0, "alpha_culled": 0}


@pytest.mark.parametrize("level_weights", [False, True], ids=["plain", "coarse-to-fine-weights"])
def test_the_kernel_computes_the_kept_samples_density_heads(level_weights):
    """With every head row the kept rows hold the field's density heads (to float32 rounding); with the density's
    row alone, the same raw densities. Rows that were not kept are not written."""
    field = hilly_field()
    if level_weights:
        field.level_weights = torch.linspace(1.0, 0.2, 16)
    ray_indices, t_starts, t_ends, origins, directions = candidates()
    outputs = {}
    for heads in (True, False):
        network = field.density_network(heads=heads)
        assert network.head_weight.shape == (16 if heads else 1, 64)
        outputs[heads] = cull_fused(network, ray_indices, t_starts, t_ends, origins, directions, 0.01, EPS, 1e4)
    (keep, _, heads, _), (keep_one, _, raw, _) = outputs[True], outputs[False]
    assert torch.equal(keep, keep_one) and heads.shape == (len(keep), 16) and raw.shape == (len(keep), 1)
    rows = torch.nonzero(keep).reshape(-1)
    assert 0 < len(rows) < len(keep)
    positions = origins[ray_indices[rows]] + directions[ray_indices[rows]] * (0.5 * (t_starts + t_ends))[rows, None]
    with torch.no_grad():
        expected = field.density_head(positions)
    torch.testing.assert_close(heads[rows], expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(raw[rows], heads[rows, :1])


def test_only_a_kernel_field_on_the_cpu_has_a_density_network():
    """The torch hash backend and a split scene's fields cull through calls; so does a record already called."""
    assert hilly_field().density_network() is not None
    assert hilly_field(hash_backend="torch").density_network() is None
    cells = torch.stack([AABB, AABB])
    assert BlockFields({0: hilly_field(), 1: hilly_field()}, cells, None).density_network() is None
    record = DensityPassRecord(hilly_field(), keep_heads=False)
    assert record.density_network() is not None
    record(torch.zeros(4, 3))
    assert record.density_network() is None


@pytest.mark.parametrize("early_stop_eps, alpha_threshold", [(1e-4, 1e-2), (1e-4, 2.7e-3), (0.3, 0.9), (1e-30, 1e-7)])
def test_the_kept_rule_takes_the_thresholds_exactly_where_exp_does(early_stop_eps, alpha_threshold):
    """The kernels compare optical depths with kept_rule's limits instead of taking exponentials: the same answer
    as ``exp`` at the limits, one step past them and at random values around them."""
    depth_limit, threshold, least_kept = kept_rule(early_stop_eps, alpha_threshold)
    eps = np.float64(early_stop_eps)
    generator = np.random.default_rng(0)
    depths = np.concatenate(
        [[depth_limit, np.nextafter(depth_limit, np.inf)], depth_limit * generator.uniform(0.99, 1.01, 200)]
    )
    for depth in depths:
        assert (depth <= depth_limit) == _sees_past(depth, eps)
    kept = np.float32(least_kept)
    steps = np.concatenate([[kept, np.nextafter(kept, np.float32(0))], kept * generator.uniform(0.99, 1.01, 200)])
    for sigma_dt in steps.astype(np.float32):
        assert (sigma_dt >= least_kept) == _opaque_enough(sigma_dt, threshold)


def test_the_kept_rule_at_its_ends():
    """No threshold keeps everything; a ray stops at once where even full transmittance is below the threshold, and
    never where the threshold is 0; an opacity above 1 keeps nothing."""
    assert kept_rule(1e-4, 0.0)[2] < 0
    assert kept_rule(2.0, 1e-2)[0] == -1.0 and kept_rule(0.0, 1e-2)[0] == np.inf
    assert np.isnan(kept_rule(1e-4, 1.5)[2])
