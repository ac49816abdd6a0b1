"""Collectives for data-parallel training on torch.distributed (ranks started by nerfstudio's launcher,
``--machine.num-devices N``).

A hard-mining step is a no-grad scoring forward followed by a graph forward over a subset of the
samples, not the one forward and one backward that DDP's reducer follows. :func:`average_gradients`
averages the gradients after the backward instead, one all-reduce of one flat buffer, the same for every
step shape. Not wired in yet: multi-rank training still goes through nerfstudio's DDP wrapper (issue 14).
"""

from __future__ import annotations

from typing import Iterable

import torch
import torch.distributed as dist
from torch import nn


def world_size() -> int:
    """Ranks in the process group; 1 without one."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


@torch.no_grad()
def average_gradients(parameters: Iterable[nn.Parameter], weight: float) -> None:
    """Replace every parameter's gradient by the weighted mean over ranks, ``sum_r w_r g_r / sum_r w_r``.

    ``weight``: this rank's share, e.g. its batch's ray count (losses are means over rays, so weighting by
    rays gives the gradient of the mean over the union of all ranks' rays). A missing gradient counts as
    zero; a parameter without a gradient on every rank keeps none (the optimizer skips it, as in one
    process). One all-reduce of a float32 buffer of all gradients, one used flag per parameter and the
    weight."""
    params = [p for p in parameters if p.requires_grad]
    if world_size() == 1 or not params:
        return
    device = params[0].device
    pieces = [(p.grad.reshape(-1).float() * weight) if p.grad is not None else torch.zeros(p.numel(), device=device) for p in params]
    used = torch.tensor([float(p.grad is not None) for p in params], device=device)
    flat = torch.cat([*pieces, used, torch.tensor([float(weight)], device=device)])
    dist.all_reduce(flat)
    total_weight = flat[-1].clamp(min=1e-12)  # no rays on any rank: gradients stay zero, not 0/0
    used = flat[-1 - len(params):-1]
    offset = 0
    for index, p in enumerate(params):
        count = p.numel()
        if used[index] > 0:
            p.grad = (flat[offset:offset + count] / total_weight).view_as(p).to(p.dtype)
        offset += count
