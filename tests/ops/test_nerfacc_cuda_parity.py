"""The ops' nerfacc backend against their pure-PyTorch twins on identical grids, rays and samples, through the
ops and through the occupancy sampler and renderer that hand them the backend.

Needs a CUDA GPU on which nerfacc's compiled ops load; skipped otherwise (nerfacc 0.5.2 does not compile
against CUDA 13, whose CUB lost ``cub::Equality``; with that one call patched to ``cuda::std::equal_to<>``
these passed on a GPU, docs/gpu.md). nerfacc accumulates the step lattice
sequentially in float32 while the twin uses its closed form, so a few rays differ by a sample at a
cell face and ``t`` agrees to ~1e-3 rather than bit-exactly.
"""

from __future__ import annotations

import pytest
import torch

from accel_test_helpers import sample, update
from nerfstudio_accel import rendering
from nerfstudio_accel.ops.backends import nerfacc_ops_unavailable_reason
from nerfstudio_accel.ops.volume_rendering import render_weight_from_density
from nerfstudio_accel.sampling.occupancy import MarchingOptions, OccupancySampler
from nerfstudio_accel.sampling.packed import PackedSamples

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

AABB = (-1.0, -1.0, -1.0, 1.0, 1.0, 1.0)
N_RAYS = 4096
MIN_MATCHING_RAY_FRACTION = 0.99


@pytest.fixture(scope="module", autouse=True)
def nerfacc_ops_available():
    """Skip the module when nerfacc's CUDA extension does not load (the reason says why)."""
    reason = nerfacc_ops_unavailable_reason()
    if reason:
        pytest.skip(f"nerfacc CUDA ops unavailable: {reason}")


def sampler_pair(levels: int) -> tuple[OccupancySampler, OccupancySampler]:
    """A nerfacc-backend and a torch-backend sampler on the GPU, same geometry, empty grids."""
    aabb = torch.tensor(AABB)
    return tuple(
        OccupancySampler(aabb, resolution=32, levels=levels, backend=backend).cuda() for backend in ("nerfacc", "torch")
    )


def random_cuda_rays(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit rays from radius 2.5 aimed at jittered points near the centre, and rays from inside."""
    generator = torch.Generator().manual_seed(seed)
    n_outside = N_RAYS // 2
    origins_out = 2.5 * torch.nn.functional.normalize(torch.randn(n_outside, 3, generator=generator), dim=-1)
    directions_out = torch.nn.functional.normalize(
        0.6 * torch.randn(n_outside, 3, generator=generator) - origins_out, dim=-1
    )
    origins_in = 2.0 * torch.rand(N_RAYS - n_outside, 3, generator=generator) - 1.0
    directions_in = torch.nn.functional.normalize(torch.randn(N_RAYS - n_outside, 3, generator=generator), dim=-1)
    return torch.cat([origins_out, origins_in]).cuda(), torch.cat([directions_out, directions_in]).cuda()


def blob_density(points: torch.Tensor) -> torch.Tensor:
    """Densities ``(n, 1)``: a Gaussian blob of peak 100 around an off-centre point."""
    centre = torch.tensor([0.1, -0.2, 0.15], device=points.device)
    return 100.0 * torch.exp(-((points - centre) ** 2).sum(dim=-1, keepdim=True) / 0.08)


def position_color(points: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(3.0 * points)


def counts_per_ray(ray_indices: torch.Tensor) -> torch.Tensor:
    return torch.bincount(ray_indices, minlength=N_RAYS)


def samples_of_rays(ray_indices: torch.Tensor, values: torch.Tensor, rays: torch.Tensor) -> torch.Tensor:
    """The packed ``values`` belonging to the rays flagged in ``rays`` (order kept)."""
    return values[rays[ray_indices]]


def unmatched_midpoints(ours, theirs, ray: int, tolerance: float = 1e-3) -> torch.Tensor:
    """Midpoints ``t`` of ``ray`` that one backend samples and the other has no sample within ``tolerance`` of."""
    mids = [0.5 * (starts + ends)[indices == ray] for indices, starts, ends in (ours, theirs)]
    lonely = []
    for mine, other in (mids, mids[::-1]):
        if other.numel() == 0:
            lonely.append(mine)
        else:
            lonely.append(mine[(mine[:, None] - other[None, :]).abs().min(dim=1).values > tolerance])
    return torch.cat(lonely)


def distance_to_cell_face(points: torch.Tensor, aabbs: torch.Tensor, resolution: int) -> torch.Tensor:
    """Distance, in cells of the finest level containing each point, to the nearest cell face."""
    lower, upper = aabbs[:, :3], aabbs[:, 3:]
    inside = ((points[:, None] >= lower) & (points[:, None] <= upper)).all(dim=-1)
    level = torch.argmax(inside.to(torch.uint8), dim=-1)
    cells = (points - lower[level]) / (upper[level] - lower[level]) * resolution
    return (cells - cells.round()).abs().amin(dim=-1)


@pytest.mark.parametrize("stratified", [False, True], ids=["lattice", "stratified"])
@pytest.mark.parametrize("levels", [1, 2])
def test_marching_matches_torch_backend(levels, stratified):
    """Same random grid and rays (and, stratified, the same per-ray jitter from the same seed): the samples
    agree to 1e-3, except where a midpoint sits within float32 rounding of a cell face. nerfacc accumulates
    the lattice step by step in float32 (it drifts ~3e-5 over a few hundred steps, measured on an H100);
    the torch backend computes it in closed form, so the two may disagree on which side of a face such a
    sample falls (measured: 2-5% of rays on a 30%-occupied random grid, one sample each)."""
    nerfacc_sampler, torch_sampler = sampler_pair(levels)
    generator = torch.Generator().manual_seed(levels)
    binaries = (torch.rand(levels, 32, 32, 32, generator=generator) < 0.3).cuda()
    for sampler in (nerfacc_sampler, torch_sampler):
        sampler.grid.binaries = binaries.clone()
    origins, directions = random_cuda_rays(seed=levels)
    options = MarchingOptions(render_step_size=0.005, near_plane=0.05)

    torch.manual_seed(levels)
    theirs = sample(nerfacc_sampler, origins, directions, options, stratified=stratified)
    torch.manual_seed(levels)
    ours = sample(torch_sampler, origins, directions, options, stratified=stratified)
    assert nerfacc_sampler.backend_for(origins.device) == "nerfacc"
    assert torch_sampler.backend_for(origins.device) == "torch"
    assert theirs[0].numel() > 10 * N_RAYS

    # rays whose samples differ: other counts, or the same count with some midpoint more than 1e-3 apart
    matching = counts_per_ray(theirs[0]) == counts_per_ray(ours[0])
    our_mids, their_mids = (0.5 * (samples[1] + samples[2]) for samples in (ours, theirs))
    apart = (
        samples_of_rays(ours[0], our_mids, matching) - samples_of_rays(theirs[0], their_mids, matching)
    ).abs() > 1e-3
    differing = ~matching
    differing[samples_of_rays(ours[0], ours[0], matching)[apart]] = True
    assert differing.float().mean().item() <= 0.1
    for ray in torch.nonzero(differing).reshape(-1).tolist():
        lonely = unmatched_midpoints(ours, theirs, ray)
        points = origins[ray] + directions[ray] * lonely[:, None]
        assert distance_to_cell_face(points, torch_sampler.grid.aabbs, 32).max().item() < 1e-2, f"ray {ray}"


@pytest.mark.xfail(
    strict=True,
    reason="known difference: nerfacc skips empty cells with the step size it had on "
    "entering them, so with cone_angle > 0 its lattice depends on the grid; the torch backend keeps one "
    "geometric lattice per ray (docs/gpu.md)",
)
def test_cone_marching_matches_torch_backend():
    """With a cone angle, sample positions agree once the rays have crossed empty space (they do not yet)."""
    nerfacc_sampler, torch_sampler = sampler_pair(levels=2)
    binaries = (torch.rand(2, 32, 32, 32, generator=torch.Generator().manual_seed(2)) < 0.3).cuda()
    for sampler in (nerfacc_sampler, torch_sampler):
        sampler.grid.binaries = binaries.clone()
    origins, directions = random_cuda_rays(seed=2)
    options = MarchingOptions(render_step_size=0.005, cone_angle=0.004, near_plane=0.05)
    theirs = sample(nerfacc_sampler, origins, directions, options)
    ours = sample(torch_sampler, origins, directions, options)
    assert (counts_per_ray(theirs[0]) == counts_per_ray(ours[0])).float().mean().item() >= 0.9


def test_culled_rendering_matches_torch_backend():
    """A grid fitted to a density, culled sampling and rendering of fixed density/colour functions: marching
    agrees on >= 99% of rays, and rgb and accumulation agree to 1e-3 on >= 99% of rays (a sample that
    changes sides of a cell face, see above, moves a ray's colour a little)."""
    nerfacc_sampler, torch_sampler = sampler_pair(levels=1)
    torch.manual_seed(0)
    for step in range(0, 64, 16):
        update(nerfacc_sampler, step, blob_density, render_step_size=0.005, warmup_steps=32)
    torch_sampler.load_state_dict(nerfacc_sampler.state_dict())
    origins, directions = random_cuda_rays(seed=10)
    options = MarchingOptions(render_step_size=0.005, near_plane=0.05, alpha_threshold=1e-2, early_stop_eps=1e-4)
    background = torch.rand(N_RAYS, 3, generator=torch.Generator().manual_seed(10)).cuda()

    def render(sampler: OccupancySampler):
        ray_indices, t_starts, t_ends = sample(sampler, origins, directions, options, density_fn=blob_density)
        samples = PackedSamples(ray_indices, t_starts, t_ends, origins, directions)
        positions = samples.positions
        return rendering.render_packed(
            samples, blob_density(positions), position_color(positions), background, sampler.backend_for(origins.device)
        )

    marched_alike = counts_per_ray(sample(nerfacc_sampler, origins, directions, options)[0]) == counts_per_ray(
        sample(torch_sampler, origins, directions, options)[0]
    )
    assert marched_alike.float().mean().item() >= MIN_MATCHING_RAY_FRACTION
    theirs, ours = render(nerfacc_sampler), render(torch_sampler)
    assert theirs["accumulation"].max().item() > 0.5
    for key in ("rgb", "accumulation"):
        difference = (ours[key] - theirs[key]).abs().amax(dim=-1)
        assert (difference <= 1e-3).float().mean().item() >= MIN_MATCHING_RAY_FRACTION, key
        assert difference.mean().item() < 1e-3, key


def test_packed_weights_match_nerfacc_cuda():
    """On identical packed samples, the weights op on the nerfacc backend (its CUDA scan) and
    ``render_packed(backend="nerfacc")`` equal the torch backend's to 1e-5."""
    _, torch_sampler = sampler_pair(levels=1)
    torch_sampler.grid.binaries = torch.ones_like(torch_sampler.grid.binaries)
    origins, directions = random_cuda_rays(seed=20)
    ray_indices, t_starts, t_ends = sample(torch_sampler, origins, directions, MarchingOptions(render_step_size=0.01))
    generator = torch.Generator().manual_seed(20)
    sigmas = torch.exp(2.0 * torch.randn(t_starts.shape[0], generator=generator)).cuda()
    colors = torch.rand(t_starts.shape[0], 3, generator=generator).cuda()

    theirs = render_weight_from_density(t_starts, t_ends, sigmas, ray_indices, N_RAYS, backend="nerfacc")
    ours = render_weight_from_density(t_starts, t_ends, sigmas, ray_indices, N_RAYS, backend="torch")
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)

    samples = PackedSamples(ray_indices, t_starts, t_ends, origins, directions)
    background = torch.zeros(N_RAYS, 3, device="cuda")
    with_nerfacc = rendering.render_packed(samples, sigmas[:, None], colors, background, backend="nerfacc")
    with_torch = rendering.render_packed(samples, sigmas[:, None], colors, background, backend="torch")
    for key in ("rgb", "accumulation", "weights"):
        torch.testing.assert_close(with_torch[key], with_nerfacc[key], rtol=0, atol=1e-5, msg=key)
