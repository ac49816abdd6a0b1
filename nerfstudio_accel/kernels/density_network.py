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
    units -> the head: raw density (row 0 of ``head_weight``) and, where the kept samples' heads are wanted, the
    geometry features (the other rows) -> density ``exp(min(raw - 1, max_log_density))``. CPU float32 tensors,
    contiguous."""

    table: Float[Tensor, "rows features"]
    levels: LevelTensors
    level_weights: Float[Tensor, " enc"]
    hidden_weight: Float[Tensor, "enc hidden"]
    """The first layer's weight, transposed."""
    hidden_bias: Float[Tensor, " hidden"]
    head_weight: Float[Tensor, "heads hidden"]
    """The output layer's rows the kernel computes: the density's, then (for the kept samples only) the geometry
    features' where their density heads are wanted (all rows) or none (the density's row alone)."""
    head_bias: Float[Tensor, " heads"]
    max_log_density: float
    aabb: Float[Tensor, "2 3"]
    contract: bool
    region: Optional[Float[Tensor, "2 3"]]
    """With ``contract``, the box of contracted coordinates stretched over the grid; None: all of them."""
