"""Both samplers behind one interface: packed samples of the rays given, density rows, losses, figures."""

from __future__ import annotations

import torch
from torch import nn

from accel_test_helpers import full_grid_sampler
from nerfstudio_accel.ops.ray_aabb import ray_aabb_intersect
from nerfstudio_accel.sampling.base import DensityRecord, Sampler
from nerfstudio_accel.sampling.occupancy import OccupancySampler
from nerfstudio_accel.sampling.packed import PackedSamples
from nerfstudio_accel.sampling.proposal import ProposalSampler

AABB = torch.tensor([-1.0, -1.0, -1.0, 1.0, 1.0, 1.0])


def rays(n_rays: int = 32, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    origins = 2.5 * torch.nn.functional.normalize(torch.randn(n_rays, 3, generator=generator), dim=-1)
    return origins, torch.nn.functional.normalize(0.3 * torch.randn(n_rays, 3, generator=generator) - origins, dim=-1)


def blob(points: torch.Tensor) -> torch.Tensor:
    return 200.0 * torch.exp(-(points**2).sum(dim=-1, keepdim=True) / 0.1)


class ShellDensity(nn.Module):
    def forward(self, points: torch.Tensor) -> torch.Tensor:
        return 50.0 * torch.exp(-((points.norm(dim=-1, keepdim=True) - 0.5) ** 2) / 0.01)


def occupancy_sampler() -> OccupancySampler:
    return full_grid_sampler(AABB, occupancy=0.5, render_step_size=0.01, near_plane=0.0)


def test_both_samplers_return_packed_samples_of_the_rays_given():
    origins, directions = rays()
    proposal = ProposalSampler(
        [ShellDensity(), ShellDensity()], proposal_samples=(32, 16), num_samples=8, spacing="linear", aabb=AABB
    )
    for sampler in (occupancy_sampler(), proposal):
        assert isinstance(sampler, Sampler)
        samples = sampler.sample(origins, directions, None, None, blob, stratified=False)
        assert isinstance(samples, PackedSamples) and samples.origins is origins and samples.directions is directions
        assert samples.n_samples > 0 and bool((samples.t_ends > samples.t_starts).all())
        assert bool((samples.ray_indices[1:] >= samples.ray_indices[:-1]).all()), "sorted by ray"


class RecordedBlob(DensityRecord):
    """:func:`blob` as a density record: the points of every call, the rows a sampler kept."""

    def __init__(self) -> None:
        self.seen, self.kept, self.least = [], None, None

    def __call__(self, points: torch.Tensor) -> torch.Tensor:
        self.seen.append(points)
        return blob(points)

    def drop_below(self, density: torch.Tensor) -> None:
        self.least = density

    def keep(self, rows: torch.Tensor) -> None:
        self.kept = rows


def test_occupancy_sampler_tells_a_density_record_which_points_it_kept():
    """The kept rows find each returned sample among the points handed to the record, in call order; the record
    hears the least density a kept sample can have before its first call."""
    origins, directions = rays()
    record = RecordedBlob()
    samples = occupancy_sampler().sample(origins, directions, None, None, record, stratified=False)
    marched = occupancy_sampler().march(origins, directions)[0].numel()
    assert 0 < samples.n_samples < marched == torch.cat(record.seen).shape[0], "culling kept some of the candidates"
    torch.testing.assert_close(torch.cat(record.seen)[record.kept], samples.positions)
    assert float(record.least) > 0.0


def test_occupancy_figures_count_the_last_training_sampling():
    origins, directions = rays()
    sampler = occupancy_sampler()
    assert set(sampler.figures()) == {"occupied_fraction"}
    samples = sampler.sample(origins, directions, None, None, blob, stratified=False)
    figures = sampler.figures()
    assert figures["kept"] == samples.n_samples and figures["candidates"] >= figures["kept"] + figures["alpha_culled"]
    assert figures["occupied_fraction"] == 1.0


def test_proposal_losses_need_the_rounds_and_clip_to_the_box():
    origins, directions = rays()
    sampler = ProposalSampler(
        [ShellDensity(), ShellDensity()],
        proposal_samples=(32, 16),
        num_samples=8,
        spacing="linear",
        aabb=AABB,
        distortion_loss_mult=0.5,
    )
    samples = sampler.sample(origins, directions, None, None, blob, stratified=True)
    weights = torch.rand(samples.n_samples)
    assert sampler.losses(samples.subset(torch.arange(4)), weights[:4]) == {}, "a subset is not what it sampled"
    samples = sampler.sample(origins, directions, None, None, blob, stratified=True)
    on_other_rays = samples.on_rays(origins + 0.1, directions, None)  # as a model hands back the uncorrected rays
    assert set(sampler.losses(on_other_rays, weights)) == {"interlevel_loss", "distortion_loss"}
    assert sampler.losses(samples, weights) == {}, "the sampler lets the rounds go once its losses read them"
    sampler.eval()
    sampler.sample(origins, directions, None, None, blob, stratified=False)
    assert sampler.losses(samples, weights) == {}, "a sampling outside training keeps no rounds"
    enter, exit_, _ = ray_aabb_intersect(origins, directions, AABB)
    rays_of = samples.ray_indices
    assert bool((samples.t_starts >= enter[rays_of] - 1e-5).all()) and bool(
        (samples.t_ends <= exit_[rays_of] + 1e-5).all()
    )
    assert sampler.backend_for(origins.device) == "torch" == occupancy_sampler().backend_for(origins.device)
