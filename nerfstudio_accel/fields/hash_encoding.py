"""Multiresolution hash encoding with interchangeable backends and one parameter layout.

``--pipeline.model.hash-backend`` picks how the encoding runs; all backends read the same flat table
(:mod:`nerfstudio_accel.fields.hash_layout`), so a checkpoint moves between them and between devices:

- ``torch``: the pure-PyTorch reference (:mod:`~nerfstudio_accel.fields.hash_encoding_torch`), any device;
- ``kernel``: fused forward/backward kernels that need no C++ compiler: numba on CPU
  (:mod:`~nerfstudio_accel.fields.hash_encoding_numba`), Triton on CUDA
  (:mod:`~nerfstudio_accel.fields.hash_encoding_triton`);
- ``tcnn``: tiny-cuda-nn's ``HashGrid`` reading the same table, where tiny-cuda-nn imports (CUDA);
- ``auto``: ``tcnn`` where it runs, else ``kernel`` where it runs, else ``torch``.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from typing import Any, Dict, Literal, Optional, Tuple

import torch
from jaxtyping import Float
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from nerfstudio_accel.fields.hash_encoding_torch import encode_torch
from nerfstudio_accel.fields.hash_layout import HashGridLayout, LevelTensors
from nerfstudio_accel.numba_threads import PARALLEL_KERNELS

logger = logging.getLogger(__name__)

HashBackend = Literal["auto", "torch", "kernel", "tcnn"]
INIT_RANGE = 1e-4
"""Table entries start uniform in ``[-INIT_RANGE, INIT_RANGE]`` (as tiny-cuda-nn initialises them)."""


@functools.lru_cache(maxsize=None)
def kernel_unavailable_reason(device_type: str) -> str:
    """Empty when the fused kernels build and agree with the torch reference on ``device_type`` here,
    else one line saying why not. Checked once per process, forward and backward, on 64 points over a
    dense and a hashed level."""
    if device_type not in ("cpu", "cuda"):
        return f"there is no fused hash-encoding kernel for {device_type} devices"
    if device_type == "cuda" and not torch.cuda.is_available():
        return "CUDA is not available"
    module = "numba" if device_type == "cpu" else "triton"
    if importlib.util.find_spec(module) is None:
        return f"{module} is not installed (pip install {module})"
    layout = HashGridLayout(num_levels=2, log2_hashmap_size=8, base_resolution=4, per_level_scale=4.0)
    generator = torch.Generator().manual_seed(0)
    points = torch.rand(64, 3, generator=generator).to(device_type)
    table = (torch.rand(layout.num_params, generator=generator) - 0.5).to(device_type)
    results = []
    for fused in (True, False):
        candidate = table.clone().requires_grad_(True)
        try:
            if fused:
                values = FusedHashEncoding.apply(points, candidate, layout.level_tensors(points.device), layout.features_per_level)
            else:
                values = encode_torch(points, candidate, layout)
            values.square().sum().backward()
        except Exception as error:  # noqa: BLE001 - any build or launch failure means "does not run here"
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            return f"its {module} kernels failed to run: {first_line}"
        results.append((values.detach(), candidate.grad))
    if not all(torch.allclose(a, b, atol=1e-5) for a, b in zip(*results)):
        return f"its {module} kernels disagree with the torch reference on this device"
    return ""


def tcnn_encoding_unavailable_reason(device_type: str) -> str:
    """Empty when tiny-cuda-nn's encoding runs on ``device_type`` here, else one line saying why not."""
    from nerfstudio_accel.fields.hash_grid_field import tcnn_unavailable_reason

    return tcnn_unavailable_reason(device_type)


def resolve_hash_backend(requested: str, device_type: str) -> Literal["torch", "kernel", "tcnn"]:
    """``auto`` -> ``tcnn``, else ``kernel``, else ``torch``, by what runs on ``device_type``; explicit
    choices pass through (:func:`check_hash_backend` refuses one that cannot run)."""
    if requested not in ("auto", "torch", "kernel", "tcnn"):
        raise ValueError(f"unknown hash backend {requested!r}; choose auto, torch, kernel or tcnn")
    if requested != "auto":
        return requested  # type: ignore[return-value]
    if not tcnn_encoding_unavailable_reason(device_type):
        return "tcnn"
    return "torch" if kernel_unavailable_reason(device_type) else "kernel"


def hash_backend_unavailable_reason(backend: str, device_type: str) -> str:
    """Empty when the resolved ``backend`` runs on ``device_type`` here, else one line saying why not."""
    reasons = {"kernel": kernel_unavailable_reason, "tcnn": tcnn_encoding_unavailable_reason}
    return reasons[backend](device_type) if backend in reasons else ""


def check_hash_backend(backend: str, device_type: str) -> None:
    """Raise ``ValueError`` (one line) when a chosen ``backend`` cannot run on ``device_type`` here:
    training refuses to start rather than save a config that names one backend and train with another."""
    reason = hash_backend_unavailable_reason(backend, device_type)
    if reason:
        raise ValueError(
            f"--pipeline.model.hash-backend {backend} cannot run on {device_type} here: {reason}; "
            f"choose another (auto picks one that runs)"
        )


def runnable_hash_backend(backend: str, device_type: str) -> Literal["torch", "kernel", "tcnn"]:
    """``backend`` when it runs on ``device_type``, else what ``auto`` picks there, with a warning: every
    backend reads the same table, so a model saved with one opens with another (ns-eval, the viewer)."""
    reason = hash_backend_unavailable_reason(backend, device_type)
    if not reason:
        return backend  # type: ignore[return-value]
    fallback = resolve_hash_backend("auto", device_type)
    logger.warning("hash backend %s cannot run on %s here (%s); encoding with %s instead", backend, device_type, reason, fallback)
    return fallback


class FusedHashEncoding(torch.autograd.Function):
    """Autograd wrapper of the fused kernels: numba on CPU tensors, Triton on CUDA tensors."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, points: Float[Tensor, "n 3"], table: Float[Tensor, "params"], levels: LevelTensors, features: int
    ) -> Float[Tensor, "n out"]:
        rows = table.detach().view(-1, features)
        ctx.save_for_backward(points, table)  # the parameter itself: the graph holds no copy of the table
        ctx.levels = levels
        ctx.features = features
        if points.device.type == "cuda":
            from nerfstudio_accel.fields import hash_encoding_triton

            return hash_encoding_triton.encode_forward(points, rows, levels)
        return _numba_forward(points, rows, levels)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_out: Float[Tensor, "n out"]) -> Tuple[Optional[Tensor], Optional[Tensor], None, None]:
        points, table = ctx.saved_tensors
        rows = table.detach().view(-1, ctx.features)
        point_grad = ctx.needs_input_grad[0]
        grad_out = grad_out.float().contiguous()
        if points.device.type == "cuda":
            from nerfstudio_accel.fields import hash_encoding_triton

            grad_rows, grad_points = hash_encoding_triton.encode_backward(points, rows, grad_out, ctx.levels, point_grad)
            return grad_points, grad_rows.view(-1), None, None
        grad_rows, grad_points = _numba_backward(points, rows, grad_out, ctx.levels, point_grad)
        return grad_points, grad_rows.view(-1), None, None


def _numba_forward(
    points: Float[Tensor, "n 3"], rows: Float[Tensor, "rows F"], levels: LevelTensors
) -> Float[Tensor, "n out"]:
    """Features ``(n, L*F)`` from the numba forward (threads over levels)."""
    from nerfstudio_accel.fields import hash_encoding_numba as kernels

    num_levels, features = levels.scales.shape[0], rows.shape[1]
    out = torch.empty(points.shape[0], num_levels * features, dtype=torch.float32)
    if points.shape[0]:
        with PARALLEL_KERNELS, numba_level_scheduling():
            compiled = kernels.level_kernels(features)
            compiled.encode_forward(points.numpy(), rows.numpy(), *_numpy_levels(levels), out.numpy())
    return out


def _numba_backward(
    points: Float[Tensor, "n 3"], rows: Float[Tensor, "rows F"], grad_out: Float[Tensor, "n out"],
    levels: LevelTensors, point_grad: bool,
) -> Tuple[Float[Tensor, "rows F"], Optional[Float[Tensor, "n 3"]]]:  # fmt: skip
    """Table gradient and, when ``point_grad``, the points' gradient from the numba kernels."""
    from nerfstudio_accel.fields import hash_encoding_numba as kernels

    num_levels, features = levels.scales.shape[0], rows.shape[1]
    grad_rows = torch.zeros_like(rows)
    grad_points = torch.zeros_like(points) if point_grad else None
    if not points.shape[0]:
        return grad_rows, grad_points
    compiled = kernels.level_kernels(features)
    arrays = (points.numpy(), rows.numpy(), grad_out.numpy(), *_numpy_levels(levels))
    with PARALLEL_KERNELS, numba_level_scheduling():
        compiled.encode_backward_table(arrays[0], *arrays[2:], grad_rows.numpy())
        if grad_points is not None:
            per_level = torch.empty(num_levels, points.shape[0], 3, dtype=torch.float32)
            compiled.encode_backward_points(*arrays, per_level.numpy())
            grad_points = per_level.sum(dim=0)
    return grad_rows, grad_points


def numba_level_scheduling() -> Any:
    """Hand levels to numba's threads one at a time: coarse dense levels cost far less than fine
    hashed ones, so equal static shares would leave threads idle."""
    import numba

    return numba.parallel_chunksize(1)


def _numpy_levels(levels: LevelTensors) -> Tuple[Any, ...]:
    """``(scales, resolutions, offsets, dense)`` as numpy arrays for the numba kernels."""
    return levels.scales.numpy(), levels.resolutions.numpy(), levels.offsets.numpy(), levels.dense.numpy()


class MultiresHashEncoding(nn.Module):
    """Points in ``[0, 1]^3`` -> ``(n, levels * features_per_level)`` float32 features (level-major).

    Points outside the unit cube are clamped onto it (their gradient is zero) and NaN coordinates read
    as 0, the same for every backend (a kernel never indexes outside its level).

    Args:
        layout: grid shape; the parameter ``table`` has ``layout.num_params`` entries.
        backend: ``torch``, ``kernel`` or ``tcnn`` (resolved; see :func:`resolve_hash_backend`).
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
            raise RuntimeError(
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
            raise SystemExit(
                f"error: this checkpoint's hash grid ({old_keys[0]}) is in nerfstudio's HashEncoding layout, which "
                f"accel-ngp no longer uses (docs/hash_encoding.md); retrain it with this version"
            )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, points: Float[Tensor, "n 3"]) -> Float[Tensor, "n out"]:
        points = torch.nan_to_num(points.float(), nan=0.0).clamp(0.0, 1.0).contiguous()
        if self.backend == "torch":
            return encode_torch(points, self.table, self.layout)
        if self.backend == "tcnn":
            tcnn_module: Any = self._tcnn
            tcnn_module.params = self.table
            return tcnn_module(points).float()
        table = self.table.float()
        return FusedHashEncoding.apply(points, table, self.level_tensors(points.device), self.layout.features_per_level)
