"""Proposal sampling ops and sampler against dense numerical references."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nerfstudio_accel.errors import ConfigError
from nerfstudio_accel.sampling import proposal_ops
from nerfstudio_accel.sampling.base import SamplerScene
from nerfstudio_accel.sampling.proposal import ProposalSampler, ProposalSamplerConfig, annealing_exponent


def random_edges(n_rays: int, k: int, generator: torch.Generator) -> torch.Tensor:
    """Sorted edges from 0 to 1 with uneven gaps ``(n_rays, k + 1)``."""
    gaps = torch.rand(n_rays, k, generator=generator) + 0.05
    cumulative = torch.cumsum(gaps, dim=-1)
    return torch.cat([torch.zeros(n_rays, 1), cumulative / cumulative[:, -1:]], dim=-1)


def dense_inverse_cdf(edges: np.ndarray, mass: np.ndarray, u: np.ndarray, resolution: int = 200_001) -> np.ndarray:
    """The inverse CDF of a piecewise-constant density, by tabulating its CDF on a dense grid."""
    x = np.linspace(edges[0], edges[-1], resolution)
    bin_of_x = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(mass) - 1)
    density = mass[bin_of_x] / (edges[bin_of_x + 1] - edges[bin_of_x])
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (density[1:] + density[:-1]) * np.diff(x))])
    return np.interp(u, cdf / cdf[-1], x)


def test_resampling_inverts_the_piecewise_constant_cdf():
    """Deterministic edges sit at the dense inverse CDF of (weights + padding) at (j + 1/2) / (m + 1)."""
    generator = torch.Generator().manual_seed(0)
    edges = random_edges(4, 12, generator)
    weights = torch.rand(4, 12, generator=generator) ** 3
    weights[1, 5:] = 0.0  # empty space keeps only the padding
    new_edges = proposal_ops.resample_edges(edges, weights, 20, stratified=False, padding=0.01)
    assert new_edges.shape == (4, 21)
    u = (np.arange(21) + 0.5) / 21
    for ray in range(4):
        expected = dense_inverse_cdf(edges[ray].numpy().astype(np.float64), weights[ray].numpy() + 0.01, u)
        np.testing.assert_allclose(new_edges[ray].numpy(), expected, atol=2e-4)


def test_stratified_resampling_follows_the_pdf_and_stays_in_bounds():
    """Many jittered draws: sorted edges inside the interval bounds, landing in each bin in proportion
    to its mass (weights + padding)."""
    generator = torch.Generator().manual_seed(1)
    edges = random_edges(1, 6, generator).expand(4000, -1).contiguous()
    weights = torch.tensor([[0.0, 0.5, 0.1, 0.0, 0.3, 0.05]]).expand(4000, -1)
    torch.manual_seed(0)
    new_edges = proposal_ops.resample_edges(edges, weights, 8, stratified=True, padding=0.01)
    assert bool((new_edges[:, 1:] >= new_edges[:, :-1]).all())
    assert bool((new_edges >= 0).all()) and bool((new_edges <= 1).all())
    bins = torch.searchsorted(edges[0].contiguous(), new_edges.reshape(-1).contiguous(), right=True) - 1
    share = torch.bincount(bins.clamp(0, 5), minlength=6).float() / bins.numel()
    mass = weights[0] + 0.01
    assert torch.allclose(share, mass / mass.sum(), atol=0.01)


def test_uniform_edges_cover_the_ray_and_jitter_within_a_step():
    plain = proposal_ops.uniform_edges(3, 8, stratified=False, device=torch.device("cpu"))
    assert torch.allclose(plain, torch.linspace(0, 1, 9).expand(3, -1))
    torch.manual_seed(0)
    jittered = proposal_ops.uniform_edges(500, 8, stratified=True, device=torch.device("cpu"))
    assert torch.equal(jittered[:, 0], torch.zeros(500)) and torch.equal(jittered[:, -1], torch.ones(500))
    assert bool((jittered[:, 1:] > jittered[:, :-1]).all())
    assert float((jittered - plain[:1]).abs().max()) <= 0.5 / 8 + 1e-6
    assert float(jittered[:, 1:-1].std(dim=0).min()) > 0.01  # really jittered


def test_lindisp_spacing_is_linear_near_and_uniform_in_disparity_far():
    near, far = torch.tensor([[0.2]]), torch.tensor([[1000.0]])
    u = torch.linspace(0, 1, 2001)[None]
    t = proposal_ops.spacing_to_distance(u, near, far, "lindisp")
    assert float(t[0, 0]) == pytest.approx(0.2) and float(t[0, -1]) == pytest.approx(1000.0, rel=1e-4)
    assert bool((t[:, 1:] > t[:, :-1]).all())
    inside, outside = t[0] < 1.0, t[0] > 1.0
    assert torch.allclose(
        torch.diff(t[0][inside]), torch.diff(t[0][inside]).mean().expand(int(inside.sum()) - 1), rtol=1e-3
    )
    disparity = 1.0 / t[0][outside]
    assert torch.allclose(
        torch.diff(disparity), torch.diff(disparity).mean().expand(int(outside.sum()) - 1), rtol=1e-2, atol=1e-7
    )
    linear = proposal_ops.spacing_to_distance(u, near, far, "linear")
    assert torch.allclose(linear, 0.2 + u * 999.8)


def test_weights_from_density_match_a_direct_product():
    generator = torch.Generator().manual_seed(2)
    distances = torch.cumsum(torch.rand(3, 11, generator=generator), dim=-1)
    densities = torch.rand(3, 10, generator=generator) * 3
    weights = proposal_ops.weights_from_density(distances, densities)
    for ray in range(3):
        transmittance = 1.0
        for j in range(10):
            alpha = 1.0 - np.exp(-float(densities[ray, j]) * float(distances[ray, j + 1] - distances[ray, j]))
            assert float(weights[ray, j]) == pytest.approx(transmittance * alpha, rel=1e-5, abs=1e-7)
            transmittance *= 1.0 - alpha


def direct_outer(query: np.ndarray, edges: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Sum of source weights over source intervals that overlap each query interval (double loop)."""
    out = np.zeros(len(query) - 1)
    for i in range(len(query) - 1):
        for j in range(len(edges) - 1):
            if edges[j] < query[i + 1] and edges[j + 1] > query[i]:
                out[i] += weights[j]
    return out


def test_weights_stay_finite_behind_an_opaque_interval_and_densities_stay_finite():
    """An infinite optical depth stops the ray (weights 0 behind it, no nan), and the field's density
    activation never overflows, so a zero-length interval costs ``0`` rather than ``inf * 0``."""
    from nerfstudio_accel.fields.hash_grid_field import HashGridField

    distances = torch.tensor([[0.0, 0.1, 0.2, 0.3]])
    weights = proposal_ops.weights_from_density(distances, torch.tensor([[1.0, float("inf"), 2.0]]))
    assert (
        torch.isfinite(weights).all() and weights[0, 2] == 0.0 and weights[0, 1] == pytest.approx(float(np.exp(-0.1)))
    )
    density = HashGridField.activate_density(torch.tensor([[200.0], [0.0]]))
    assert torch.isfinite(density).all() and float(density[0] * 0.0) == 0.0 and float(density[0]) > 1e20


def test_outer_weights_and_interlevel_loss_match_a_direct_computation():
    generator = torch.Generator().manual_seed(3)
    proposal_edges = random_edges(5, 16, generator)
    proposal_weights = torch.rand(5, 16, generator=generator) / 8
    edges = random_edges(5, 7, generator)
    weights = torch.rand(5, 7, generator=generator) / 4
    bound = proposal_ops.outer_weights(edges, proposal_edges, proposal_weights)
    expected_loss = 0.0
    for ray in range(5):
        expected = direct_outer(edges[ray].numpy(), proposal_edges[ray].numpy(), proposal_weights[ray].numpy())
        np.testing.assert_allclose(bound[ray].numpy(), expected, rtol=1e-5, atol=1e-7)
        w = weights[ray].numpy()
        expected_loss += np.sum(np.maximum(w - expected, 0) ** 2 / (w + 1e-7))
    loss = proposal_ops.interlevel_loss(edges, weights, proposal_edges, proposal_weights)
    assert float(loss) == pytest.approx(expected_loss / weights.numel(), rel=1e-5)
    # a proposal whose weights bound everything costs nothing
    assert float(proposal_ops.interlevel_loss(edges, weights, proposal_edges, torch.ones(5, 16))) == 0.0


def test_distortion_loss_matches_the_continuous_double_integral():
    """Eq. 15 of mip-NeRF 360 is the closed form of ``int int w(u) w(v) |u - v| du dv`` for a
    piecewise-constant weight density; check against that integral on a fine grid, and that the loss
    prefers the same total weight gathered into one interval."""
    generator = torch.Generator().manual_seed(5)
    edges = random_edges(3, 6, generator)
    weights = torch.rand(3, 6, generator=generator) / 6
    loss = proposal_ops.distortion_loss(edges, weights)
    expected = 0.0
    for ray in range(3):
        e, w = edges[ray].double().numpy(), weights[ray].double().numpy()
        u = np.linspace(0.0, 1.0, 2001)[:-1] + 0.5 / 2000
        index = np.clip(np.searchsorted(e, u, side="right") - 1, 0, len(w) - 1)
        inside = (u >= e[0]) & (u < e[-1])
        density = np.where(inside, w[index] / (e[index + 1] - e[index]), 0.0)
        expected += np.sum(density[:, None] * density[None, :] * np.abs(u[:, None] - u[None, :])) / 2000**2
    assert float(loss) == pytest.approx(expected / 3, rel=5e-3)
    spread = proposal_ops.distortion_loss(torch.tensor([[0.0, 0.2, 0.4, 0.6]]), torch.tensor([[0.3, 0.3, 0.3]]))
    gathered = proposal_ops.distortion_loss(torch.tensor([[0.0, 0.2, 0.4, 0.6]]), torch.tensor([[0.0, 0.9, 0.0]]))
    assert float(gathered) < float(spread)


class ShellDensity(torch.nn.Module):
    """Density ``inside`` within a spherical shell of radius 2..2.2 around the origin, 0.01 elsewhere, times
    a learnable scale (so gradients can be checked)."""

    def __init__(self, inside: float = 50.0) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))
        self.inside = inside

    def forward(self, points: torch.Tensor) -> torch.Tensor:
        radius = points.norm(dim=-1, keepdim=True)
        return self.scale * torch.where((radius > 2.0) & (radius < 2.2), self.inside, 0.01)


def test_sampler_concentrates_the_main_samples_where_the_proposals_see_density():
    """Rays from the origin through a shell at distance 2: fixed counts per ray, edges within [near, far],
    and most main samples inside the shell once annealing is over."""
    sampler = ProposalSampler(
        [ShellDensity(), ShellDensity()], proposal_samples=(128, 64), num_samples=32, spacing="lindisp"
    )
    sampler.update(10_000)
    torch.manual_seed(0)
    directions = torch.nn.functional.normalize(torch.randn(50, 3), dim=-1)
    origins = torch.zeros(50, 3)
    near, far = torch.full((50,), 0.1), torch.full((50,), 100.0)
    sampler.eval()
    distances, rounds = sampler.propose(origins, directions, near, far, stratified=False)
    assert distances.shape == (50, 33)
    assert [e.shape for e in rounds.edges] == [(50, 129), (50, 65)] and rounds.final_edges.shape == (50, 33)
    assert bool((distances >= 0.1 - 1e-5).all()) and bool((distances <= 100.0 + 1e-3).all())
    middles = 0.5 * (distances[:, 1:] + distances[:, :-1])
    in_shell = ((middles > 2.0) & (middles < 2.2)).float().mean()
    assert float(in_shell) > 0.5  # the shell is 0.2 of a 100-unit ray


def test_interlevel_loss_trains_the_proposal_fields_only():
    """The loss's gradient reaches the proposal fields' parameters, never the main weights."""
    torch.manual_seed(0)
    fields = [ShellDensity(inside=2.0), ShellDensity(inside=2.0)]  # unsaturated weights: non-zero gradients
    sampler = ProposalSampler(fields, proposal_samples=(32, 16), num_samples=8, spacing="linear")
    sampler.train()
    origins, directions = torch.zeros(10, 3), torch.nn.functional.normalize(torch.randn(10, 3), dim=-1)
    distances, rounds = sampler.propose(
        origins, directions, torch.full((10,), 0.1), torch.full((10,), 4.0), stratified=True
    )
    main_weights = torch.full((10, 8), 0.5, requires_grad=True)  # more than the proposals bound
    loss = ProposalSampler.interlevel_loss(rounds, main_weights)
    loss.backward()
    assert float(loss) > 0
    assert main_weights.grad is None
    assert all(field.scale.grad is not None and float(field.scale.grad) != 0.0 for field in fields)


def test_annealing_rises_from_zero_to_one():
    values = [annealing_exponent(step, 1000) for step in (0, 100, 500, 1000, 5000)]
    assert values[0] == 0.0 and values[-2] == pytest.approx(1.0) and values[-1] == pytest.approx(1.0)
    assert values == sorted(values) and values[1] > 0.5  # steep at first


def test_losses_carry_the_weights_the_sampler_was_built_with():
    """The sampler weights its own losses; a distortion weight of 0 computes none."""
    fields = [ShellDensity(inside=2.0), ShellDensity(inside=2.0)]
    origins, directions = torch.zeros(10, 3), torch.nn.functional.normalize(torch.randn(10, 3), dim=-1)
    weights = torch.full((10 * 8,), 0.1)
    losses = []
    for interlevel, distortion in ((1.0, 0.0), (3.0, 0.5), (6.0, 1.0)):
        sampler = ProposalSampler(
            fields,
            proposal_samples=(32, 16),
            num_samples=8,
            spacing="linear",
            far_plane=4.0,
            interlevel_loss_mult=interlevel,
            distortion_loss_mult=distortion,
        )
        sampler.train()
        losses.append(sampler.losses(sampler.sample(origins, directions, stratified=False), weights))
    assert set(losses[0]) == {"interlevel_loss"} and set(losses[1]) == {"interlevel_loss", "distortion_loss"}
    assert float(losses[0]["interlevel_loss"]) > 0
    assert float(losses[1]["interlevel_loss"]) == pytest.approx(3.0 * float(losses[0]["interlevel_loss"]))
    assert float(losses[2]["interlevel_loss"]) == pytest.approx(2.0 * float(losses[1]["interlevel_loss"]))
    assert float(losses[2]["distortion_loss"]) == pytest.approx(2.0 * float(losses[1]["distortion_loss"]))


AABB_CORNERS = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]])


def sampler_scene(contract: bool) -> SamplerScene:
    return SamplerScene(AABB_CORNERS, contract, 0.05, 100.0, torch.device("cpu"), "torch", "torch")


@pytest.mark.parametrize("contract", [False, True])
def test_proposal_defaults_and_the_sampler_they_build(contract):
    config = ProposalSamplerConfig(max_res=(32, 64, 64), distortion_loss_mult=0.01)
    config.resolve("cpu", contract)
    assert (config.num_samples, config.samples_per_round) == (32, (128, 64, 64))
    sampler = config.setup(sampler_scene(contract))
    assert isinstance(sampler, ProposalSampler)
    assert len(sampler.fields) == 3 and sampler.proposal_samples == (128, 64, 64) and sampler.num_samples == 32
    assert (sampler.aabb is None) == contract and sampler.spacing == ("lindisp" if contract else "linear")
    assert (sampler.interlevel_loss_mult, sampler.distortion_loss_mult) == (1.0, 0.01)


def test_proposal_rounds_without_a_resolution_each_are_refused_with_the_flags_to_fix():
    config = ProposalSamplerConfig(samples_per_round=(64, 32, 16))
    with pytest.raises(ConfigError, match="--pipeline.model.proposal.samples-per-round names 3 rounds but "):
        config.resolve("cpu", contract=True)
