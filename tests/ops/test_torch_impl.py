"""The ops' pure-PyTorch twins against brute-force float64 references written here, loop by loop.

The marching reference walks nerfacc's step lattice sequentially (``t += max(t * cone, step)``)
and looks each midpoint up in the grid with explicit per-level box checks. The op under test
works in float32 with a closed-form lattice, so a lattice step whose decision would change if
its midpoint moved by ``AMBIGUITY_TOL`` (a cell face with different occupancy on either side, or
the ``t_min`` / ``t_max`` boundary) is flagged ambiguous and left out of the exact comparison;
the tests assert such steps are rare, so the comparison stays exact for nearly every sample.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from nerfstudio_accel.ops import _torch_impl

AMBIGUITY_TOL = 1e-4
"""Distance (world units / along the ray) within which float32 and float64 decisions may differ."""
T_ATOL = 1e-4
"""float32 closed-form lattice vs float64 sequential lattice."""

BASE_AABB = (-1.0, -0.5, 0.0, 1.0, 1.5, 1.0)
"""Off-centre, non-cubic, exactly representable in float32 (so are its 2**i enlargements)."""


# ---------------------------------------------------------------------------------------------
# Brute-force marching reference
# ---------------------------------------------------------------------------------------------


def level_boxes(base_aabb: tuple, levels: int) -> list[tuple[list[float], list[float]]]:
    """``(lower, upper)`` of each level: the base box enlarged ``2**i`` about its centre."""
    lower, upper = base_aabb[:3], base_aabb[3:]
    centre = [(lo + hi) / 2 for lo, hi in zip(lower, upper)]
    half = [(hi - lo) / 2 for lo, hi in zip(lower, upper)]
    return [
        ([c - h * 2**i for c, h in zip(centre, half)], [c + h * 2**i for c, h in zip(centre, half)])
        for i in range(levels)
    ]


def aabbs_tensor(base_aabb: tuple, levels: int) -> torch.Tensor:
    """The ``(levels, 6)`` float32 boxes the op takes."""
    return torch.tensor([lower + upper for lower, upper in level_boxes(base_aabb, levels)], dtype=torch.float32)


def slab_interval(
    origin: list[float], direction: list[float], lower: list[float], upper: list[float]
) -> tuple[float, float]:
    """``(t_enter, t_exit)`` of a ray and a box (``t_enter > t_exit`` when it misses)."""
    t_enter, t_exit = -math.inf, math.inf
    for axis in range(3):
        t_a = (lower[axis] - origin[axis]) / direction[axis]
        t_b = (upper[axis] - origin[axis]) / direction[axis]
        t_enter, t_exit = max(t_enter, min(t_a, t_b)), min(t_exit, max(t_a, t_b))
    return t_enter, t_exit


def is_occupied(point: list[float], binaries: np.ndarray, boxes: list) -> bool:
    """Occupancy of the cell holding ``point`` in the finest level whose box contains it."""
    resolution = binaries.shape[1:]
    for level, (lower, upper) in enumerate(boxes):
        if all(lower[a] <= point[a] <= upper[a] for a in range(3)):
            cell = tuple(
                min(
                    max(math.floor((point[a] - lower[a]) / (upper[a] - lower[a]) * resolution[a]), 0), resolution[a] - 1
                )
                for a in range(3)
            )
            return bool(binaries[(level, *cell)])
    return False


def occupancy_is_ambiguous(point: list[float], binaries: np.ndarray, boxes: list) -> bool:
    """True when moving ``point`` by ``AMBIGUITY_TOL`` along some axis changes its occupancy."""
    occupied = is_occupied(point, binaries, boxes)
    for axis in range(3):
        for sign in (-1.0, 1.0):
            moved = list(point)
            moved[axis] += sign * AMBIGUITY_TOL
            if is_occupied(moved, binaries, boxes) != occupied:
                return True
    return False


def reference_march(
    origin: list[float],
    direction: list[float],
    binaries: np.ndarray,
    boxes: list,
    near: float,
    far: float,
    step_size: float,
    cone_angle: float,
) -> tuple[list[tuple[float, float]], list[float]]:
    """Samples ``[(t_start, t_end)]`` of one ray, and the starts of ambiguous lattice steps."""
    t_enter, t_exit = slab_interval(origin, direction, *boxes[-1])
    t_min, t_max = max(near, t_enter), min(far, t_exit)
    samples, ambiguous = [], []
    t = near
    while True:
        dt = max(t * cone_angle, step_size)
        t_mid = t + 0.5 * dt
        if t_mid >= t_max + AMBIGUITY_TOL:
            break
        point = [o + d * t_mid for o, d in zip(origin, direction)]
        in_range = t_min <= t_mid < t_max
        if in_range and is_occupied(point, binaries, boxes):
            samples.append((t, t + dt))
        near_range_edge = abs(t_mid - t_min) < AMBIGUITY_TOL or abs(t_mid - t_max) < AMBIGUITY_TOL
        if near_range_edge or (in_range and occupancy_is_ambiguous(point, binaries, boxes)):
            ambiguous.append(t)
        t += dt
    return samples, ambiguous


def reference_march_all(origins, directions, binaries, base_aabb, near, far, step_size, cone_angle):
    """``reference_march`` of every ray (float64 copies of the float32 inputs)."""
    boxes = level_boxes(base_aabb, binaries.shape[0])
    grid = binaries.numpy()
    return [
        reference_march(o, d, grid, boxes, n, f, step_size, cone_angle)
        for o, d, n, f in zip(
            origins.double().tolist(), directions.double().tolist(), near.double().tolist(), far.double().tolist()
        )
    ]


def assert_matches_reference(ray_indices, t_starts, t_ends, references, max_ambiguous_fraction=0.02):
    """Per ray, outside ambiguous steps: same sample count and the same intervals (within ``T_ATOL``)."""
    n_ambiguous = sum(len(ambiguous) for _, ambiguous in references)
    n_reference = sum(len(samples) for samples, _ in references)
    assert n_ambiguous <= max_ambiguous_fraction * max(n_reference, 1), "reference too ambiguous to test anything"
    for ray, (samples, ambiguous) in enumerate(references):
        mask = ray_indices == ray
        ours = list(zip(t_starts[mask].double().tolist(), t_ends[mask].double().tolist()))

        def unambiguous(intervals):
            return [iv for iv in intervals if all(abs(iv[0] - a) > T_ATOL for a in ambiguous)]

        ours, theirs = unambiguous(ours), unambiguous(samples)
        assert len(ours) == len(theirs), f"ray {ray}: {len(ours)} samples, reference {len(theirs)}"
        if theirs:
            np.testing.assert_allclose(np.array(ours), np.array(theirs), rtol=0, atol=T_ATOL, err_msg=f"ray {ray}")


# ---------------------------------------------------------------------------------------------
# Random scenes
# ---------------------------------------------------------------------------------------------


def random_binaries(levels: int, resolution: tuple, seed: int, occupancy: float = 0.3) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(levels, *resolution, generator=generator) < occupancy


def random_rays(n_rays: int, base_aabb: tuple, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit-direction float32 rays: half start outside the base box aimed near its centre (some
    miss), a quarter start inside it, a quarter start outside with fully random directions."""
    generator = torch.Generator().manual_seed(seed)
    lower, upper = torch.tensor(base_aabb[:3]), torch.tensor(base_aabb[3:])
    centre, half = (lower + upper) / 2, (upper - lower) / 2
    n_aimed, n_inside = n_rays // 2, n_rays // 4
    n_random = n_rays - n_aimed - n_inside

    def unit(v):
        return v / v.norm(dim=-1, keepdim=True)

    outside = centre + 2.5 * unit(torch.randn(n_aimed + n_random, 3, generator=generator))
    target = centre + half * torch.randn(n_aimed, 3, generator=generator)
    inside = lower + (upper - lower) * torch.rand(n_inside, 3, generator=generator)
    origins = torch.cat([outside[:n_aimed], inside, outside[n_aimed:]])
    directions = torch.cat(
        [unit(target - outside[:n_aimed]), unit(torch.randn(n_inside + n_random, 3, generator=generator))]
    )
    return origins.float(), directions.float()


MARCHING_CASES = [
    # levels, resolution, cone_angle, step_size, near, far
    pytest.param(1, (16, 24, 20), 0.0, 0.01, 0.0, 1e3, id="1level-uniform"),
    pytest.param(1, (32, 32, 32), 0.02, 0.01, 0.3, 1e3, id="1level-cone-near"),
    pytest.param(3, (16, 16, 16), 0.0, 0.02, 0.3, 4.0, id="3levels-uniform-near-far"),
    pytest.param(3, (24, 16, 32), 0.02, 0.01, 0.0, 1e3, id="3levels-cone"),
    pytest.param(3, (16, 16, 16), 0.02, 0.01, 1.0, 1e3, id="3levels-cone-near-past-switch"),
]


@pytest.mark.parametrize("levels, resolution, cone_angle, step_size, near, far", MARCHING_CASES)
def test_traverse_matches_bruteforce_reference(levels, resolution, cone_angle, step_size, near, far):
    """Random grid and rays: per-ray counts, ray indices and intervals equal the float64 lattice walk."""
    binaries = random_binaries(levels, resolution, seed=levels * 100 + resolution[0])
    origins, directions = random_rays(96, BASE_AABB, seed=7 + levels)
    near_planes, far_planes = torch.full((96,), near), torch.full((96,), far)
    ray_indices, t_starts, t_ends = _torch_impl.traverse_occupancy_grid(
        origins, directions, binaries, aabbs_tensor(BASE_AABB, levels), near_planes, far_planes, step_size, cone_angle
    )
    references = reference_march_all(
        origins, directions, binaries, BASE_AABB, near_planes, far_planes, step_size, cone_angle
    )
    assert ray_indices.dtype == torch.long
    assert sum(len(samples) for samples, _ in references) > 300, "scene too sparse to test anything"
    assert_matches_reference(ray_indices, t_starts, t_ends, references)


def test_traverse_all_occupied_samples_every_lattice_step_in_box():
    """With every cell occupied, each lattice step whose midpoint is in ``[t_min, t_max)`` is a sample."""
    levels, step_size, cone_angle = 2, 0.02, 0.02
    binaries = torch.ones(levels, 8, 8, 8, dtype=torch.bool)
    origins, directions = random_rays(32, BASE_AABB, seed=3)
    near_planes, far_planes = torch.full((32,), 0.1), torch.full((32,), 1e3)
    ray_indices, t_starts, t_ends = _torch_impl.traverse_occupancy_grid(
        origins, directions, binaries, aabbs_tensor(BASE_AABB, levels), near_planes, far_planes, step_size, cone_angle
    )
    references = reference_march_all(
        origins, directions, binaries, BASE_AABB, near_planes, far_planes, step_size, cone_angle
    )
    assert_matches_reference(ray_indices, t_starts, t_ends, references)
    # consecutive samples of a ray tile its in-box range without gaps
    same_ray = ray_indices[1:] == ray_indices[:-1]
    torch.testing.assert_close(t_starts[1:][same_ray], t_ends[:-1][same_ray], rtol=0, atol=T_ATOL)


def test_traverse_empty_grid_gives_no_samples():
    """No occupied cell: no samples, and correctly typed empty outputs."""
    origins, directions = random_rays(32, BASE_AABB, seed=4)
    ray_indices, t_starts, t_ends = _torch_impl.traverse_occupancy_grid(
        origins,
        directions,
        torch.zeros(2, 16, 16, 16, dtype=torch.bool),
        aabbs_tensor(BASE_AABB, 2),
        torch.zeros(32),
        torch.full((32,), 1e3),
        0.01,
        0.0,
    )
    assert ray_indices.shape == t_starts.shape == t_ends.shape == (0,)
    assert ray_indices.dtype == torch.long and t_starts.dtype == torch.float32


def test_traverse_rays_missing_the_box_give_no_samples():
    """Rays that pass beside the outermost box or point away from it get nothing, even in a full grid."""
    origins = torch.tensor([[-3.0, 3.0, 0.5], [3.0, 0.5, 0.5], [0.0, 0.5, 5.0], [-5.0, 0.5, 0.5]])
    directions = torch.nn.functional.normalize(
        torch.tensor([[1.0, 0.01, 0.02], [1.0, 0.1, -0.05], [0.02, 0.03, 1.0], [1.0, 0.0, 0.0]]), dim=-1
    )
    far = torch.tensor([1e3, 1e3, 1e3, 3.9])  # last: aimed at the box but stops before it
    ray_indices, _, _ = _torch_impl.traverse_occupancy_grid(
        origins,
        directions,
        torch.ones(1, 8, 8, 8, dtype=torch.bool),
        aabbs_tensor(BASE_AABB, 1),
        torch.zeros(4),
        far,
        0.01,
        0.0,
    )
    assert ray_indices.numel() == 0


def test_traverse_output_sorted_by_ray_then_t():
    """Packed output is grouped by ray in increasing ray order, and increasing in ``t`` within a ray."""
    binaries = random_binaries(2, (16, 16, 16), seed=5, occupancy=0.5)
    origins, directions = random_rays(48, BASE_AABB, seed=5)
    ray_indices, t_starts, t_ends = _torch_impl.traverse_occupancy_grid(
        origins, directions, binaries, aabbs_tensor(BASE_AABB, 2), torch.zeros(48), torch.full((48,), 1e3), 0.01, 0.01
    )
    assert ray_indices.numel() > 0
    assert bool((ray_indices[1:] >= ray_indices[:-1]).all())
    same_ray = ray_indices[1:] == ray_indices[:-1]
    assert bool((t_starts[1:][same_ray] >= t_ends[:-1][same_ray] - 1e-6).all())
    assert bool((t_ends > t_starts).all())


def test_traverse_chunking_does_not_change_the_result(monkeypatch):
    """Marching in many small ray chunks gives exactly the single-chunk result."""
    binaries = random_binaries(2, (16, 16, 16), seed=6)
    origins, directions = random_rays(40, BASE_AABB, seed=6)
    arguments = (
        origins,
        directions,
        binaries,
        aabbs_tensor(BASE_AABB, 2),
        torch.zeros(40),
        torch.full((40,), 1e3),
        0.01,
        0.02,
    )
    whole = _torch_impl.traverse_occupancy_grid(*arguments)
    monkeypatch.setattr(_torch_impl, "MAX_CANDIDATES_PER_CHUNK", 100)
    chunked = _torch_impl.traverse_occupancy_grid(*arguments)
    assert torch.equal(whole[0], chunked[0])
    for expected, actual in zip(whole[1:], chunked[1:]):  # vectorised pow may round the last bit differently
        torch.testing.assert_close(actual, expected, rtol=0, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Transmittance, culling, packed scans
# ---------------------------------------------------------------------------------------------


def random_packed_samples(n_rays: int, max_per_ray: int, seed: int):
    """Sorted packed float32 samples with contiguous intervals, some rays empty, densities spanning
    transparent to opaque: ``ray_indices, t_starts, t_ends, sigmas``."""
    generator = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, max_per_ray + 1, (n_rays,), generator=generator)
    counts[::7] = 0
    ray_indices = torch.repeat_interleave(torch.arange(n_rays), counts)
    dt = 0.005 + 0.045 * torch.rand(ray_indices.shape[0], generator=generator)
    t_ends = torch.zeros_like(dt)
    t_starts = torch.zeros_like(dt)
    offset = 0
    for count in counts.tolist():
        ends = 0.5 + torch.cumsum(dt[offset : offset + count], 0)
        t_ends[offset : offset + count] = ends
        t_starts[offset : offset + count] = ends - dt[offset : offset + count]
        offset += count
    ray_scale = torch.exp(2.0 * torch.randn(n_rays, generator=generator))
    sigmas = ray_scale[ray_indices] * torch.exp(1.5 * torch.randn(ray_indices.shape[0], generator=generator))
    return ray_indices, t_starts, t_ends, sigmas


def reference_transmittance_and_alpha(t_starts, t_ends, sigmas, ray_indices) -> tuple[list[float], list[float]]:
    """float64 ``T_i = exp(-sum_{j<i} sigma_j dt_j)`` and ``alpha_i`` by a loop over sorted packed samples."""
    optical_depth: dict[int, float] = {}
    transmittance, alphas = [], []
    for t0, t1, sigma, ray in zip(
        t_starts.double().tolist(), t_ends.double().tolist(), sigmas.double().tolist(), ray_indices.tolist()
    ):
        depth = optical_depth.get(ray, 0.0)
        transmittance.append(math.exp(-depth))
        alphas.append(1.0 - math.exp(-sigma * (t1 - t0)))
        optical_depth[ray] = depth + sigma * (t1 - t0)
    return transmittance, alphas


def reference_visibility(t_starts, t_ends, sigmas, ray_indices, early_stop_eps, alpha_threshold):
    """``(visible, near_tie)``: the float64 mask and where float32 rounding could flip it."""
    transmittance, alphas = reference_transmittance_and_alpha(t_starts, t_ends, sigmas, ray_indices)
    trans, alpha = np.array(transmittance), np.array(alphas)
    visible = (trans >= early_stop_eps) & (alpha >= alpha_threshold)
    near_tie = (np.abs(trans / early_stop_eps - 1.0) < 1e-4) | (np.abs(alpha - alpha_threshold) < 1e-5)
    return torch.from_numpy(visible), torch.from_numpy(near_tie)


def test_transmittance_and_weights_match_bruteforce():
    """Packed transmittance, opacity and weights equal the float64 per-ray loop."""
    ray_indices, t_starts, t_ends, sigmas = random_packed_samples(40, 50, seed=11)
    transmittance, alphas = _torch_impl.render_transmittance_from_density(t_starts, t_ends, sigmas, ray_indices, 40)
    weights = _torch_impl.render_weight_from_density(t_starts, t_ends, sigmas, ray_indices, 40)
    expected_trans, expected_alpha = (
        torch.tensor(values, dtype=torch.float64)
        for values in reference_transmittance_and_alpha(t_starts, t_ends, sigmas, ray_indices)
    )
    torch.testing.assert_close(transmittance.double(), expected_trans, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(alphas.double(), expected_alpha, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(weights.double(), expected_trans * expected_alpha, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("early_stop_eps, alpha_threshold", [(1e-4, 0.0), (1e-4, 1e-2), (1e-2, 0.1)])
def test_visibility_matches_bruteforce(early_stop_eps, alpha_threshold):
    """Visible = transmittance >= early_stop_eps and alpha >= alpha_threshold, per the float64 loop."""
    ray_indices, t_starts, t_ends, sigmas = random_packed_samples(64, 60, seed=12)
    visible = _torch_impl.render_visibility_from_density(
        t_starts, t_ends, sigmas, ray_indices, 64, early_stop_eps=early_stop_eps, alpha_threshold=alpha_threshold
    )
    expected, near_tie = reference_visibility(t_starts, t_ends, sigmas, ray_indices, early_stop_eps, alpha_threshold)
    assert visible.dtype == torch.bool
    assert int(near_tie.sum()) < 5
    assert torch.equal(visible[~near_tie], expected[~near_tie])
    # the data exercises both kinds of culling and keeps something
    transmittance, alphas = reference_transmittance_and_alpha(t_starts, t_ends, sigmas, ray_indices)
    assert 0 < int(expected.sum()) < expected.numel()
    assert min(transmittance) < early_stop_eps
    if alpha_threshold > 0:
        assert any(a < alpha_threshold and t >= early_stop_eps for a, t in zip(alphas, transmittance))


def reference_exclusive_sum(values: list[float], ray_indices: list[int]) -> list[float]:
    running: dict[int, float] = {}
    out = []
    for value, ray in zip(values, ray_indices):
        out.append(running.get(ray, 0.0))
        running[ray] = running.get(ray, 0.0) + value
    return out


def test_packed_exclusive_sum_matches_per_ray_cumsum():
    """Per-ray exclusive prefix sums, rays without samples between others (ray 0 is empty by construction)."""
    ray_indices, _, _, values = random_packed_samples(30, 20, seed=13)
    assert int((ray_indices == 0).sum()) == 0
    result = _torch_impl.packed_exclusive_sum(values.double(), ray_indices)
    expected = torch.tensor(
        reference_exclusive_sum(values.double().tolist(), ray_indices.tolist()), dtype=torch.float64
    )
    torch.testing.assert_close(result, expected, rtol=1e-12, atol=1e-12)


def test_packed_exclusive_sum_in_rows_matches_the_running_sum():
    """The float32 per-ray buffer scan (devices without float64) agrees with the float64 running sum."""
    ray_indices, _, _, values = random_packed_samples(30, 20, seed=15)
    torch.testing.assert_close(
        _torch_impl.packed_exclusive_sum_in_rows(values, ray_indices),
        _torch_impl.packed_exclusive_sum(values, ray_indices),
    )


def test_a_nan_density_hides_the_rest_of_its_own_ray_only():
    """A NaN ``sigma dt`` (e.g. ``inf * 0``) spoils nothing outside its ray: the batch-wide running sum must
    not carry it into later rays."""
    ray_indices = torch.tensor([0, 0, 0, 1, 1])
    t_starts, t_ends = torch.tensor([0.0, 0.1, 0.2, 0.0, 0.1]), torch.tensor([0.1, 0.2, 0.3, 0.1, 0.2])
    sigmas = torch.tensor([1.0, float("nan"), 2.0, 3.0, 1.0])
    transmittance, _ = _torch_impl.render_transmittance_from_density(t_starts, t_ends, sigmas, ray_indices, 2)
    assert transmittance[2] == 0.0 and transmittance[3] == 1.0
    assert transmittance[4] == pytest.approx(math.exp(-0.3))


def test_packed_exclusive_sum_docstring_example():
    """``[1, 2, 3, 4]`` on rays ``[0, 0, 1, 1]`` gives ``[0, 1, 0, 3]``."""
    result = _torch_impl.packed_exclusive_sum(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([0, 0, 1, 1]))
    assert result.tolist() == [0.0, 1.0, 0.0, 3.0]


def test_packed_exclusive_sum_empty_input():
    """No samples at all: an empty result."""
    result = _torch_impl.packed_exclusive_sum(torch.zeros(0), torch.zeros(0, dtype=torch.long))
    assert result.shape == (0,)


def test_an_opaque_sample_gives_zero_transmittance_behind_it_not_nan():
    """An overflowed density (``sigma dt = inf``) makes everything behind it invisible; a sum computed as
    inclusive minus own value would give ``inf - inf = nan`` for that sample and poison the step."""
    ray_indices = torch.tensor([0, 0, 0, 1])
    t_starts, t_ends = torch.tensor([0.0, 0.1, 0.2, 0.0]), torch.tensor([0.1, 0.2, 0.3, 0.1])
    sigmas = torch.tensor([1.0, float("inf"), 2.0, 3.0])
    transmittance, alphas = _torch_impl.render_transmittance_from_density(t_starts, t_ends, sigmas, ray_indices, 2)
    assert torch.isfinite(transmittance).all() and torch.isfinite(alphas).all()
    assert transmittance[2] == 0.0 and alphas[1] == 1.0
    assert transmittance[1] == pytest.approx(math.exp(-0.1))


def test_packed_exclusive_sum_gradcheck():
    """The packed scan is differentiable with the analytic gradient (float64 gradcheck)."""
    ray_indices = torch.tensor([0, 0, 0, 2, 2, 3])
    values = torch.rand(6, dtype=torch.float64, generator=torch.Generator().manual_seed(14), requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: _torch_impl.packed_exclusive_sum(v, ray_indices), (values,))


def test_weights_gradcheck():
    """Rendering weights are differentiable w.r.t. densities (float64 gradcheck, one empty ray)."""
    ray_indices = torch.tensor([0, 0, 0, 2, 2])
    t_starts = torch.tensor([0.0, 0.1, 0.3, 0.0, 0.2], dtype=torch.float64)
    t_ends = torch.tensor([0.1, 0.3, 0.4, 0.2, 0.5], dtype=torch.float64)
    sigmas = torch.tensor([1.0, 3.0, 0.5, 2.0, 4.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda s: _torch_impl.render_weight_from_density(t_starts, t_ends, s, ray_indices, 3), (sigmas,)
    )


def test_accumulate_along_rays_matches_loop():
    """Weighted per-ray sums of packed values, and of the weights alone when ``values`` is None."""
    ray_indices, _, _, weights = random_packed_samples(12, 10, seed=15)
    values = torch.rand(weights.shape[0], 3, generator=torch.Generator().manual_seed(15))
    expected = torch.zeros(12, 3, dtype=torch.float64)
    expected_weights = torch.zeros(12, 1, dtype=torch.float64)
    for weight, value, ray in zip(weights.double(), values.double(), ray_indices.tolist()):
        expected[ray] += weight * value
        expected_weights[ray] += weight
    accumulated = _torch_impl.accumulate_along_rays(weights, values, ray_indices, 12)
    opacity = _torch_impl.accumulate_along_rays(weights, None, ray_indices, 12)
    torch.testing.assert_close(accumulated.double(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(opacity.double(), expected_weights, rtol=1e-5, atol=1e-5)
