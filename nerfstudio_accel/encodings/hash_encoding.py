"""Multiresolution hash encoding: a learnable flat table behind the hash-encoding op.

``--pipeline.model.hash-backend`` picks how the encoding runs (:mod:`nerfstudio_accel.ops.backends` resolves and
checks it, :func:`nerfstudio_accel.ops.hash_encoding.hash_encode` runs it); all backends read the same flat table
(:mod:`nerfstudio_accel.kernels.hash_layout`), so a checkpoint moves between them and between devices.
"""

from __future__ import annotations

from typing import Literal

import torch
from jaxtyping import Float
from torch import Tensor, nn

from nerfstudio_accel.errors import CheckpointError
from nerfstudio_accel.kernels.hash_layout import HashGridLayout
from nerfstudio_accel.ops import hash_encoding

INIT_RANGE = 1e-4
"""Table entries start uniform in ``[-INIT_RANGE, INIT_RANGE]`` (as tiny-cuda-nn initialises them)."""


class MultiresHashEncoding(nn.Module):
    """Points in ``[0, 1]^3`` ``(n, 3)`` -> ``(n, levels * features_per_level)`` features (level-major), float32
    (the ``kernel`` backend under CUDA autocast: autocast's half type, summed in float32): the op
    :func:`~nerfstudio_accel.ops.hash_encoding.hash_encode` on this module's table.

    Points outside the unit cube are clamped onto it (their gradient is zero) and NaN coordinates read
    as 0, the same for every backend (a kernel never indexes outside its level).

    Args:
        layout: grid shape; the parameter ``table`` has ``layout.num_params`` entries.
        backend: ``torch``, ``kernel`` or ``tcnn``, resolved
            (:func:`~nerfstudio_accel.ops.backends.resolve_hash_backend`).
    """

    def __init__(self, layout: HashGridLayout, backend: Literal["torch", "kernel", "tcnn"] = "torch") -> None:
        super().__init__()
        if backend not in hash_encoding.BACKENDS:
            raise ValueError(f"hash backend must be resolved to torch, kernel or tcnn, got {backend!r}")
        self.layout = layout
        self.backend = backend
        self.table = nn.Parameter(torch.empty(layout.num_params).uniform_(-INIT_RANGE, INIT_RANGE))
        # tiny-cuda-nn's module stays outside the module tree (one key, ``table``, in every state dict); the op
        # hands it the table before each call
        tcnn_grid = hash_encoding.tcnn_hash_grid(layout) if backend == "tcnn" else None
        object.__setattr__(self, "_tcnn_grid", tcnn_grid)

    def get_out_dim(self) -> int:
        return self.layout.out_dim

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:  # noqa: ANN001
        old_keys = [key for key in (prefix + "hash_table", prefix + "tcnn_encoding.params") if key in state_dict]
        if old_keys:
            raise CheckpointError(
                f"this checkpoint's hash grid ({old_keys[0]}) is in nerfstudio's HashEncoding layout, which "
                f"accel-ngp no longer uses (docs/hash_encoding.md); retrain it with this version"
            )
        saved = state_dict.get(prefix + "table")
        if saved is not None and saved.shape != self.table.shape:
            raise CheckpointError(
                f"this checkpoint's hash table ({prefix}table) holds {saved.numel()} values where this model's grid "
                f"holds {self.table.numel()}: it was trained with another grid shape (or is a split object scene "
                f"trained before each block kept one model's dense levels); train it again with this version"
            )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @property
    def reuses_values(self) -> bool:
        """Whether :meth:`with_values` skips the forward (the ``kernel`` backend); the others compute again."""
        return hash_encoding.reuses_known_values(self.backend)

    def with_values(self, points: Float[Tensor, "n 3"], values: Float[Tensor, "n out"]) -> Float[Tensor, "n out"]:
        """The encoding of ``points`` whose forward ``values`` a no-grad call on the same points and table
        returned: ``values`` with the backward attached where :attr:`reuses_values` (and that backward's kernel
        variant runs), else encoded again."""
        return hash_encoding.hash_encode(
            points, self.table, self.layout, self.backend, known=values, tcnn_grid=self._tcnn_grid
        )

    def forward(self, points: Float[Tensor, "n 3"]) -> Float[Tensor, "n out"]:
        return hash_encoding.hash_encode(points, self.table, self.layout, self.backend, tcnn_grid=self._tcnn_grid)
