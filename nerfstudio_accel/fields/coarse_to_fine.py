"""Coarse-to-fine hash-grid levels: progressive training over the encoding's resolution.

In the first steps only the coarse levels of the hash grid feed the density MLP; each finer level enters by a
weight that ramps from 0 to 1, so early steps fit the scene's large shapes and the fine levels (most of the
table, and the noisiest gradients) join once there is something to refine. The weights scale the encoding's
output, so a level's table gets no gradient while its weight is 0.
"""

from __future__ import annotations

from typing import Optional

import torch
from jaxtyping import Float
from torch import Tensor


def level_weights(
    step: int, num_levels: int, features_per_level: int, start_levels: int, ramp_steps: int
) -> Optional[Float[Tensor, " levels_x_features"]]:
    """Weight of each encoding feature (level-major, ``num_levels * features_per_level``) at ``step``: level ``l``
    gets ``clamp(active - l, 0, 1)`` where ``active`` grows linearly from ``start_levels`` at step 0 to
    ``num_levels`` at ``ramp_steps``. None from ``ramp_steps`` on, or when ``ramp_steps`` is 0 (every level)."""
    if ramp_steps <= 0 or step >= ramp_steps or start_levels >= num_levels:
        return None
    active = start_levels + (num_levels - start_levels) * step / ramp_steps
    per_level = (active - torch.arange(num_levels, dtype=torch.float32)).clamp(0.0, 1.0)
    return per_level.repeat_interleave(features_per_level)
