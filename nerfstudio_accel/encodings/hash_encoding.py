"""Multiresolution hash encoding: a learnable flat table behind the hash-encoding op.

``--pipeline.model.hash-backend`` picks how the encoding runs (:mod:`nerfstudio_accel.ops.backends` resolves and
checks it, :func:`nerfstudio_accel.ops.hash_encoding.hash_encode` runs it); all backends read the same flat table
(:mod:`nerfstudio_accel.kernels.hash_layout`), so a checkpoint moves between them and between devices.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Iterable, Literal, Optional

import torch
from jaxtyping import Float
from torch import Tensor, nn

from nerfstudio_accel.encodings.table_growth import grow_table, layout_of_length
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
        max_log2_hashmap_size: the rows a level :meth:`grow` may lay the table out in (a power of two); None:
            ``layout``'s, no growth. Not with ``tcnn`` (its grid's rows are fixed) nor a layout of dense levels past
            its rows.
    """

    def __init__(
        self,
        layout: HashGridLayout,
        backend: Literal["torch", "kernel", "tcnn"] = "torch",
        max_log2_hashmap_size: Optional[int] = None,
    ) -> None:
        super().__init__()
        if backend not in hash_encoding.BACKENDS:
            raise ValueError(f"hash backend must be resolved to torch, kernel or tcnn, got {backend!r}")
        self.layout = layout
        self.max_log2_hashmap_size = max_log2_hashmap_size or layout.log2_hashmap_size
        grows = self.max_log2_hashmap_size != layout.log2_hashmap_size
        if grows and (backend == "tcnn" or layout.log2_dense_limit is not None or not self.can_grow_to(layout)):
            raise ValueError(
                f"a hash table of layout {layout} on the {backend} backend cannot grow to "
                f"2^{self.max_log2_hashmap_size} rows a level"
            )
        self.backend = backend
        self.table = nn.Parameter(torch.empty(layout.num_params).uniform_(-INIT_RANGE, INIT_RANGE))
        # tiny-cuda-nn's module stays outside the module tree (one key, ``table``, in every state dict); the op
        # hands it the table before each call
        tcnn_grid = hash_encoding.tcnn_hash_grid(layout) if backend == "tcnn" else None
        object.__setattr__(self, "_tcnn_grid", tcnn_grid)

    def get_out_dim(self) -> int:
        return self.layout.out_dim

    def can_grow_to(self, layout: HashGridLayout) -> bool:
        """Whether :meth:`grow` takes ``log2_hashmap_size`` of ``layout`` (at least this table's rows, at most
        :attr:`max_log2_hashmap_size`)."""
        return self.layout.log2_hashmap_size <= layout.log2_hashmap_size <= self.max_log2_hashmap_size

    def grow_to_fit(self, saved: Tensor) -> None:
        """Grow (:meth:`grow`) to the rows of ``saved``, a table of this layout with more rows a level that this
        one may grow to (a checkpoint saved after the growth); otherwise nothing."""
        layout = layout_of_length(self.layout, saved.numel())
        if layout is not None and self.can_grow_to(layout):
            self.grow(layout.log2_hashmap_size)

    def grow(self, log2_hashmap_size: int, optimizers: Iterable[torch.optim.Optimizer] = ()) -> None:
        """Lay the table out in ``2**log2_hashmap_size`` rows a level (up to :attr:`max_log2_hashmap_size`), in
        place: points read what they read (:func:`~nerfstudio_accel.encodings.table_growth.grow_table`), the
        parameter stays the same object, and its gradient and each of ``optimizers``' per-entry state of it (Adam's
        moments, ``(num_params,)``) are laid out alike. Same rows: nothing to do."""
        large = dataclasses.replace(self.layout, log2_hashmap_size=log2_hashmap_size)
        if large == self.layout:
            return
        if not self.can_grow_to(large):
            raise ValueError(
                f"this hash table has 2^{self.layout.log2_hashmap_size} rows a level and grows to at most "
                f"2^{self.max_log2_hashmap_size}, not 2^{log2_hashmap_size}"
            )
        small, table = self.layout, self.table
        small_shape = table.shape
        table.data = grow_table(table.data, small, large)
        if table.grad is not None:
            table.grad = grow_table(table.grad, small, large)
        for optimizer in optimizers:
            state = optimizer.state.get(table, {})
            for key, value in list(state.items()):
                if isinstance(value, Tensor) and value.shape == small_shape:
                    state[key] = grow_table(value, small, large)
        self.layout = large

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:  # noqa: ANN001
        old_keys = [key for key in (prefix + "hash_table", prefix + "tcnn_encoding.params") if key in state_dict]
        if old_keys:
            raise CheckpointError(
                f"this checkpoint's hash grid ({old_keys[0]}) is in nerfstudio's HashEncoding layout, which "
                f"accel-ngp no longer uses (docs/hash_encoding.md); retrain it with this version"
            )
        saved = state_dict.get(prefix + "table")
        if saved is not None and saved.shape != self.table.shape:
            self.grow_to_fit(saved)
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


def grow_to_fit_checkpoint(model: nn.Module, tensors: Dict[str, Tensor]) -> None:
    """Grow each hash encoding of ``model`` to the rows of its table in ``tensors`` (a checkpoint's, by the model's
    tensor names) where it may (:meth:`MultiresHashEncoding.grow_to_fit`), so the checkpoint's tensors fit."""
    for path, module in model.named_modules():
        saved = tensors.get(f"{path}.table")
        if isinstance(module, MultiresHashEncoding) and saved is not None:
            module.grow_to_fit(saved)
