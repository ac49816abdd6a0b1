"""A ray composited front to back over the blocks of a split scene, from each block's render of its own part.

A block renders only its own samples of a ray, from a transmittance of 1 where the ray enters its cell. That gives
a colour ``C_k`` (premultiplied, no background), an opacity ``A_k`` (its weights' sum, ``1 - T_k``) and a weighted
distance ``D_k``. The ray's result sums the blocks in the order the ray crosses them:
``C = sum_k (prod_{j before k} T_j) C_k``, and ``A`` and ``D`` alike, with the background added once. Those are the
sums the merged samples give. Autograd carries the loss's gradient through the formula to each block's
``C_k, A_k, D_k``, so a rank that holds one block can take the others' results as constants
(:func:`gather_block_renders`) and backpropagate through its own samples only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

import torch
from jaxtyping import Float
from torch import Tensor

from nerfstudio_accel import distributed
from nerfstudio_accel.ops.packed_scan import first_distance_of_each_ray
from nerfstudio_accel.ops.volume_rendering import accumulate_along_rays, render_weight_from_density
from nerfstudio_accel.sampling.packed import PackedSamples

FLOATS_PER_RAY = 7
"""What one block shares per ray: colour (3), opacity, weighted distance, entry distance and sample count."""


@dataclass
class BlockRender:
    """One block's render of a batch of ``n`` rays over its own samples."""

    rgb: Float[Tensor, "n 3"]
    """Premultiplied colour, no background."""
    opacity: Float[Tensor, " n"]
    """The sum of the block's weights, ``1 - T_k``."""
    depth: Float[Tensor, " n"]
    """The weights' sum of sample distances (not divided by the opacity)."""
    entry: Float[Tensor, " n"]
    """Distance of the block's first sample on each ray; ``inf`` on a ray without one."""
    samples: Float[Tensor, " n"]
    """The block's samples on each ray (exact in float32 up to 2^24)."""
    weights: Optional[Float[Tensor, " n_samples"]] = None
    """The rendering weights of the block's own samples, from a transmittance of 1 where each ray enters the cell
    (kept by the rank that rendered them; not shared)."""

    def flat(self) -> Float[Tensor, "n 7"]:
        columns = [self.opacity, self.depth, self.entry, self.samples]
        return torch.cat([self.rgb, torch.stack(columns, dim=-1)], dim=-1)

    @staticmethod
    def from_flat(rows: Float[Tensor, "n 7"]) -> "BlockRender":
        return BlockRender(rows[:, :3], rows[:, 3], rows[:, 4], rows[:, 5], rows[:, 6])


def render_block(
    samples: PackedSamples,
    densities: Float[Tensor, "n_samples 1"],
    colors: Float[Tensor, "n_samples 3"],
    backend: str = "torch",
) -> BlockRender:
    """A block's :class:`BlockRender` of its own ``samples`` (ray-sorted, front to back), in fp32."""
    with torch.autocast(device_type=densities.device.type, enabled=False):
        n_rays, ray_indices = samples.n_rays, samples.ray_indices
        weights = render_weight_from_density(
            samples.t_starts, samples.t_ends, densities.float().reshape(-1), ray_indices, n_rays, backend=backend
        )
        return BlockRender(
            rgb=accumulate_along_rays(weights, colors.float(), ray_indices, n_rays),
            opacity=accumulate_along_rays(weights, None, ray_indices, n_rays).reshape(-1),
            depth=accumulate_along_rays(weights, samples.t_mids[:, None], ray_indices, n_rays).reshape(-1),
            entry=first_distance_of_each_ray(ray_indices, samples.t_starts, n_rays),
            samples=samples.samples_per_ray().float(),
            weights=weights,
        )


def transmittance_in_front(blocks: List[BlockRender]) -> Float[Tensor, "k n"]:
    """Per block and ray, the transmittance of the blocks the ray crosses before it (in the order of their entry
    distances): ``prod_{j before k} T_j``; a block's weights times it are its samples' weights in the whole ray."""
    entry = torch.stack([block.entry for block in blocks])  # (k, n)
    order = torch.argsort(entry, dim=0, stable=True)
    transmittance = torch.gather(torch.stack([1.0 - block.opacity for block in blocks]), 0, order)
    before_sorted = torch.cat([torch.ones_like(transmittance[:1]), torch.cumprod(transmittance[:-1], dim=0)])
    return torch.empty_like(before_sorted).scatter(0, order, before_sorted)  # back in block order


def composite_blocks(blocks: List[BlockRender], background: Float[Tensor, "n 3"]) -> Dict[str, Tensor]:
    """The rays' ``rgb (n, 3)`` over ``background``, ``accumulation (n, 1)`` and ``depth (n, 1)`` (the visible
    part's expected distance), as :func:`~nerfstudio_accel.rendering.render_packed` gives them for the blocks'
    samples merged; each ray takes its blocks in the order of their entry distances."""
    before = transmittance_in_front(blocks)
    rgb = sum(before[k, :, None] * block.rgb for k, block in enumerate(blocks))
    accumulation = sum(before[k] * block.opacity for k, block in enumerate(blocks))[:, None]
    depth = sum(before[k] * block.depth for k, block in enumerate(blocks))[:, None]
    return {
        "rgb": rgb + (1.0 - accumulation) * background.float(),
        "accumulation": accumulation,
        "depth": depth / torch.clamp(accumulation, min=1e-10),
    }


def gather_block_renders(own: BlockRender) -> List[BlockRender]:
    """Every rank's block render of the same rays, rank ``r``'s at index ``r``: this rank's ``own`` as given (its
    graph kept), the others' as constants; ``[own]`` in one process. One all-gather of
    :data:`FLOATS_PER_RAY` floats per ray."""
    renders = [BlockRender.from_flat(rows) for rows in distributed.gather_rows(own.flat())]
    renders[distributed.rank()] = own
    return renders
