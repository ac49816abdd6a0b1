"""DensityNetwork: a hash-grid field's density as the fused culling kernel
(:mod:`~nerfstudio_accel.kernels.culling_numba`) reads it, declared apart from the kernel so that fields and ops name
it without loading numba."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from jaxtyping import Float
from torch import Tensor

from nerfstudio_accel.kernels.hash_layout import LevelTensors


@dataclass(frozen=True)
class DensityNetwork:
    """A hash-grid field's density as the fused kernel reads it: world point -> unit coordinates (the box, or the
    contraction and a block's region) -> hash encoding ``(enc,)`` -> times ``level_weights`` -> ``hidden`` ReLU
    units -> raw density -> ``exp(min(raw - 1, max_log_density))``. CPU float32 tensors, contiguous."""

    table: Float[Tensor, "rows features"]
    levels: LevelTensors
    level_weights: Float[Tensor, " enc"]
    hidden_weight: Float[Tensor, "enc hidden"]
    """The first layer's weight, transposed."""
    hidden_bias: Float[Tensor, " hidden"]
    density_weight: Float[Tensor, " hidden"]
    """The output layer's density row (its other rows, the geometry features, are not needed to cull)."""
    density_bias: float
    max_log_density: float
    aabb: Float[Tensor, "2 3"]
    contract: bool
    region: Optional[Float[Tensor, "2 3"]]
    """With ``contract``, the box of contracted coordinates stretched over the grid; None: all of them."""
