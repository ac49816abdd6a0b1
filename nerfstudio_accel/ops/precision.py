"""How every sum along rays keeps its precision: float64 running sums where the device has them, optical depths
capped before they are added, exclusive sums formed by shifting. The compositing ops' twins
(:mod:`~nerfstudio_accel.ops._torch_impl`), the front-to-back culling pass and the proposal ops follow them alike.
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

OPTICAL_DEPTH_CAP = 1e4
"""Largest per-sample ``sigma * dt`` the transmittance scan adds up (NaN counts as it): ``exp(-1e4)`` is already
0 in float32, so the cap changes no transmittance, and an overflowed density cannot spoil other rays' sums."""


def capped_optical_depth(sigmas_dt: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
    """Per-sample optical depths ready to add along rays: NaN and above :data:`OPTICAL_DEPTH_CAP` become the cap."""
    depth = torch.nan_to_num(sigmas_dt, nan=OPTICAL_DEPTH_CAP, posinf=OPTICAL_DEPTH_CAP)
    return depth.clamp(max=OPTICAL_DEPTH_CAP)


def supports_float64(device: torch.device) -> bool:
    """Whether ``device`` computes in float64 (MPS does not)."""
    return device.type != "mps"


def exclusive_cumsum(values: Float[Tensor, "*batch k"]) -> Float[Tensor, "*batch k"]:
    """Sum of the values before each one along the last dim (``[1, 2, 3] -> [0, 1, 3]``), by shifting then
    summing: never ``inclusive - own``, which gives ``inf - inf = nan`` after an infinite value."""
    return torch.cumsum(torch.cat([torch.zeros_like(values[..., :1]), values[..., :-1]], dim=-1), dim=-1)
