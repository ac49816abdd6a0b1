"""DensityPassRecord in the occupancy sampler's culling pass: it holds only rows that can survive the alpha
threshold, and the survivors' rows still give back what the field computed for them."""

from __future__ import annotations

import pytest
import torch

from accel_test_helpers import full_grid_sampler
from nerfstudio_accel.fields.density_pass_record import DensityPassRecord
from nerfstudio_accel.sampling import culling_pass

AABB = torch.tensor([-1.0, -1.0, -1.0, 1.0, 1.0, 1.0])


class BallField:
    """What the record reads of a HashGridField: an opaque ball of radius 0.5 in a faint haze (opacity 1e-3 per
    0.02 step, under the 1e-2 threshold). Encodings ``(n, 32)`` and density heads ``(n, 16)`` are made of the
    points' coordinates, so each row names its point."""

    reuses_encodings = True

    def encode(self, points: torch.Tensor) -> torch.Tensor:
        return torch.cat([points] * 11, dim=-1)[:, :32]

    def density_head(self, points: torch.Tensor, encodings: torch.Tensor) -> torch.Tensor:
        inside = points.norm(dim=-1, keepdim=True) < 0.5
        raw_density = torch.where(inside, torch.full_like(points[:, :1], 5.0), torch.full_like(points[:, :1], -3.0))
        return torch.cat([raw_density, encodings[:, :15]], dim=-1)

    def activate_density(self, raw: torch.Tensor) -> torch.Tensor:
        return torch.exp(raw)

    def density_network(self, heads: bool = False) -> None:
        return None  # no fused form: the culling pass calls the record


def rays(n_rays: int = 300, seed: int = 11):
    generator = torch.Generator().manual_seed(seed)
    origins = 2.0 * torch.nn.functional.normalize(torch.randn(n_rays, 3, generator=generator), dim=-1)
    directions = torch.nn.functional.normalize(0.6 * torch.randn(n_rays, 3, generator=generator) - origins, dim=-1)
    return origins, directions


@pytest.mark.parametrize(
    "first_samples, chunk, warmed_up",
    [(0, None, True), (0, 1000, True), (16, None, True), (0, 1000, False)],
    ids=["one-call", "chunks", "front-to-back-rounds", "before-warm-up"],
)
def test_the_record_holds_only_rows_that_can_survive(first_samples, chunk, warmed_up, monkeypatch):
    """A full grid marches through the haze, whose candidates can never pass the alpha threshold: the record drops
    them call by call, holding fewer rows than candidates (all of them before the grid's warm-up, when nothing is
    culled by opacity), and the kept samples' rows still name their own encodings and density heads."""
    if chunk is not None:
        monkeypatch.setitem(culling_pass.DENSITY_CHUNK, "cpu", chunk)
    sampler = full_grid_sampler(AABB, warmed_up, render_step_size=0.02, culling_first_samples=first_samples)
    field = BallField()
    record = DensityPassRecord(field, keep_heads=True)
    origins, directions = rays()
    samples = sampler.sample(origins, directions, density_fn=record)
    candidates = int(sampler.figures()["candidates"])
    assert 0 < samples.n_samples < candidates
    if warmed_up:
        assert samples.n_samples <= record.held_rows < candidates // 2, (record.held_rows, candidates)
    else:
        assert record.held_rows == int(sampler.figures()["evaluated"])
    expected_encodings = field.encode(samples.positions)
    torch.testing.assert_close(record.kept_encodings(), expected_encodings, rtol=0, atol=1e-6)
    expected_heads = field.density_head(samples.positions, expected_encodings)
    torch.testing.assert_close(record.kept_heads(), expected_heads, rtol=0, atol=1e-6)
