"""PackedSamples: a flat batch of ray intervals, the geometry sampler, field and renderer share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from jaxtyping import Float, Int
from torch import Tensor


@dataclass
class PackedSamples:
    """Samples of ``n_rays`` rays packed into one flat list, sorted by ray: geometry only.

    ``ray_indices, t_starts, t_ends``: ``(n_samples,)``; ``origins, directions``: ``(n_rays, 3)``;
    ``camera_indices``: ``(n_rays,)`` training image of each ray (appearance embeddings), or None.
    What a sampler or model computed on the way (proposal rounds, the culling pass's encodings) stays with them.
    """

    ray_indices: Int[Tensor, " n_samples"]
    t_starts: Float[Tensor, " n_samples"]
    t_ends: Float[Tensor, " n_samples"]
    origins: Float[Tensor, "n_rays 3"]
    directions: Float[Tensor, "n_rays 3"]
    camera_indices: Optional[Int[Tensor, " n_rays"]] = None

    @property
    def n_rays(self) -> int:
        return self.origins.shape[0]

    @property
    def n_samples(self) -> int:
        return self.t_starts.shape[0]

    @property
    def t_mids(self) -> Float[Tensor, " n_samples"]:
        return 0.5 * (self.t_starts + self.t_ends)

    @property
    def positions(self) -> Float[Tensor, "n_samples 3"]:
        """World-space interval midpoints."""
        return self.origins[self.ray_indices] + self.directions[self.ray_indices] * self.t_mids[:, None]

    @property
    def sample_directions(self) -> Float[Tensor, "n_samples 3"]:
        return self.directions[self.ray_indices]

    @property
    def sample_camera_indices(self) -> Optional[Int[Tensor, " n_samples"]]:
        return None if self.camera_indices is None else self.camera_indices[self.ray_indices]

    def samples_per_ray(self) -> Int[Tensor, " n_rays"]:
        return torch.bincount(self.ray_indices, minlength=self.n_rays)

    def subset(self, index: Int[Tensor, " m"]) -> "PackedSamples":
        """The samples at ``index`` (kept sorted if ``index`` is sorted), same rays."""
        return PackedSamples(
            self.ray_indices[index],
            self.t_starts[index],
            self.t_ends[index],
            self.origins,
            self.directions,
            self.camera_indices,
        )

    def on_rays(
        self,
        origins: Float[Tensor, "n_rays 3"],
        directions: Float[Tensor, "n_rays 3"],
        camera_indices: Optional[Int[Tensor, " n_rays"]],
    ) -> "PackedSamples":
        """The same intervals along other rays of the same count (e.g. the rays before pose correction)."""
        return PackedSamples(self.ray_indices, self.t_starts, self.t_ends, origins, directions, camera_indices)
