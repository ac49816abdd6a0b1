"""The packed scan on every device against its torch twin."""

from __future__ import annotations

import pytest

from nerfstudio_accel.ops import _torch_impl
from nerfstudio_accel.ops.packed_scan import packed_exclusive_sum
from twin_checks import DEVICES, assert_like_twin, device_for, packed_problem


@pytest.mark.parametrize("device", DEVICES)
def test_packed_exclusive_sum_matches_the_twin(device):
    on = device_for("torch", device)
    ray_indices, _, _, sigmas, _ = packed_problem(seed=4)
    expected = _torch_impl.packed_exclusive_sum(sigmas, ray_indices)
    assert_like_twin(packed_exclusive_sum(sigmas.to(on), ray_indices.to(on)), expected, "torch", device)
