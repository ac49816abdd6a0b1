"""Collectives for data-parallel training on torch.distributed (ranks started by nerfstudio's launcher,
``--machine.num-devices N``; the gloo backend on CPU, NCCL on CUDA).

accel methods do not use DDP's wrapper. A hard-mining step is a no-grad scoring forward followed by a
graph forward over a subset of the samples, not the one forward and one backward that DDP's reducer
follows, and DDP would overwrite each rank's occupancy-grid updates with rank 0's buffers. Ranks are
kept in lockstep by explicit collectives instead:

- :func:`broadcast_state`: rank 0's parameters and buffers to every rank once, after the model is built
  (nerfstudio seeds rank ``r`` with ``seed + r``, so initial weights differ);
- :func:`average_gradients`: after each backward, one all-reduce of one flat buffer (the same for every
  step shape) that also agrees on whether any rank's loss was non-finite;
- :func:`all_reduce_sum`: the hard-mining statistics tau-hat is estimated from;
- :func:`evaluate_across_ranks`: the occupancy-grid update, each rank evaluating a share of the cells;
- :func:`gather_rows`: every rank's rows about the same rays (a split scene's per-block results);
- :func:`sum_shared_gradients`: a split scene trained one block per rank sums only what the ranks share;
- :func:`gather_to_first`: every rank's part of a split scene's checkpoint, on rank 0.

Every function is the identity (no communication) in a single process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, List, Optional

import torch
import torch.distributed as dist
from jaxtyping import Float
from torch import Tensor, nn


def world_size() -> int:
    """Ranks in the process group; 1 without one."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    """This process's global rank; 0 without a process group."""
    return dist.get_rank() if world_size() > 1 else 0


def barrier() -> None:
    """Wait until every rank gets here."""
    if world_size() > 1:
        dist.barrier()


@torch.no_grad()
def broadcast_state(module: nn.Module, shared: Optional[Callable[[str], bool]] = None) -> None:
    """Copy rank 0's parameters and buffers (``module.state_dict()``) into every rank's module, in place; only
    those whose names ``shared`` accepts, when given (every rank must hold those, in the same order). Boolean
    buffers (the occupancy grid's) travel as uint8, which every backend supports."""
    if world_size() == 1:
        return
    for name, tensor in module.state_dict().items():
        if not torch.is_tensor(tensor) or (shared is not None and not shared(name)):
            continue
        if tensor.dtype == torch.bool:
            carrier = tensor.to(torch.uint8)
            dist.broadcast(carrier, src=0)
            tensor.copy_(carrier.bool())
        else:
            dist.broadcast(tensor, src=0)


@dataclass
class GradientSync:
    """What :func:`average_gradients` agreed on across ranks."""

    total_weight: float
    """Sum of the ranks' weights (their ray counts: the global batch)."""
    losses_finite: bool
    """Whether every rank's loss was finite (a rank with a non-finite loss makes every rank skip the step)."""


@torch.no_grad()
def average_gradients(parameters: Iterable[nn.Parameter], weight: float, loss: Tensor) -> GradientSync:
    """Replace every parameter's gradient by the weighted mean over ranks, ``sum_r w_r g_r / sum_r w_r``.

    ``weight``: this rank's share, its batch's ray count (losses are means over rays, so weighting by
    rays gives the gradient of the mean over the union of all ranks' rays). ``loss``: this rank's loss
    (0-dim), only checked for being finite. A missing gradient counts as zero; a parameter without a
    gradient on every rank keeps none (the optimizer skips it, as in one process). A non-finite gradient
    on any rank makes that gradient non-finite on every rank, so the step guard skips it everywhere.

    One all-reduce of a float32 buffer: all gradients, one used flag per parameter, the non-finite-loss
    count and the weight. In one process the gradients are left alone (callers skip the call there: the
    finite check reads the device)."""
    params = [p for p in parameters if p.requires_grad]
    loss_bad = (~torch.isfinite(loss.detach().float())).float().reshape(1)
    if world_size() == 1:
        return GradientSync(float(weight), not bool(loss_bad))
    device = loss_bad.device
    pieces = [
        (p.grad.reshape(-1).float() * weight) if p.grad is not None else torch.zeros(p.numel(), device=device)
        for p in params
    ]
    used = torch.tensor([float(p.grad is not None) for p in params], device=device)
    flat = torch.cat([*pieces, used, loss_bad, torch.tensor([float(weight)], device=device)])
    dist.all_reduce(flat)
    total_weight = flat[-1].clamp(min=1e-12)  # no rays on any rank: gradients stay zero, not 0/0
    used = flat[-2 - len(params) : -2].tolist()
    offset = 0
    for index, p in enumerate(params):
        count = p.numel()
        if used[index] > 0:
            p.grad = (flat[offset : offset + count] / total_weight).view_as(p).to(p.dtype)
        offset += count
    return GradientSync(float(flat[-1]), float(flat[-2]) == 0.0)


@dataclass
class SharedGradientSync:
    """What :func:`sum_shared_gradients` agreed on across ranks."""

    finite: bool
    """Whether every rank's loss and owned gradients were finite."""
    ranks_with_gradients: int
    """How many ranks had a gradient for any of their owned parameters."""


@torch.no_grad()
def sum_shared_gradients(
    shared: Iterable[nn.Parameter], owned: Iterable[nn.Parameter], loss: Tensor
) -> SharedGradientSync:
    """One block of a split scene per rank (every rank computes the same loss of the same rays; its gradient
    reaches each rank's own block only): replace each ``shared`` parameter's gradient by its sum over ranks (each
    rank's holds the part through its own block) and leave the ``owned`` ones. When a rank's loss or owned
    gradients were not finite, every rank's owned gradients are made non-finite too, so every rank's loss scaler
    and step guard skip the step alike. One all-reduce; in one process, nothing is exchanged."""
    shared = [p for p in shared if p.requires_grad]
    grads = [p.grad for p in owned if p.grad is not None]
    sums = torch.stack([loss.detach().float().reshape(()), *(grad.sum(dtype=torch.float32) for grad in grads)])
    device = sums.device
    flags = torch.stack([(~torch.isfinite(sums).all()).float(), sums.new_tensor(float(bool(grads)))])
    if world_size() > 1:
        pieces = [
            p.grad.reshape(-1).float() if p.grad is not None else torch.zeros(p.numel(), device=device) for p in shared
        ]
        used = torch.tensor([float(p.grad is not None) for p in shared], device=device)
        flat = torch.cat([*pieces, used, flags])
        dist.all_reduce(flat)
        offset, used_list = 0, flat[-2 - len(shared) : -2].tolist()
        for index, p in enumerate(shared):
            if used_list[index] > 0:
                p.grad = flat[offset : offset + p.numel()].view_as(p).to(p.dtype)
            offset += p.numel()
        flags = flat[-2:]
    bad, with_gradients = flags.tolist()
    if bad and grads:
        grads[0].view(-1)[:1] = float("nan")
    return SharedGradientSync(finite=bad == 0.0, ranks_with_gradients=int(with_gradients))


_HOST_GROUP: List[Any] = []
"""A gloo group over every rank, made on first use when the default group is not gloo."""


def gather_to_first(value: Any) -> Optional[List[Any]]:
    """Every rank's picklable ``value`` on rank 0 (rank ``r``'s at index ``r``), None on the other ranks;
    ``[value]`` in one process. Through host memory: NCCL would stage every rank's pickled value on rank 0's GPU.
    Every rank must call it."""
    if world_size() == 1:
        return [value]
    if dist.get_backend() != "gloo" and not _HOST_GROUP:
        _HOST_GROUP.append(dist.new_group(backend="gloo"))
    gathered: Optional[List[Any]] = [None] * world_size() if rank() == 0 else None
    dist.gather_object(value, gathered, dst=0, group=_HOST_GROUP[0] if _HOST_GROUP else None)
    return gathered


def all_reduce_sum(tensor: Tensor) -> Tensor:
    """``tensor`` summed over ranks (a new tensor; ``tensor`` itself in one process)."""
    if world_size() == 1:
        return tensor
    total = tensor.clone()
    dist.all_reduce(total)
    return total


@torch.no_grad()
def evaluate_across_ranks(fn: Callable[[Tensor], Tensor], points: Float[Tensor, "n d"]) -> Tensor:
    """``fn(points)`` (rows in, rows out), with each of the ``W`` ranks evaluating ``ceil(n / W)`` of the
    rows and an all-gather assembling the result. Every rank must pass the same ``points``; every rank
    then holds bit-identical results (each row computed once, on one rank)."""
    ranks = world_size()
    if ranks == 1:
        return fn(points)
    count = points.shape[0]
    share = -(-count // ranks)
    padded = torch.cat([points, points.new_zeros((share * ranks - count, *points.shape[1:]))])
    mine = fn(padded[rank() * share : (rank() + 1) * share]).contiguous()
    gathered = [torch.empty_like(mine) for _ in range(ranks)]
    dist.all_gather(gathered, mine)
    return torch.cat(gathered)[:count]


def gather_rows(rows: Float[Tensor, "n c"]) -> List[Tensor]:
    """Every rank's ``rows`` (all ranks pass the same shape), rank ``r``'s at index ``r``: this rank's as given
    (its graph kept), the others' as constants; ``[rows]`` in one process. One all-gather."""
    ranks = world_size()
    if ranks == 1:
        return [rows]
    gathered = [torch.empty_like(rows) for _ in range(ranks)]
    dist.all_gather(gathered, rows.detach().contiguous())
    gathered[rank()] = rows
    return gathered
