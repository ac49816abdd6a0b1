"""Point sets the Accel panel draws into the viewer's 3D scene (all in nerfstudio world coordinates;
the panel scales them to viser's).

- :func:`sampler_state_points`: a sampler's own state (the occupancy grid's occupied cells) and their size;
- :func:`centre_ray_samples`: where a sampler (e.g. the proposal sampler) puts the main field's samples on one ray;
- :func:`hard_sample_points`: the last mined batch's samples with their ray's share of hard samples;
- :func:`share_colours`: a blue-to-red ramp for shares in ``[0, 1]``;
- :func:`box_outline`: the twelve edges of a cell of a split scene as one straight-edged spline.

Every set is subsampled to at most ``max_points`` with a fixed generator, so a redraw of the same state
draws the same points and a dense grid cannot flood the browser.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from nerfstudio_accel.sampling.base import Sampler


def subsample(count: int, max_points: int, seed: int = 0) -> Tensor:
    """Indices of at most ``max_points`` of ``count`` items, sorted, the same for the same arguments."""
    if count <= max_points:
        return torch.arange(count)
    generator = torch.Generator().manual_seed(seed)
    return torch.randperm(count, generator=generator)[:max_points].sort().values


def sampler_state_points(sampler: Sampler, max_points: int) -> Tuple[Float[Tensor, "n 3"], float]:
    """At most ``max_points`` of the points of ``sampler``'s :meth:`~Sampler.state_overlay`, on the CPU, and the
    size of the cell each stands for."""
    overlay = sampler.state_overlay()
    return overlay.points[subsample(overlay.points.shape[0], max_points)], overlay.cell_size


@torch.no_grad()
def centre_ray_samples(model, origin: Float[Tensor, "3"], direction: Float[Tensor, "3"]) -> Float[Tensor, "n 3"]:
    """The main field's sample midpoints that ``model``'s proposal sampler picks on one ray (evaluation
    mode: no jitter), on the CPU."""
    from nerfstudio.cameras.rays import RayBundle

    device = model.device
    direction = direction / torch.linalg.norm(direction)
    bundle = RayBundle(
        origins=origin.reshape(1, 3).float().to(device),
        directions=direction.reshape(1, 3).float().to(device),
        pixel_area=torch.ones(1, 1, device=device),
        camera_indices=torch.zeros(1, 1, dtype=torch.long, device=device),
    )
    was_training = model.training
    model.eval()
    try:
        samples = model.sample(bundle)
    finally:
        model.train(was_training)
    return samples.positions.cpu()


@torch.no_grad()
def hard_sample_points(
    ray_indices: Int[Tensor, " B"],
    positions: Float[Tensor, "B 3"],
    n_rays: int,
    hard: Int[Tensor, " b"],
    max_points: int,
) -> Tuple[Float[Tensor, "n 3"], Float[Tensor, " n"]]:
    """Positions of a mined batch's samples and, for each, the share of its ray's samples that were
    drawn as hard (``hard``: indices into the batch), at most ``max_points``, on the CPU."""
    if ray_indices.numel() == 0:
        return torch.zeros(0, 3), torch.zeros(0)
    per_ray = torch.bincount(ray_indices, minlength=n_rays).float()
    hard_per_ray = torch.bincount(ray_indices[hard], minlength=n_rays).float()
    share = hard_per_ray / per_ray.clamp(min=1.0)
    keep = subsample(ray_indices.numel(), max_points).to(ray_indices.device)
    return positions[keep].cpu().float(), share[ray_indices[keep]].cpu()


def share_colours(share: Float[Tensor, " n"]) -> np.ndarray:
    """``(n, 3)`` uint8 colours from blue (share 0) to red (share 1)."""
    share = share.clamp(0.0, 1.0).numpy()
    return np.stack([255 * share, 64 * np.ones_like(share), 255 * (1.0 - share)], axis=-1).astype(np.uint8)


BLOCK_COLOURS = ((230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180), (70, 240, 240),
                 (240, 50, 230), (128, 128, 0))  # fmt: skip
"""One colour per block of a split scene (at most :data:`~nerfstudio_accel.spatial.cells.MAX_BLOCKS`)."""

BOX_EDGE_PATH = (0, 1, 3, 2, 0, 4, 5, 1, 5, 7, 3, 7, 6, 2, 6, 4)
"""Corners of a box (bit ``i`` of a corner's index: its axis ``i`` at the max) in an order that walks all twelve
edges, three of them twice."""


def box_outline(box: Float[Tensor, "2 3"]) -> Tuple[np.ndarray, np.ndarray]:
    """The edges of ``box`` (min and max corner) as a cubic Bezier spline: its 16 key points and, per piece, two
    control points on the piece's own ends (``(30, 3)``), which make every piece straight."""
    box = box.detach().cpu().double().numpy()
    corners = np.array([[box[(index >> axis) & 1, axis] for axis in range(3)] for index in range(8)])
    path = corners[list(BOX_EDGE_PATH)]
    controls = np.stack([path[:-1], path[1:]], axis=1).reshape(-1, 3)
    return path.astype(np.float32), controls.astype(np.float32)
