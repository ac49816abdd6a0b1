"""Point sets the Accel panel draws into the viewer's 3D scene (all in nerfstudio world coordinates;
the panel scales them to viser's).

- :func:`occupied_cell_centres`: the finest level's occupied cells of an occupancy grid (and
  :func:`finest_cell_size`, their size);
- :func:`centre_ray_samples`: where the proposal sampler puts the main field's samples on one ray;
- :func:`hard_sample_points`: the last mined batch's samples with their ray's share of hard samples;
- :func:`share_colours`: a blue-to-red ramp for shares in ``[0, 1]``.

Every set is subsampled to at most ``max_points`` with a fixed generator, so a redraw of the same state
draws the same points and a dense grid cannot flood the browser.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from nerfstudio_accel.sampling.occupancy import OccupancySampler


def subsample(count: int, max_points: int, seed: int = 0) -> Tensor:
    """Indices of at most ``max_points`` of ``count`` items, sorted, the same for the same arguments."""
    if count <= max_points:
        return torch.arange(count)
    generator = torch.Generator().manual_seed(seed)
    return torch.randperm(count, generator=generator)[:max_points].sort().values


@torch.no_grad()
def occupied_cell_centres(sampler: OccupancySampler, max_points: int) -> Float[Tensor, "n 3"]:
    """Centres of the occupied cells of the grid's finest level (level 0, the scene box), at most
    ``max_points`` of them, on the CPU."""
    binaries = sampler.grid.binaries[0].cpu()  # (R, R, R)
    aabb = sampler.grid.aabbs[0].cpu().float()
    cells = torch.nonzero(binaries)
    cells = cells[subsample(cells.shape[0], max_points)]
    resolution = torch.tensor(binaries.shape, dtype=torch.float32)
    return aabb[:3] + (cells.float() + 0.5) / resolution * (aabb[3:] - aabb[:3])


def finest_cell_size(sampler: OccupancySampler) -> float:
    """Edge of the smallest cell of the grid's finest level, in world units."""
    aabb = sampler.grid.aabbs[0].cpu().float()
    return float(((aabb[3:] - aabb[:3]) / torch.tensor(sampler.grid.binaries.shape[1:])).min())


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
