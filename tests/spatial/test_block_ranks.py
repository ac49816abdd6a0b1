"""A split scene's checkpoint between its one-process form and each rank's part: merging the ranks' parts gives the
one-process state and optimizer layout, and each rank's part comes back out of it."""

from __future__ import annotations

import torch

from nerfstudio_accel.spatial.block_ranks import (
    block_of,
    merged_optimizer_state,
    merged_state,
    own_part_of_optimizer_state,
    own_part_of_state,
)


def rank_state(block: int) -> dict:
    return {
        "_model.field.cells": torch.zeros(2, 2, 3),
        f"_model.field.fields.{block}.table": torch.full((4,), float(block)),
        f"_model.sampler.samplers.{block}.grid.occs": torch.full((8,), block + 0.5),
        "_model.camera_optimizer.pose_adjustment": torch.full((2, 6), float(block)),
    }


def rank_optimizer(block: int) -> dict:
    """Adam's state for a block of 3 parameters, numbered from 0 as the rank numbers them."""
    state = {
        index: {"step": torch.tensor(5.0), "exp_avg": torch.full((2,), 10.0 * block + index)} for index in range(3)
    }
    return {"state": state, "param_groups": [{"lr": 0.01, "params": [0, 1, 2]}]}


def test_the_ranks_parts_merge_into_the_one_process_state_and_split_back():
    parts = [rank_state(0), rank_state(1)]
    whole = merged_state(parts)
    assert set(whole) == {*parts[0], *parts[1]}
    assert torch.equal(whole["_model.field.fields.1.table"], torch.ones(4))
    assert torch.equal(whole["_model.camera_optimizer.pose_adjustment"], torch.zeros(2, 6)), "shared: rank 0's"
    for block, part in enumerate(parts):
        mine = own_part_of_state(whole, block)
        assert mine.keys() == part.keys()
        assert all(torch.equal(mine[name], part[name]) for name in mine if block_of(name) is not None)


def test_the_ranks_optimizers_merge_block_by_block_and_split_back():
    merged = merged_optimizer_state([rank_optimizer(0), rank_optimizer(1)])
    assert merged["param_groups"] == [{"lr": 0.01, "params": [0, 1, 2, 3, 4, 5]}]
    assert [float(merged["state"][index]["exp_avg"][0]) for index in range(6)] == [0, 1, 2, 10, 11, 12]
    for block in (0, 1):
        mine = own_part_of_optimizer_state(merged, block, 2)
        expected = rank_optimizer(block)
        assert mine["param_groups"] == expected["param_groups"]
        for index, state in expected["state"].items():
            assert torch.equal(mine["state"][index]["exp_avg"], state["exp_avg"])
