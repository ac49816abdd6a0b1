"""Collectives for data-parallel training, run for real: 2 processes on the gloo backend (CPU)."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from nerfstudio_accel.distributed import (
    all_reduce_sum,
    average_gradients,
    broadcast_state,
    evaluate_across_ranks,
    gather_to_first,
    sum_shared_gradients,
)

BATCHES = (torch.arange(6.0).reshape(3, 2), torch.arange(10.0).reshape(5, 2) / 7.0)  # unequal ray counts


def model() -> torch.nn.ModuleDict:
    torch.manual_seed(0)
    return torch.nn.ModuleDict(
        {"used": torch.nn.Linear(2, 1), "rank1_only": torch.nn.Linear(2, 1), "unused": torch.nn.Linear(2, 1)}
    )


def loss(net: torch.nn.ModuleDict, batch: torch.Tensor, rank: int) -> torch.Tensor:
    """A mean over the batch's rows (nerfstudio's losses are means over rays); rank 1 also uses a module
    that rank 0 does not."""
    value = net["used"](batch).pow(2).mean()
    return value + net["rank1_only"](batch).mean() if rank == 1 else value


def averaging_rank(rank: int, init_file: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        net = model()
        value = loss(net, BATCHES[rank], rank)
        value.backward()
        sync = average_gradients(net.parameters(), weight=BATCHES[rank].shape[0], loss=value)
        assert sync.total_weight == 8 and sync.losses_finite
        torch.save({name: p.grad for name, p in net.named_parameters()}, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_averaged_gradients_equal_the_gradient_over_the_union_of_both_ranks_batches(tmp_path):
    """Rank 0 has 3 rows, rank 1 has 5: the ray-weighted average is the gradient of the mean over all 8.
    A module used on one rank only gets that rank's share; one used nowhere keeps no gradient."""
    mp.spawn(averaging_rank, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    reference = model()
    union = torch.cat(BATCHES)
    (reference["used"](union).pow(2).mean() + reference["rank1_only"](BATCHES[1]).mean() * 5 / 8).backward()
    for rank in (0, 1):
        grads = torch.load(tmp_path / f"rank{rank}.pt")
        for name, p in reference.named_parameters():
            if name.startswith("unused"):
                assert grads[name] is None
            else:
                torch.testing.assert_close(grads[name], p.grad, msg=f"rank {rank}: {name}")


def collectives_rank(rank: int, init_file: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        torch.manual_seed(rank)  # as nerfstudio's launcher seeds ranks: different initial weights
        net = torch.nn.Linear(3, 2)
        net.register_buffer("occupied", torch.rand(7) > 0.5)
        broadcast_state(net)
        points = torch.arange(15.0).reshape(5, 3)  # 5 rows over 2 ranks: 3 + 3 with one padding row
        evaluations = evaluate_across_ranks(lambda x: x.sum(dim=1, keepdim=True) + 100 * rank, points)
        moments = all_reduce_sum(torch.tensor([1.0, rank + 1.0]))
        sync = average_gradients(net.parameters(), weight=1, loss=torch.tensor(float("nan") if rank == 1 else 0.5))
        block = torch.nn.Linear(3, 2)  # one block per rank: only the bias is every rank's
        broadcast_state(block, shared=lambda name: name == "bias")
        shared, owned, poisoned = (torch.nn.Parameter(torch.zeros(n)) for n in (2, 3, 3))
        shared.grad, owned.grad = torch.tensor([1.0, 2.0]) * (rank + 1), torch.full((3,), rank + 1.0)
        poisoned.grad = torch.tensor([1.0, float("nan") if rank == 1 else 1.0, 1.0])
        finite = sum_shared_gradients([shared], [owned], torch.tensor(0.5))
        finite_when_one_is_not = sum_shared_gradients([], [poisoned], torch.tensor(0.5))
        without_samples = torch.nn.Parameter(torch.zeros(3))  # rank 1's block had no sample: no gradient
        one_with_gradients = sum_shared_gradients([], [owned if rank == 0 else without_samples], torch.tensor(0.5))
        torch.save(
            {
                "state": net.state_dict(),
                "evaluations": evaluations,
                "moments": moments,
                "sync": sync,
                "block": block.state_dict(),
                "grads": (shared.grad, owned.grad, poisoned.grad),
                "syncs": (finite, finite_when_one_is_not, one_with_gradients),
                "gathered": gather_to_first({"rank": rank}),
            },
            Path(out) / f"rank{rank}.pt",
        )
    finally:
        dist.destroy_process_group()


def test_collectives_give_every_rank_the_same_result(tmp_path):
    """broadcast_state copies rank 0's weights and boolean buffers; evaluate_across_ranks gives every rank
    the rows each rank computed (rank 1 adds 100 to its rows: they show where each row was computed);
    a non-finite loss on one rank is known on both. For one block per rank: broadcast_state copies only the shared
    tensors, sum_shared_gradients sums the shared gradients and leaves the owned ones, and gather_to_first brings
    every rank's value to rank 0."""
    mp.spawn(collectives_rank, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    results = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]
    torch.manual_seed(0)
    reference = torch.nn.Linear(3, 2)
    expected_occupied = torch.rand(7) > 0.5
    expected_rows = torch.tensor([3.0, 12.0, 21.0, 130.0, 139.0])[:, None]
    for result in results:
        torch.testing.assert_close(result["state"]["weight"], reference.weight.detach(), rtol=0, atol=0)
        assert torch.equal(result["state"]["occupied"], expected_occupied)
        assert torch.equal(result["evaluations"], expected_rows)
        assert torch.equal(result["moments"], torch.tensor([2.0, 3.0]))
        assert result["sync"].total_weight == 2 and not result["sync"].losses_finite
        assert torch.equal(result["grads"][0], torch.tensor([3.0, 6.0])), "shared gradients are summed"
        assert [sync.finite for sync in result["syncs"]] == [True, False, True], (
            "a non-finite gradient is known on both"
        )
        assert [sync.ranks_with_gradients for sync in result["syncs"]] == [2, 2, 1]
        assert not torch.isfinite(result["grads"][2]).all(), "and every rank's own gradients show it to its scaler"
    assert torch.equal(results[0]["block"]["bias"], results[1]["block"]["bias"]), "the shared tensor is rank 0's"
    assert not torch.equal(results[0]["block"]["weight"], results[1]["block"]["weight"]), "blocks kept their own"
    assert torch.equal(results[0]["grads"][1], torch.ones(3)) and torch.equal(results[1]["grads"][1], 2 * torch.ones(3))
    assert results[0]["gathered"] == [{"rank": 0}, {"rank": 1}] and results[1]["gathered"] is None
