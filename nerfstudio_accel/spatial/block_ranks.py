"""One block per rank: which block a rank holds, and a split scene's checkpoint as one ordinary file.

With ``--pipeline.spatial-blocks K`` on ``K`` ranks, rank ``r`` holds block ``r``'s field and sampler and the
shared rest of the model. Its state dict is the part of the one-process state dict that names its block (the
fields and samplers are keyed by cell), and its block's optimizer holds that block's parameters in the
one-process order. Rank 0 merges every rank's parts into the one-process form, which ``ns-eval`` and the other
tools open on one device and a resume on ``K`` ranks splits again (docs/spatial_blocks.md).
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, TypeVar, Union

import torch

from nerfstudio_accel import distributed
from nerfstudio_accel.spatial.cells import MAX_BLOCKS

BLOCK_KEY = re.compile(r"(?:^|\.)(?:field\.fields|sampler\.samplers)\.(\d+)\.")
"""A state-dict name inside one block's field or sampler; its group is the block's index."""


def own_block(blocks: int) -> Optional[int]:
    """The block this process trains alone: its rank, when a scene split into ``blocks`` cells trains on several
    ranks (the trainer has checked that they are as many); None in one process or without a split."""
    return distributed.rank() if blocks > 1 and distributed.world_size() > 1 else None


@contextlib.contextmanager
def block_initial_weights(block: int, part: int = 0) -> Iterator[None]:
    """Inside, the default CPU generator draws block ``block``'s initial weights of ``part`` (0: its field, 1: its
    sampler's fields) from ``torch.initial_seed() + 1 + block + part * MAX_BLOCKS``, whatever else the process builds,
    so block ``k`` starts alike in one process and on rank ``k``; outside, the generator is as before."""
    seed = torch.initial_seed()
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed((seed + 1 + block + part * MAX_BLOCKS) % 2**63)
        yield


Part = TypeVar("Part")


def held_blocks(parts: Union[Sequence[Part], Mapping[int, Part]], blocks: int, what: str) -> Dict[int, Part]:
    """``parts`` by block index: every block's (a sequence, or by index) or one block's (by its index, one block per
    rank); anything else raises ``ValueError``."""
    held = dict(enumerate(parts)) if isinstance(parts, Sequence) else dict(parts)
    if len(held) not in (1, blocks) or any(not 0 <= k < blocks for k in held):
        raise ValueError(f"every cell's {what} or one cell's: {what}s {sorted(held)} for {blocks} cells")
    return held


def block_of(name: str) -> Optional[int]:
    """The block a state-dict ``name`` belongs to; None for a tensor every rank holds.

    Example:
        >>> block_of("_model.field.fields.1.mlp_base.params"), block_of("_model.field.cells")
        (1, None)
    """
    match = BLOCK_KEY.search(name)
    return int(match.group(1)) if match else None


def merged_state(states: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """The one-process state dict from every rank's (rank ``r``'s at index ``r``): each block's tensors from the
    rank that holds it, the shared ones from rank 0."""
    merged = dict(states[0])
    for state in states[1:]:
        merged.update({name: value for name, value in state.items() if block_of(name) is not None})
    return merged


def own_part_of_state(state: Mapping[str, Any], block: int) -> Dict[str, Any]:
    """A one-process state dict without the tensors of the blocks other than ``block``."""
    return {name: value for name, value in state.items() if block_of(name) in (None, block)}


def merged_optimizer_state(states: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """One torch optimizer's state dict (one parameter group) over every rank's parameters: rank ``r``'s
    parameters numbered after all of rank ``r - 1``'s, as the one-process optimizer lists the blocks'."""
    state: Dict[int, Any] = {}
    params: List[int] = []
    for rank_state in states:
        (group,) = rank_state["param_groups"]
        renumbered = {old: len(params) + index for index, old in enumerate(group["params"])}
        state.update({renumbered[old]: value for old, value in rank_state["state"].items()})
        params.extend(renumbered[old] for old in group["params"])
    return {"state": state, "param_groups": [{**states[0]["param_groups"][0], "params": params}]}


def own_part_of_optimizer_state(state: Mapping[str, Any], block: int, blocks: int) -> Dict[str, Any]:
    """The part of a :func:`merged_optimizer_state` that belongs to ``block`` of ``blocks`` (every block has as
    many parameters), numbered from 0 as that block's rank numbers them."""
    (group,) = state["param_groups"]
    per_block, left = divmod(len(group["params"]), blocks)
    if left:
        raise ValueError(f"{len(group['params'])} parameters do not split into {blocks} equal blocks")
    mine = group["params"][block * per_block : (block + 1) * per_block]
    renumbered = {old: index for index, old in enumerate(mine)}
    own_state = {renumbered[old]: value for old, value in state["state"].items() if old in renumbered}
    return {"state": own_state, "param_groups": [{**group, "params": list(range(per_block))}]}
