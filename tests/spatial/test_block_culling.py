"""The culling pass on ranks that hold one block each: 2 and 3 gloo processes, each marching and culling only its
own cell from its own densities and two per-ray summaries of the others, keep together exactly the samples the
one-process BlockSampler keeps over the merged candidates (cells with different thresholds, early stopping, a
per-ray cap)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from test_block_sampler import ball, rays, samplers

from nerfstudio_accel.sampling.base import ray_bounds
from nerfstudio_accel.spatial.block_culling import blocks_in_front, cull_own_block

OCCUPANCY = (0.002, 1.0, 0.005)
"""Each cell's mean grid occupancy, which caps its opacity threshold (0.002, 0.01, 0.005)."""
CULLING = {
    "opacity and early stopping": {},
    "every ray in the first cell": {},
    "early stopping over a short ray": {"early_stop_eps": 0.3},
    "capped": {"max_samples_per_ray": 250},
}


def batch(culling: str):
    """The rays of a variant: from every side through the box, or (block 1 gets no candidate) only through x < 0."""
    if culling != "every ray in the first cell":
        return rays(seed=3)
    n = 32
    origins = torch.stack([torch.linspace(-0.9, -0.1, n), torch.full((n,), -3.0), torch.linspace(-0.5, 0.5, n)], -1)
    return origins, torch.tensor([[0.0, 1.0, 0.0]]).expand(n, 3).contiguous()


def density(points: torch.Tensor) -> torch.Tensor:
    """The ball's density; never asked about no points (a tiny-cuda-nn field fails on an empty batch)."""
    assert points.shape[0] > 0, "density asked about no points"
    return ball(points)


def split_sampler(k: int, options):
    _, split = samplers(k, **options)
    for sampler, occupancy in zip(split.sampler_list(), OCCUPANCY):
        sampler.grid.occs.fill_(occupancy)
    return split


def culling_rank(rank: int, k: int, cullings, init_file: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=k)
    try:
        for culling in cullings:
            split = split_sampler(k, CULLING[culling])
            origins, directions = batch(culling)
            own = split.sampler_list()[rank]
            near, far = ray_bounds(origins.shape[0], split.near_plane, split.far_plane, None, None, origins.device)
            ray_indices, t_starts, t_ends = own.march(origins, directions, near, far)
            keep, counts = cull_own_block(
                ray_indices,
                t_starts,
                t_ends,
                origins,
                directions,
                density,
                own.effective_alpha_threshold(),
                split.marching,
            )
            torch.save(
                {"ray_indices": ray_indices[keep], "t_starts": t_starts[keep], "counts": counts},
                Path(out) / f"{culling} rank{rank}.pt",
            )
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("k, cullings", [(2, sorted(CULLING)), (3, ["opacity and early stopping"])])
def test_ranks_keep_together_what_one_process_keeps(tmp_path, k, cullings):
    """One process group per k; each culling variant in turn on the same ranks."""
    mp.spawn(culling_rank, args=(k, cullings, str(tmp_path / "init"), str(tmp_path)), nprocs=k, join=True)
    for culling in cullings:
        origins, directions = batch(culling)
        expected = split_sampler(k, CULLING[culling]).sample(origins, directions, density_fn=ball)
        parts = [torch.load(tmp_path / f"{culling} rank{rank}.pt") for rank in range(k)]
        ray_indices = torch.cat([part["ray_indices"] for part in parts])
        t_starts = torch.cat([part["t_starts"] for part in parts])
        order = torch.argsort(t_starts, stable=True)
        order = order[torch.argsort(ray_indices[order], stable=True)]
        assert expected.n_samples > 100, culling
        assert [part["counts"]["kept"] > 0 for part in parts] == [
            culling != "every ray in the first cell" or rank == 0 for rank in range(k)
        ], culling
        assert torch.equal(ray_indices[order], expected.ray_indices), culling
        assert torch.equal(t_starts[order], expected.t_starts), culling


def test_a_block_without_candidates_on_a_ray_is_never_in_front():
    """Ray 1: block 0 has none (``inf``); ray 2: the own block has none, so every block with some is in front."""
    entries = torch.tensor([[0.5, float("inf"), 2.0], [1.0, 1.0, float("inf")]], dtype=torch.float64)
    assert blocks_in_front(entries, entries[1]).tolist() == [[True, False, True], [False, False, False]]
