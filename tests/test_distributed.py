"""Collectives for data-parallel training, run for real: 2 processes on the gloo backend (CPU)."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from nerfstudio_accel.distributed import average_gradients

BATCHES = (torch.arange(6.0).reshape(3, 2), torch.arange(10.0).reshape(5, 2) / 7.0)  # unequal ray counts


def model() -> torch.nn.ModuleDict:
    torch.manual_seed(0)
    return torch.nn.ModuleDict({"used": torch.nn.Linear(2, 1), "rank1_only": torch.nn.Linear(2, 1), "unused": torch.nn.Linear(2, 1)})


def loss(net: torch.nn.ModuleDict, batch: torch.Tensor, rank: int) -> torch.Tensor:
    """A mean over the batch's rows (nerfstudio's losses are means over rays); rank 1 also uses a module
    that rank 0 does not."""
    value = net["used"](batch).pow(2).mean()
    return value + net["rank1_only"](batch).mean() if rank == 1 else value


def averaging_rank(rank: int, init_file: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        net = model()
        loss(net, BATCHES[rank], rank).backward()
        average_gradients(net.parameters(), weight=BATCHES[rank].shape[0])
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
