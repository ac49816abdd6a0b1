"""Compositing of packed samples fused into one CPU kernel (numba), forward and backward.

The torch twin (:func:`~nerfstudio_accel.ops._torch_impl.composite_along_rays`) builds weights from a float64 scan
over the whole batch, then sums weights, colours and depths per ray with ``index_add``: some thirty ATen ops and as
many in backward. Here one loop walks the rays (one thread: at a training batch's size, two did not pay). Forward:
the weights ``w_i = T_i alpha_i`` (a float64 running sum of capped optical depths, as
:mod:`~nerfstudio_accel.ops.precision` prescribes) and the ray's sums. Backward, in one reverse pass per ray, each
sample's gradients from the per-ray sums' and the weights' gradients:

    G_i = dL/dw_i + dL/dacc + dL/drgb . c_i + dL/ddepth * t_mid_i
    dL/dc_i = w_i dL/drgb
    dL/dsigma_k = dt_k (G_k T_k exp(-sigma_k dt_k) - [sigma_k dt_k finite and <= cap] sum_{i > k} G_i w_i)

the last sum over the ray's later samples, in float64 (``cap``: the largest optical depth a scan adds). Values agree
with the twin's to float32 rounding (the twin's whole-batch float64 sums lose a little more on very large batches).
"""

from __future__ import annotations

import math
from typing import Any, Tuple

import numba
import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor
from torch.autograd.function import once_differentiable

from nerfstudio_accel.kernels.packed_rays import ray_starts

_ZERO = np.float32(0.0)
_HALF = np.float32(0.5)
_ONE = np.float32(1.0)


@numba.njit(inline="always")
def _capped(optical_depth, cap):
    """The optical depth a scan adds (NaN and above ``cap`` count as ``cap``) and whether it was below the cap."""
    if optical_depth != optical_depth or optical_depth > cap:
        return cap, False
    return optical_depth, True


@numba.njit(cache=True)
def _composite_forward(ray_starts, t_starts, t_ends, sigmas, colors, cap, weights, transmittance, sums):
    """Per ray: ``weights`` and ``transmittance`` of its samples, ``sums[ray] = (acc, r, g, b, depth)``."""
    for ray in range(ray_starts.shape[0] - 1):
        depth = np.float64(0.0)
        acc, red, green, blue, distance = _ZERO, _ZERO, _ZERO, _ZERO, _ZERO
        for i in range(ray_starts[ray], ray_starts[ray + 1]):
            optical_depth = sigmas[i] * (t_ends[i] - t_starts[i])
            before = np.float32(math.exp(-np.float32(depth)))
            weight = before * (_ONE - np.float32(math.exp(-optical_depth)))
            transmittance[i] = before
            weights[i] = weight
            acc += weight
            red += weight * colors[i, 0]
            green += weight * colors[i, 1]
            blue += weight * colors[i, 2]
            distance += weight * (_HALF * (t_starts[i] + t_ends[i]))
            depth += _capped(optical_depth, cap)[0]
        sums[ray, 0], sums[ray, 1], sums[ray, 2], sums[ray, 3], sums[ray, 4] = acc, red, green, blue, distance


@numba.njit(cache=True)
def _composite_backward(
    ray_starts, t_starts, t_ends, sigmas, colors, cap, weights, transmittance, grad_weights, grad_sums, grad_sigmas,
    grad_colors,
):  # fmt: skip
    """Per ray, back to front: ``grad_sigmas`` and ``grad_colors`` from ``grad_weights (n,)`` and ``grad_sums
    (n_rays, 5)`` (the order of :func:`_composite_forward`'s sums)."""
    for ray in range(ray_starts.shape[0] - 1):
        g_acc, g_red, g_green, g_blue, g_distance = (
            grad_sums[ray, 0], grad_sums[ray, 1], grad_sums[ray, 2], grad_sums[ray, 3], grad_sums[ray, 4]
        )  # fmt: skip
        behind = np.float64(0.0)
        for i in range(ray_starts[ray + 1] - 1, ray_starts[ray] - 1, -1):
            weight = weights[i]
            grad_colors[i, 0] = weight * g_red
            grad_colors[i, 1] = weight * g_green
            grad_colors[i, 2] = weight * g_blue
            t_mid = _HALF * (t_starts[i] + t_ends[i])
            grad_weight = (
                grad_weights[i] + g_acc + g_red * colors[i, 0] + g_green * colors[i, 1] + g_blue * colors[i, 2]
                + g_distance * t_mid
            )  # fmt: skip
            interval = t_ends[i] - t_starts[i]
            optical_depth = sigmas[i] * interval
            through_alpha = grad_weight * transmittance[i] * np.float32(math.exp(-optical_depth))
            through_scan = np.float32(behind) if _capped(optical_depth, cap)[1] else _ZERO
            grad_sigmas[i] = (through_alpha - through_scan) * interval
            behind += np.float64(grad_weight) * np.float64(weight)


class _FusedCompositing(torch.autograd.Function):
    """:func:`composite_along_rays` with the kernels' backward (gradients for sigmas and colours only; no double
    backward)."""

    @staticmethod
    def forward(ctx, t_starts, t_ends, sigmas, colors, ray_starts, cap):  # type: ignore[override]
        n, n_rays = sigmas.shape[0], ray_starts.shape[0] - 1
        weights = torch.empty(n, dtype=torch.float32)
        transmittance = torch.empty(n, dtype=torch.float32)
        sums = torch.zeros(n_rays, 5, dtype=torch.float32)
        if n:
            _composite_forward(
                ray_starts.numpy(), _array(t_starts), _array(t_ends), _array(sigmas), _array(colors),
                np.float64(cap), weights.numpy(), transmittance.numpy(), sums.numpy(),
            )  # fmt: skip
        ctx.save_for_backward(t_starts, t_ends, sigmas, colors, ray_starts, weights, transmittance)
        ctx.cap = cap
        return weights, sums

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_weights, grad_sums):  # type: ignore[override]
        """Unused outputs' gradients arrive as zeros (autograd materialises them)."""
        t_starts, t_ends, sigmas, colors, ray_starts, weights, transmittance = ctx.saved_tensors
        n = sigmas.shape[0]
        grad_weights, grad_sums = grad_weights.float().contiguous(), grad_sums.float().contiguous()
        grad_sigmas = torch.empty(n, dtype=torch.float32)
        grad_colors = torch.empty(n, 3, dtype=torch.float32)
        if n:
            _composite_backward(
                ray_starts.numpy(), _array(t_starts), _array(t_ends), _array(sigmas), _array(colors),
                np.float64(ctx.cap), weights.numpy(), transmittance.numpy(), grad_weights.numpy(),
                grad_sums.numpy(), grad_sigmas.numpy(), grad_colors.numpy(),
            )  # fmt: skip
        return None, None, grad_sigmas, grad_colors, None, None


def composite_along_rays(
    t_starts: Float[Tensor, " n"],
    t_ends: Float[Tensor, " n"],
    sigmas: Float[Tensor, " n"],
    colors: Float[Tensor, "n 3"],
    ray_indices: Int[Tensor, " n"],
    n_rays: int,
    optical_depth_cap: float,
) -> Tuple[Float[Tensor, " n"], Float[Tensor, "n_rays 1"], Float[Tensor, "n_rays 3"], Float[Tensor, "n_rays 1"]]:
    """Weights ``(n,)`` and per-ray opacity, colour and depth sums (``sum w``, ``sum w c``, ``sum w t_mid``) of
    ray-sorted packed samples, as the torch twin's; differentiable in ``sigmas`` and ``colors`` (CPU float32). A
    sample's optical depth adds at most ``optical_depth_cap`` to the scan (NaN counts as it)."""
    starts = ray_starts(ray_indices, n_rays)
    weights, sums = _FusedCompositing.apply(
        t_starts.detach(), t_ends.detach(), sigmas, colors, starts, optical_depth_cap
    )
    return weights, sums[:, :1], sums[:, 1:4], sums[:, 4:]


def _array(tensor: Tensor) -> Any:
    """A contiguous numpy view of a CPU tensor without a graph (a copy where it must)."""
    return tensor.detach().contiguous().numpy()
