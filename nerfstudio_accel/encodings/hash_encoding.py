"""Multiresolution hash encoding with interchangeable backends and one parameter layout.

``--pipeline.model.hash-backend`` picks how the encoding runs (:mod:`nerfstudio_accel.kernels.backends`
resolves and checks it); all backends read the same flat table (:mod:`nerfstudio_accel.kernels.hash_layout`),
so a checkpoint moves between them and between devices:

- ``torch``: the pure-PyTorch reference (:mod:`~nerfstudio_accel.encodings.hash_encoding_torch`), any device;
- ``kernel``: fused forward/backward kernels that need no C++ compiler: numba on CPU
  (:mod:`~nerfstudio_accel.kernels.hash_encoding_numba`), Triton on CUDA
  (:mod:`~nerfstudio_accel.kernels.hash_encoding_triton`); a call whose variant (half outputs, point
  gradients) fails its probe encodes with ``torch``, after one warning
  (:func:`~nerfstudio_accel.kernels.backends.kernel_variant_runs`);
- ``tcnn``: tiny-cuda-nn's ``HashGrid`` reading the same table, where tiny-cuda-nn imports (CUDA).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Dict, Literal, Optional, Tuple

import torch
from jaxtyping import Float
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from nerfstudio_accel.encodings.hash_encoding_torch import encode_torch
from nerfstudio_accel.errors import BackendUnavailable, CheckpointError
from nerfstudio_accel.kernels.backends import kernel_variant_runs
from nerfstudio_accel.kernels.hash_layout import HashGridLayout, LevelTensors

INIT_RANGE = 1e-4
"""Table entries start uniform in ``[-INIT_RANGE, INIT_RANGE]`` (as tiny-cuda-nn initialises them)."""


def _kernels_for(device: torch.device) -> ModuleType:
    """The kernel module for tensors on ``device``: Triton on CUDA, numba otherwise. Both have
    ``encode_forward`` and ``encode_backward`` with the same signatures."""
    if device.type == "cuda":
        from nerfstudio_accel.kernels import hash_encoding_triton

        return hash_encoding_triton
    from nerfstudio_accel.kernels import hash_encoding_numba

    return hash_encoding_numba


class FusedHashEncoding(torch.autograd.Function):
    """Autograd wrapper of the fused kernels: points ``(n, 3)`` and flat table ``(params,)`` ->
    ``(n, L*F)``; numba on CPU tensors, Triton on CUDA tensors. ``known``: the forward values, computed
    already by a no-grad pass over the same points and table this step; they are returned and only the
    backward kernel runs (it reads only the points and the table)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        points: Float[Tensor, "n 3"],
        table: Float[Tensor, " params"],
        levels: LevelTensors,
        features: int,
        out_dtype: torch.dtype = torch.float32,
        known: Optional[Float[Tensor, "n out"]] = None,
    ) -> Float[Tensor, "n out"]:
        ctx.save_for_backward(points, table)  # the parameter itself: the graph holds no copy of the table
        ctx.levels = levels
        ctx.features = features
        if known is not None:
            return known.clone()
        rows = table.detach().view(-1, features)
        return _kernels_for(points.device).encode_forward(points, rows, levels, out_dtype)

    @staticmethod
    @once_differentiable
    def backward(
        ctx: Any, grad_out: Float[Tensor, "n out"]
    ) -> Tuple[Optional[Tensor], Optional[Tensor], None, None, None, None]:
        points, table = ctx.saved_tensors
        rows = table.detach().view(-1, ctx.features)
        kernels = _kernels_for(points.device)
        grad_rows, grad_points = kernels.encode_backward(
            points, rows, grad_out.contiguous(), ctx.levels, ctx.needs_input_grad[0]
        )
        return grad_points, grad_rows.view(-1), None, None, None, None


class MultiresHashEncoding(nn.Module):
    """Points in ``[0, 1]^3`` ``(n, 3)`` -> ``(n, levels * features_per_level)`` features (level-major), float32
    (the ``kernel`` backend under CUDA autocast: autocast's half type, summed in float32).

    Points outside the unit cube are clamped onto it (their gradient is zero) and NaN coordinates read
    as 0, the same for every backend (a kernel never indexes outside its level).

    Args:
        layout: grid shape; the parameter ``table`` has ``layout.num_params`` entries.
        backend: ``torch``, ``kernel`` or ``tcnn``, resolved
            (:func:`~nerfstudio_accel.kernels.backends.resolve_hash_backend`).
    """

    def __init__(self, layout: HashGridLayout, backend: Literal["torch", "kernel", "tcnn"] = "torch") -> None:
        super().__init__()
        if backend not in ("torch", "kernel", "tcnn"):
            raise ValueError(f"hash backend must be resolved to torch, kernel or tcnn, got {backend!r}")
        self.layout = layout
        self.backend = backend
        self._levels: Dict[torch.device, LevelTensors] = {}
        table = torch.empty(layout.num_params).uniform_(-INIT_RANGE, INIT_RANGE)
        self.table = nn.Parameter(table)
        # tiny-cuda-nn's module stays outside the module tree (one key, ``table``, in every state dict);
        # it is handed our table before each call.
        object.__setattr__(self, "_tcnn", self._build_tcnn(layout) if backend == "tcnn" else None)

    @staticmethod
    def _build_tcnn(layout: HashGridLayout) -> nn.Module:
        import tinycudann as tcnn

        config = {
            "otype": "HashGrid",
            "n_levels": layout.num_levels,
            "n_features_per_level": layout.features_per_level,
            "log2_hashmap_size": layout.log2_hashmap_size,
            "base_resolution": layout.base_resolution,
            "per_level_scale": layout.per_level_scale,
            "interpolation": "Linear",
        }
        encoding = tcnn.Encoding(n_input_dims=3, encoding_config=config)
        if encoding.params.numel() != layout.num_params:
            raise BackendUnavailable(
                f"tiny-cuda-nn's HashGrid holds {encoding.params.numel()} parameters where this layout expects "
                f"{layout.num_params}; use --pipeline.model.hash-backend kernel"
            )
        return encoding

    def get_out_dim(self) -> int:
        return self.layout.out_dim

    def level_tensors(self, device: torch.device) -> LevelTensors:
        """Per-level constants on ``device`` (built once per device)."""
        if device not in self._levels:
            self._levels[device] = self.layout.level_tensors(device)
        return self._levels[device]

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:  # noqa: ANN001
        old_keys = [key for key in (prefix + "hash_table", prefix + "tcnn_encoding.params") if key in state_dict]
        if old_keys:
            raise CheckpointError(
                f"this checkpoint's hash grid ({old_keys[0]}) is in nerfstudio's HashEncoding layout, which "
                f"accel-ngp no longer uses (docs/hash_encoding.md); retrain it with this version"
            )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @property
    def reuses_values(self) -> bool:
        """Whether :meth:`with_values` skips the forward (the ``kernel`` backend); the others compute again."""
        return self.backend == "kernel"

    def with_values(self, points: Float[Tensor, "n 3"], values: Float[Tensor, "n out"]) -> Float[Tensor, "n out"]:
        """The encoding of ``points`` whose forward ``values`` a no-grad call on the same points and table
        returned: ``values`` with the backward attached, where :attr:`reuses_values` and that backward's kernel
        variant runs; else ``self(points)``."""
        if not self.reuses_values:
            return self(points)
        unit_points = self._unit_cube_points(points)
        if not kernel_variant_runs(unit_points.device.type, values.dtype, unit_points.requires_grad):
            return self(points)
        table = self.table.float()
        levels = self.level_tensors(points.device)
        return FusedHashEncoding.apply(unit_points, table, levels, self.layout.features_per_level, values.dtype, values)

    @staticmethod
    def _unit_cube_points(points: Float[Tensor, "n 3"]) -> Float[Tensor, "n 3"]:
        """What every backend encodes: fp32, NaN read as 0, clamped onto the unit cube."""
        return torch.nan_to_num(points.float(), nan=0.0).clamp(0.0, 1.0).contiguous()

    def forward(self, points: Float[Tensor, "n 3"]) -> Float[Tensor, "n out"]:
        points = self._unit_cube_points(points)
        if self.backend == "tcnn":
            tcnn_module: Any = self._tcnn
            tcnn_module.params = self.table
            return tcnn_module(points).float()
        out_dtype = _output_dtype(points)
        if self.backend == "torch" or not kernel_variant_runs(points.device.type, out_dtype, points.requires_grad):
            return encode_torch(points, self.table, self.layout)
        table = self.table.float()
        levels = self.level_tensors(points.device)
        return FusedHashEncoding.apply(points, table, levels, self.layout.features_per_level, out_dtype)


def _output_dtype(points: Tensor) -> torch.dtype:
    """The fused kernels' output dtype: autocast's half type on CUDA (the MLP reads it without a cast pass;
    the sums stay float32 inside the kernel), else float32."""
    if points.device.type == "cuda" and torch.is_autocast_enabled("cuda"):
        return torch.get_autocast_dtype("cuda")
    return torch.float32
