"""The view directions' spherical-harmonic encoding (4 levels, bands 0 to 3: 16 components) in one CPU kernel (numba).

The torch twin (nerfstudio's ``components_from_spherical_harmonics``) runs some forty ATen ops over the samples and
writes the output column by column; here one loop writes each sample's row. Every component is the twin's
expression in the same float32 order, so the two agree bit for bit.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

_F = np.float32


@numba.njit(cache=True)
def _encode(directions, out):
    """``out (n, 16)``: each row of ``directions (n, 3)`` encoded, component by component as the twin writes it."""
    for i in range(directions.shape[0]):
        x, y, z = directions[i, 0], directions[i, 1], directions[i, 2]
        xx, yy, zz = x * x, y * y, z * z
        out[i, 0] = _F(0.28209479177387814)
        out[i, 1] = _F(0.4886025119029199) * y
        out[i, 2] = _F(0.4886025119029199) * z
        out[i, 3] = _F(0.4886025119029199) * x
        out[i, 4] = _F(1.0925484305920792) * x * y
        out[i, 5] = _F(1.0925484305920792) * y * z
        out[i, 6] = _F(0.9461746957575601) * zz - _F(0.31539156525251999)
        out[i, 7] = _F(1.0925484305920792) * x * z
        out[i, 8] = _F(0.5462742152960396) * (xx - yy)
        out[i, 9] = _F(0.5900435899266435) * y * (_F(3.0) * xx - yy)
        out[i, 10] = _F(2.890611442640554) * x * y * z
        out[i, 11] = _F(0.4570457994644658) * y * (_F(5.0) * zz - _F(1.0))
        out[i, 12] = _F(0.3731763325901154) * z * (_F(5.0) * zz - _F(3.0))
        out[i, 13] = _F(0.4570457994644658) * x * (_F(5.0) * zz - _F(1.0))
        out[i, 14] = _F(1.445305721320277) * z * (xx - yy)
        out[i, 15] = _F(0.5900435899266435) * x * (xx - _F(3.0) * yy)


def spherical_harmonics(directions: Float[Tensor, "n 3"]) -> Float[Tensor, "n 16"]:
    """The 16 real spherical harmonics ``(n, 16)`` of bands 0 to 3 of unit ``directions`` (CPU float32; no gradient,
    as the twin's)."""
    out = torch.empty(directions.shape[0], 16, dtype=torch.float32)
    _encode(directions.detach().contiguous().numpy(), out.numpy())
    return out
