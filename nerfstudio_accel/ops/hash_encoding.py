"""The multiresolution hash encoding as one op, :func:`hash_encode`, on any of its backends.

All backends read the same flat table (:mod:`nerfstudio_accel.kernels.hash_layout`), so a table moves between
them and between devices:

- ``torch``: the pure-PyTorch reference (:mod:`~nerfstudio_accel.ops._hash_encoding_torch`), any device;
- ``kernel``: fused forward/backward kernels that need no C++ compiler, numba for CPU tensors
  (:mod:`~nerfstudio_accel.kernels.hash_encoding_numba`) and Triton for CUDA ones
  (:mod:`~nerfstudio_accel.kernels.hash_encoding_triton`); a call whose variant (half outputs, point gradients)
  fails its probe runs the reference, after one warning (:func:`kernel_variant_runs`);
- ``tcnn``: tiny-cuda-nn's ``HashGrid`` handed the same table (CUDA, where tiny-cuda-nn imports).
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from types import ModuleType
from typing import Any, Optional, Tuple

import torch
from jaxtyping import Float
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from nerfstudio_accel.errors import BackendUnavailable
from nerfstudio_accel.kernels.hash_layout import HashGridLayout, LevelTensors
from nerfstudio_accel.ops._hash_encoding_torch import encode_torch

logger = logging.getLogger(__name__)

BACKENDS = ("torch", "kernel", "tcnn")
"""The resolved hash backends (:func:`~nerfstudio_accel.ops.backends.resolve_hash_backend`)."""


def hash_encode(
    points: Float[Tensor, "n 3"],
    table: Float[Tensor, " params"],
    layout: HashGridLayout,
    backend: str = "torch",
    known: Optional[Float[Tensor, "n out"]] = None,
    tcnn_grid: Optional[nn.Module] = None,
) -> Float[Tensor, "n out"]:
    """Features ``(n, layout.num_levels * layout.features_per_level)`` (level-major) of ``points`` in
    ``[0, 1]^3`` ``(n, 3)``, read from the flat ``table`` ``(layout.num_params,)``; differentiable in both.

    Points outside the unit cube are clamped onto it (their gradient is zero) and NaN coordinates read as 0, the
    same for every backend. The output is float32, except for the ``kernel`` backend under CUDA autocast: its
    half type, summed in float32. ``known``: this encoding's values from a no-grad call on the same points and
    table this step; the ``kernel`` backend returns them with its backward attached (no second forward,
    :func:`reuses_known_values`), the others compute them again. ``tcnn`` runs ``tcnn_grid``
    (:func:`tcnn_hash_grid` of ``layout``), handing it ``table``, an ``nn.Parameter``.

    Example:
        >>> layout = HashGridLayout(num_levels=2, features_per_level=2, log2_hashmap_size=8)
        >>> hash_encode(torch.rand(5, 3), torch.ones(layout.num_params), layout).tolist()[0]
        [1.0, 1.0, 1.0, 1.0]
    """
    points = torch.nan_to_num(points.float(), nan=0.0).clamp(0.0, 1.0).contiguous()
    if backend == "tcnn":
        assert tcnn_grid is not None, "the tcnn backend runs the tcnn_hash_grid of this layout"
        tcnn_grid.params = table
        return tcnn_grid(points).float()
    if backend == "kernel":
        out_dtype = _output_dtype(points) if known is None else known.dtype
        if kernel_variant_runs(points.device.type, out_dtype, points.requires_grad):
            levels = cached_level_tensors(layout, points.device)
            return FusedHashEncoding.apply(points, table.float(), levels, layout.features_per_level, out_dtype, known)
    return encode_torch(points, table, layout)


def reuses_known_values(backend: str) -> bool:
    """Whether :func:`hash_encode` on ``backend`` returns ``known`` values rather than encoding again."""
    return backend == "kernel"


def fused_culling_reads(backend: str, device: torch.device) -> bool:
    """Whether the fused culling kernel (:mod:`~nerfstudio_accel.kernels.culling_numba`) reads a table encoded on
    ``backend`` on ``device``: the ``kernel`` backend's CPU table, whose layout and float32 sums it shares, where its
    float32 variant runs (probed here, in the culling pass, not first inside a checkpointed graph forward's
    recomputation, which a probe's own backward would break)."""
    return backend == "kernel" and device.type == "cpu" and kernel_variant_runs("cpu", torch.float32, False)


def _output_dtype(points: Tensor) -> torch.dtype:
    """The fused kernels' output dtype: autocast's half type on CUDA (the MLP reads it without a cast pass;
    the sums stay float32 inside the kernel), else float32."""
    if points.device.type == "cuda" and torch.is_autocast_enabled("cuda"):
        return torch.get_autocast_dtype("cuda")
    return torch.float32


@functools.lru_cache(maxsize=None)
def cached_level_tensors(layout: HashGridLayout, device: torch.device) -> LevelTensors:
    """Per-level constants of ``layout`` on ``device`` (built once per layout and device)."""
    return layout.level_tensors(device)


def tcnn_hash_grid(layout: HashGridLayout) -> nn.Module:
    """tiny-cuda-nn's ``HashGrid`` of ``layout`` for :func:`hash_encode`'s ``tcnn`` backend (CUDA, where
    tiny-cuda-nn imports); raises :class:`~nerfstudio_accel.errors.BackendUnavailable` where its parameters do not
    match the layout's table."""
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


@functools.lru_cache(maxsize=None)
def kernel_unavailable_reason(
    device_type: str, out_dtype: torch.dtype = torch.float32, point_grad: bool = False
) -> str:
    """Empty when a variant of the fused hash-encoding kernels builds and agrees with the torch reference on
    ``device_type`` here, else one line saying why not. A variant: ``out_dtype`` outputs and output gradients
    (fp16/bf16 under CUDA autocast), with or without the points' gradient (pose refinement). Checked once per
    process and variant, forward and backward, on 64 points over a dense and a hashed level."""
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
        candidate_points = points.clone().requires_grad_(point_grad)
        candidate = table.clone().requires_grad_(True)
        try:  # wherever a training step first needs the variant: with grad, outside autocast
            with torch.enable_grad(), torch.autocast(device_type, enabled=False):
                if fused:
                    levels = layout.level_tensors(points.device)
                    values = FusedHashEncoding.apply(
                        candidate_points, candidate, levels, layout.features_per_level, out_dtype
                    )
                else:
                    values = encode_torch(candidate_points, candidate, layout).to(out_dtype)
                values.float().square().sum().backward()
        except Exception as error:  # noqa: BLE001 - any build or launch failure means "does not run here"
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            return f"its {module} kernels failed to run: {first_line}"
        results.append((values.detach().float(), candidate.grad, candidate_points.grad))
    tolerance = 1e-5 if out_dtype == torch.float32 else 4 * torch.finfo(out_dtype).eps
    agree = [a is None or torch.allclose(a, b, rtol=tolerance, atol=tolerance) for a, b in zip(*results)]
    if not all(agree):
        return f"its {module} kernels disagree with the torch reference on this device"
    return ""


def kernel_variant(out_dtype: torch.dtype, point_grad: bool) -> str:
    """A fused kernel variant in words: ``float16 outputs with point gradients``."""
    return f"{str(out_dtype).replace('torch.', '')} outputs" + (" with point gradients" if point_grad else "")


@functools.lru_cache(maxsize=None)
def kernel_variant_runs(device_type: str, out_dtype: torch.dtype, point_grad: bool) -> bool:
    """Whether the ``kernel`` hash backend can encode with its fused variant (:func:`kernel_unavailable_reason`)
    on ``device_type`` here; asked by each encoding call, probed at the first. When it cannot, one warning per
    process and variant names it and why: the calls that need it encode with the torch reference (the same
    table), the others stay on the kernels."""
    reason = kernel_unavailable_reason(device_type, out_dtype, point_grad)
    if reason:
        logger.warning(
            "hash-encoding kernel variant %s cannot run on %s here (%s); encoding with the torch reference instead",
            kernel_variant(out_dtype, point_grad),
            device_type,
            reason,
        )
    return not reason
