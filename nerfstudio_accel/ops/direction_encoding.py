"""The view directions' spherical-harmonic encoding, the colour MLP's input."""

from __future__ import annotations

import torch
from jaxtyping import Float
from nerfstudio.utils.math import components_from_spherical_harmonics
from torch import Tensor

KERNEL_LEVELS = 4
"""The bands the CPU kernel encodes (16 components), the field's."""


def spherical_harmonics(directions: Float[Tensor, "n 3"], levels: int, backend: str = "torch") -> Float[Tensor, "n d"]:
    """Real spherical harmonics of ``levels`` bands (``levels ** 2`` components) of unit ``directions``, without a
    gradient (nerfstudio's encoding is the torch twin). ``backend``: ``kernel`` encodes 4 levels on float32 CPU
    tensors in one numba kernel (:mod:`~nerfstudio_accel.kernels.spherical_harmonics_numba`, bit-identical);
    everything else runs the twin.

    Example:
        >>> [round(v, 4) for v in spherical_harmonics(torch.tensor([[0.0, 0.0, 1.0]]), 2)[0].tolist()]
        [0.2821, 0.0, 0.4886, 0.0]
    """
    if (
        backend == "kernel"
        and levels == KERNEL_LEVELS
        and directions.device.type == "cpu"
        and directions.dtype == torch.float32
    ):
        from nerfstudio_accel.kernels.spherical_harmonics_numba import spherical_harmonics as fused

        return fused(directions)
    with torch.no_grad():
        return components_from_spherical_harmonics(levels, directions)
