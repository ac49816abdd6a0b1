"""BlockProposalSampler: each block's proposal sampler places its samples on the part of a ray inside its own cell
(a capture's outer cells reach out to all of space), the blocks' samples merge front to back, and every block's
proposal fields learn from the interlevel loss of its own samples."""

from __future__ import annotations

import pytest
import torch

from nerfstudio_accel.ops.ray_aabb import ray_aabb_intersect
from nerfstudio_accel.sampling.base import SamplerScene
from nerfstudio_accel.sampling.proposal import ProposalSamplerConfig
from nerfstudio_accel.spatial.block_proposal_sampler import BlockProposalSampler
from nerfstudio_accel.spatial.cells import cell_of, kd_cells, unbounded_cells

BOX = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]])


def block_sampler(k: int, contract: bool, held=None) -> BlockProposalSampler:
    config = ProposalSamplerConfig(max_res=(32,), log2_hashmap_size=12, num_samples=8, samples_per_round=(16,))
    config.resolve("cpu", contract)
    scene = SamplerScene(BOX, contract, 0.05, 100.0, torch.device("cpu"), "torch", "torch")
    cells = kd_cells(BOX, k)
    if contract:
        cells = unbounded_cells(cells, BOX)
    torch.manual_seed(0)
    return BlockProposalSampler(config.setup_cells(scene, cells, held), cells, 0.05, 100.0, shown_box=BOX)


def rays(n: int, seed: int):
    """Rays from a sphere of radius 3 around the box towards points inside it (some crossing every cell)."""
    generator = torch.Generator().manual_seed(seed)
    origins = torch.nn.functional.normalize(torch.randn(n, 3, generator=generator), dim=-1) * 3.0
    targets = (torch.rand(n, 3, generator=generator) * 2 - 1) * 0.9
    return origins, torch.nn.functional.normalize(targets - origins, dim=-1)


@pytest.mark.parametrize("k, contract", [(2, True), (4, True), (3, False)])
def test_each_block_samples_only_its_cell_and_the_blocks_merge_front_to_back(k, contract):
    sampler = block_sampler(k, contract)
    sampler.train()
    origins, directions = rays(200, seed=k)
    samples = sampler.sample(origins, directions, stratified=True)
    order = samples.ray_indices * 1e4 + samples.t_starts
    assert bool((order[1:] >= order[:-1]).all()), "sorted by ray, then front to back"
    cells = sampler.cells
    block = cell_of(samples.positions, cells)
    missed = 0
    for cell in range(k):
        ours = block == cell
        t_in, t_out, _ = ray_aabb_intersect(origins, directions, cells[cell].flatten())
        t_in, t_out = t_in.clamp(min=0.05), t_out.clamp(max=100.0)
        crossing = t_out > t_in
        missed += int((~crossing).sum())
        per_ray = torch.bincount(samples.ray_indices[ours], minlength=origins.shape[0])
        assert torch.equal(per_ray, crossing.long() * 8), "8 samples on each ray that crosses the cell, none elsewhere"
        rows = samples.ray_indices[ours]
        assert bool((samples.t_starts[ours] >= t_in[rows] - 1e-4).all())
        assert bool((samples.t_ends[ours] <= t_out[rows] + 1e-4).all())
    assert sampler.figures()[f"samples_per_ray_block_{k - 1}"] > 0
    assert contract or missed > 0, "some rays miss a bounded cell"


def test_every_blocks_proposal_fields_learn_from_its_own_samples_weights():
    sampler = block_sampler(2, contract=True)
    sampler.train()
    origins, directions = rays(64, seed=5)
    samples = sampler.sample(origins, directions, stratified=True)
    weights = torch.rand(samples.n_samples, generator=torch.Generator().manual_seed(1)) * 0.2
    assert sampler.losses(samples.subset(torch.arange(4)), weights[:4]) == {}, "only the samples it returned"
    samples = sampler.sample(origins, directions, stratified=True)
    weights = 0.1 + 0.1 * torch.sin(1e3 * samples.t_starts)  # a function of each sample, to follow it to its block
    heard = []
    for block in sampler.sampler_list():
        own_losses = block.losses
        block.losses = lambda part, part_weights, own=own_losses: (
            heard.append((part, part_weights)) or own(part, part_weights)
        )
    losses = sampler.losses(samples, weights)
    assert [part.n_samples for part, _ in heard] == torch.bincount(cell_of(samples.positions, sampler.cells)).tolist()
    for part, part_weights in heard:  # each block hears the weights of its own samples, in its own order
        torch.testing.assert_close(part_weights, 0.1 + 0.1 * torch.sin(1e3 * part.t_starts), rtol=0, atol=0)
    assert set(losses) == {"interlevel_loss"} and float(losses["interlevel_loss"].detach()) > 0
    losses["interlevel_loss"].backward()
    for block in sampler.sampler_list():
        assert all(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in block.fields.parameters())
    assert sampler.losses(samples, weights) == {}, "the rounds are let go once read"


def test_a_ranks_block_sampler_holds_its_own_cell_and_outlines_the_cells_within_the_box():
    own = block_sampler(2, contract=True, held=[1])
    assert own.own_block == 1 and len(own.sampler_list()) == 1
    assert torch.equal(own.cell_boxes(), kd_cells(BOX, 2)), "the viewer outlines the cells inside the scene box"
    assert float(own.cells.abs().max()) > 1e5
