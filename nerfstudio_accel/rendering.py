"""Packed volume rendering in fp32, and background blending / random-background augmentation.

Exponentials, transmittance and sums always run in fp32 with autocast off, whatever precision
the field ran in: half-precision prefix sums of ``sigma * dt`` lose whole samples on long rays.
"""

from __future__ import annotations

from typing import Dict, Literal

import torch
from jaxtyping import Float
from nerfstudio.model_components import renderers
from torch import Tensor

from nerfstudio_accel.ops.volume_rendering import composite_along_rays
from nerfstudio_accel.sampling.packed import PackedSamples

BackgroundMode = Literal["random", "white", "black"]
EVAL_BACKGROUND: Dict[str, tuple] = {"random": (1.0, 1.0, 1.0), "white": (1.0, 1.0, 1.0), "black": (0.0, 0.0, 0.0)}
"""Fixed colour used outside training: ``random`` trains on random colours and evaluates on white."""


def render_packed(
    samples: PackedSamples,
    densities: Float[Tensor, "n_samples 1"],
    colors: Float[Tensor, "n_samples 3"],
    background: Float[Tensor, "n_rays 3"],
    backend: str = "torch",
) -> Dict[str, Tensor]:
    """Composite activated densities and colours along packed rays, in fp32.

    Returns ``rgb (n_rays, 3)`` blended over ``background``, ``accumulation (n_rays, 1)``,
    ``depth (n_rays, 1)`` (expected distance of the visible part) and ``weights (n_samples,)``.
    ``backend``: the ops' backend for these tensors (the sampler's, :meth:`Sampler.backend_for
    <nerfstudio_accel.sampling.base.Sampler.backend_for>`).
    """
    device_type = densities.device.type
    with torch.autocast(device_type=device_type, enabled=False):
        sigmas = densities.float().reshape(-1)
        colors = colors.float()
        n_rays, ray_indices = samples.n_rays, samples.ray_indices
        weights, accumulation, rgb, depth = composite_along_rays(
            samples.t_starts, samples.t_ends, sigmas, colors, ray_indices, n_rays, backend=backend
        )
        depth = depth / torch.clamp(accumulation, min=1e-10)
        rgb = rgb + (1.0 - accumulation) * background.float()
    return {"rgb": rgb, "accumulation": accumulation, "depth": depth, "weights": weights}


def background_colors(
    mode: BackgroundMode, n_rays: int, device: torch.device, training: bool
) -> Float[Tensor, "n_rays 3"]:
    """Per-ray background: a uniform random colour per ray when ``mode == 'random'`` and training;
    outside training the colour nerfstudio's viewer or ``ns-render`` asks for through
    ``background_color_override_context``, else the fixed colour of :data:`EVAL_BACKGROUND`."""
    if training:
        if mode == "random":
            return torch.rand(n_rays, 3, device=device)
    elif renderers.BACKGROUND_COLOR_OVERRIDE is not None:
        return renderers.BACKGROUND_COLOR_OVERRIDE.to(device=device, dtype=torch.float32).expand(n_rays, 3)
    return torch.tensor(EVAL_BACKGROUND[mode], device=device).expand(n_rays, 3)


def depth_over_background(
    depth: Float[Tensor, "n_rays 1"],
    accumulation: Float[Tensor, "n_rays 1"],
    origins: Float[Tensor, "n_rays 3"],
    aabb: Float[Tensor, "2 3"],
) -> Float[Tensor, "n_rays 1"]:
    """Expected termination distance with the background as an opaque wall just beyond the scene box
    (distance to the box's centre plus its half diagonal): ``acc * depth + (1 - acc) * wall``.

    ``render_packed``'s depth of an empty ray is 0, "at the camera"; nerfstudio's viewer composites its
    3D scene (camera frustums, the Accel overlays) against the rendered depth, so every node behind an
    empty pixel would be hidden. Rendered for the viewer and ``ns-eval``, not for training."""
    return accumulation * depth + (1.0 - accumulation) * background_wall(origins, aabb)


def background_wall(origins: Float[Tensor, "*rays 3"], aabb: Float[Tensor, "2 3"]) -> Float[Tensor, "*rays 1"]:
    """The distance :func:`depth_over_background` gives the background: from each ray's origin to the box's
    centre, plus the box's half diagonal."""
    low, high = aabb.to(origins).reshape(2, 3)
    centre, half_diagonal = (low + high) / 2, torch.linalg.norm(high - low) / 2
    return torch.linalg.norm(origins - centre, dim=-1, keepdim=True) + half_diagonal


def composite_ground_truth(
    image: Float[Tensor, "*batch channels"], background: Float[Tensor, "*batch 3"]
) -> Float[Tensor, "*batch 3"]:
    """Blend an RGBA target over ``background`` (the same colours the prediction was blended over);
    RGB targets pass through unchanged."""
    if image.shape[-1] == 4:
        alpha = image[..., 3:4]
        return image[..., :3] * alpha + background.to(image) * (1.0 - alpha)
    return image[..., :3]
