"""The culling density pass over marched candidates: one opacity threshold or one per candidate (a split scene's
cells each cap theirs), early stopping over the whole ray either way, and chunked density evaluation."""

from __future__ import annotations

import torch

from nerfstudio_accel.ops._torch_impl import render_transmittance_from_density
from nerfstudio_accel.sampling.culling_pass import ThresholdPerCandidate, cull_marched, evaluate_in_chunks


def blob(points: torch.Tensor) -> torch.Tensor:
    """Densities ``(n, 1)``: opaque at the origin, faint at the rim."""
    return 200.0 * torch.exp(-(points**2).sum(dim=-1, keepdim=True) / 0.1)


def candidates(n_rays: int = 40, steps: int = 200):
    """Every ray marches the same ``steps`` intervals from z = -1.5 towards +z, at jittered x, y."""
    generator = torch.Generator().manual_seed(3)
    origins = torch.cat([(torch.rand(n_rays, 2, generator=generator) - 0.5) * 1.6, torch.full((n_rays, 1), -1.5)], 1)
    directions = torch.tensor([[0.0, 0.0, 1.0]]).expand(n_rays, 3).contiguous()
    edges = torch.linspace(0.0, 3.0, steps + 1)
    ray_indices = torch.arange(n_rays).repeat_interleave(steps)
    return ray_indices, edges[:-1].repeat(n_rays), edges[1:].repeat(n_rays), origins, directions


def culled(alpha_threshold, early_stop_eps: float = 1e-4):
    ray_indices, t_starts, t_ends, origins, directions = candidates()
    keep, counts = cull_marched(
        ray_indices, t_starts, t_ends, origins, directions, blob, alpha_threshold, early_stop_eps, 0, "torch"
    )
    return keep, counts


def test_one_threshold_per_candidate_is_the_scalar_threshold_where_they_agree():
    keep, counts = culled(0.01)
    per_candidate, per_counts = culled(ThresholdPerCandidate(torch.full((8000,), 0.01), 0.01))
    assert torch.equal(keep, per_candidate)
    assert int(counts["alpha_culled"]) == int(per_counts["alpha_culled"]) > 0


def test_each_candidate_is_culled_by_its_own_threshold_and_stopping_by_the_whole_ray():
    ray_indices, t_starts, t_ends, origins, directions = candidates()
    thresholds = torch.where(t_starts < 1.1, 0.0, 0.05)  # the front culls nothing by opacity
    keep, _ = culled(ThresholdPerCandidate(thresholds, 0.0))
    positions = origins[ray_indices] + directions[ray_indices] * (0.5 * (t_starts + t_ends))[:, None]
    densities = blob(positions).reshape(-1)
    transmittance, alphas = render_transmittance_from_density(t_starts, t_ends, densities, ray_indices, 40)
    expected = torch.nonzero((transmittance >= 1e-4) & (alphas >= thresholds)).reshape(-1)
    assert torch.equal(keep, expected)
    assert bool((t_starts[keep] < 1.1).any()) and bool((t_starts[keep] >= 1.1).any())
    assert bool(((transmittance >= 1e-4) & (alphas < thresholds)).any()), "some are culled by their own threshold"
    assert bool((transmittance < 1e-4).any()), "some rays stop early"


def test_evaluate_in_chunks_equals_single_call():
    """Chunked evaluation returns the single-call result and never passes more than ``chunk`` points."""
    points = torch.rand(50, 3, generator=torch.Generator().manual_seed(5))
    batch_sizes = []

    def recording_density(x):
        batch_sizes.append(x.shape[0])
        return blob(x)

    chunked = evaluate_in_chunks(recording_density, points, chunk=7)
    assert torch.equal(chunked, blob(points))
    assert max(batch_sizes) <= 7 and sum(batch_sizes) == 50
