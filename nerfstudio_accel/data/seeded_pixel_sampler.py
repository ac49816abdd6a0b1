"""A pixel sampler that draws from its own random generator.

nerfstudio's :class:`~nerfstudio.data.pixel_samplers.PixelSampler` draws pixels from torch's global
generator, which the training step also draws from (stratified sampling, random backgrounds, hard-sample
draws). A batch prepared ahead on another thread would then depend on how the two threads interleave.
With its own generator the stream of batches is a function of the seed alone, prepared ahead or not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Type, Union

import torch
from jaxtyping import Int
from nerfstudio.data.pixel_samplers import PixelSampler, PixelSamplerConfig
from torch import Tensor


@dataclass
class SeededPixelSamplerConfig(PixelSamplerConfig):
    """nerfstudio's pixel sampler with a generator of its own."""

    _target: Type = field(default_factory=lambda: SeededPixelSampler)


class SeededPixelSampler(PixelSampler):
    """Uniform pixel draws (and draws among a mask's pixels) from :attr:`generator`, seeded from torch's
    global generator when the sampler is made (nerfstudio's launcher seeds rank ``r`` with ``seed + r``,
    so ranks draw different pixels). Rejection sampling of masks and fisheye or equirectangular cameras
    keep nerfstudio's global-generator draws."""

    config: SeededPixelSamplerConfig

    def __init__(self, config: SeededPixelSamplerConfig, **kwargs) -> None:
        super().__init__(config, **kwargs)
        self.generator = torch.Generator().manual_seed(int(torch.randint(0, 2**62, (1,))))

    def sample_method(
        self,
        batch_size: int,
        num_images: int,
        image_height: int,
        image_width: int,
        mask: Optional[Tensor] = None,
        device: Union[torch.device, str] = "cpu",
    ) -> Int[Tensor, "batch_size 3"]:
        """``(batch_size, 3)`` pixel indices ``(image, row, column)`` on ``device``."""
        if isinstance(mask, Tensor) and not self.config.ignore_mask:
            if self.config.rejection_sample_mask:
                return super().sample_method(batch_size, num_images, image_height, image_width, mask, device)
            candidates = torch.nonzero(mask[..., 0], as_tuple=False)
            chosen = torch.randperm(candidates.shape[0], generator=self.generator)[:batch_size]
            return candidates[chosen.to(candidates.device)].to(device)
        extent = torch.tensor([num_images, image_height, image_width])
        return (torch.rand((batch_size, 3), generator=self.generator) * extent).long().to(device)
