"""Pixel samplers that draw from their own random generator, and say which batch sizes they draw exactly.

nerfstudio's :class:`~nerfstudio.data.pixel_samplers.PixelSampler` draws pixels from torch's (and python's)
global generator, which the training step also draws from (stratified sampling, random backgrounds,
hard-sample draws). A batch prepared ahead on another thread would then depend on how the two threads
interleave. Here every draw of every sampling path (uniform, masks by rejection or by index, fisheye,
equirectangular, patches) comes from the sampler's generator, with nerfstudio's distributions, so the
stream of batches is a function of the seed alone, prepared ahead or not.

When the photos differ in size nerfstudio hands the sampler lists of images (``variable_res_collate``) and
splits each batch into even shares per photo; :meth:`SeededPixelSampler.valid_num_rays_per_batch` gives
the batch sizes that still draw exactly, and :meth:`~SeededPixelSampler.set_num_rays_per_batch` keeps to them.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Optional, Type, Union

import torch
from jaxtyping import Int, Shaped
from nerfstudio.data.pixel_samplers import PatchPixelSampler, PatchPixelSamplerConfig, PixelSampler, PixelSamplerConfig
from nerfstudio.data.utils.pixel_sampling_utils import erode_mask
from torch import Tensor

Device = Union[torch.device, str]


@dataclass
class SeededPixelSamplerConfig(PixelSamplerConfig):
    """nerfstudio's pixel sampler with a generator of its own."""

    _target: Type = field(default_factory=lambda: SeededPixelSampler)


class SeededPixelSampler(PixelSampler):
    """nerfstudio's pixel sampler drawing from :attr:`generator`, seeded from torch's global generator when
    the sampler is made (nerfstudio's launcher seeds rank ``r`` with ``seed + r``, so ranks draw different
    pixels). Draws are made on the CPU and moved to the images' device.

    ``variable_resolution``: the images come as lists of different sizes (nerfstudio's
    ``variable_res_collate``), ``images_per_batch`` of them per image batch."""

    config: SeededPixelSamplerConfig

    def __init__(
        self, config: PixelSamplerConfig, variable_resolution: bool = False, images_per_batch: int = 1, **kwargs
    ) -> None:
        self.variable_resolution = variable_resolution
        self.images_per_batch = images_per_batch
        self.generator = torch.Generator().manual_seed(int(torch.randint(0, 2**62, (1,))))
        super().__init__(config, **kwargs)

    def batch_size_step(self) -> int:
        """The batch sizes this sampler draws exactly are the multiples of this: any size for images of one
        size, even ones for lists of images (nerfstudio splits the batch into even shares per image)."""
        return 2 if self.variable_resolution else 1

    def valid_num_rays_per_batch(self, wanted: int) -> int:
        """The largest batch size up to ``wanted`` that this sampler draws exactly (the smallest one if none is)."""
        step = self.batch_size_step()
        return max(step, wanted // step * step)

    def set_num_rays_per_batch(self, num_rays_per_batch: int) -> None:
        """Draw :meth:`valid_num_rays_per_batch` of ``num_rays_per_batch`` rays per batch from now on."""
        self.num_rays_per_batch = self.valid_num_rays_per_batch(num_rays_per_batch)

    def _uniform(self, size: tuple) -> Tensor:
        """``size`` uniform draws in [0, 1) from :attr:`generator`, on the CPU."""
        return torch.rand(size, generator=self.generator)

    def _uniform_pixels(
        self, count: int, num_images: int, image_height: int, image_width: int
    ) -> Int[Tensor, "count 3"]:
        """``(count, 3)`` pixels ``(image, row, column)`` drawn uniformly, on the CPU."""
        return (self._uniform((count, 3)) * torch.tensor([num_images, image_height, image_width])).long()

    def _pixels_by_index(self, mask: Shaped[Tensor, "num_images H W"], count: int) -> Int[Tensor, "count 3"]:
        """``(count, 3)`` distinct pixels drawn uniformly among the pixels ``mask`` keeps, on ``mask``'s device."""
        candidates = torch.nonzero(mask, as_tuple=False)
        if candidates.shape[0] < count:
            raise ValueError(f"the mask keeps {candidates.shape[0]} pixels, fewer than the {count} to draw")
        chosen = torch.randperm(candidates.shape[0], generator=self.generator)[:count]
        return candidates[chosen.to(candidates.device)]

    def rejection_sample_mask(  # type: ignore[override]
        self,
        mask: Shaped[Tensor, "num_images H W"],
        num_samples: int,
        num_images: int,
        image_height: int,
        image_width: int,
        device: Device,
    ) -> Int[Tensor, "num_samples 3"]:
        """``(num_samples, 3)`` pixels among those ``mask`` keeps, on ``device``: uniform draws, redrawing
        those outside the mask up to ``max_num_iterations`` times; if some are still outside, nerfstudio's
        fallback (a warning, then draws by index from now on)."""
        keeps = mask.bool().cpu()
        indices = self._uniform_pixels(num_samples, num_images, image_height, image_width)
        for _ in range(self.config.max_num_iterations):
            outside = ~keeps[indices[:, 0], indices[:, 1], indices[:, 2]]
            redraw = int(outside.sum())
            if redraw == 0:
                return indices.to(device)
            indices[outside] = self._uniform_pixels(redraw, num_images, image_height, image_width)
        warnings.warn(
            "masked sampling failed (the mask is empty or mostly empty); drawing pixels by index from now on "
            "(--pipeline.datamanager.pixel-sampler.rejection-sample-mask False skips the attempts)"
        )
        self.config.rejection_sample_mask = False
        return self._pixels_by_index(keeps, num_samples).to(device)

    def _pixels_in_mask(
        self, mask: Shaped[Tensor, "num_images H W"], count: int, device: Device
    ) -> Int[Tensor, "count 3"]:
        """``(count, 3)`` pixels among those ``mask`` keeps, by rejection or by index as configured."""
        if self.config.rejection_sample_mask:
            num_images, image_height, image_width = mask.shape
            return self.rejection_sample_mask(mask, count, num_images, image_height, image_width, device)
        return self._pixels_by_index(mask, count).to(device)

    def sample_method(
        self,
        batch_size: int,
        num_images: int,
        image_height: int,
        image_width: int,
        mask: Optional[Tensor] = None,
        device: Device = "cpu",
    ) -> Int[Tensor, "batch_size 3"]:
        """``(batch_size, 3)`` pixels ``(image, row, column)`` on ``device``: uniform, or among those the
        ``(num_images, H, W, 1)`` ``mask`` keeps."""
        if isinstance(mask, Tensor) and not self.config.ignore_mask:
            return self._pixels_in_mask(mask[..., 0], batch_size, device)
        return self._uniform_pixels(batch_size, num_images, image_height, image_width).to(device)

    def sample_method_equirectangular(
        self,
        batch_size: int,
        num_images: int,
        image_height: int,
        image_width: int,
        mask: Optional[Tensor] = None,
        device: Device = "cpu",
    ) -> Int[Tensor, "batch_size 3"]:
        """Pixels uniform on the sphere: rows by polar angle with density ``sin / 2``, columns uniform (as
        nerfstudio: with a mask, :meth:`sample_method`)."""
        if isinstance(mask, Tensor) and not self.config.ignore_mask:
            return self.sample_method(batch_size, num_images, image_height, image_width, mask=mask, device=device)
        image, polar, azimuth = self._uniform((3, batch_size))
        polar = torch.acos(1 - 2 * polar) / torch.pi
        fractions = torch.stack((image, polar, azimuth), dim=-1)
        return torch.floor(fractions * torch.tensor([num_images, image_height, image_width])).long().to(device)

    def sample_method_fisheye(
        self,
        batch_size: int,
        num_images: int,
        image_height: int,
        image_width: int,
        mask: Optional[Tensor] = None,
        device: Device = "cpu",
    ) -> Int[Tensor, "batch_size 3"]:
        """Pixels uniform in the crop circle of radius ``fisheye_crop_radius`` about the image centre,
        redrawing those off the image (as nerfstudio: with a mask, :meth:`sample_method`)."""
        if isinstance(mask, Tensor) and not self.config.ignore_mask:
            return self.sample_method(batch_size, num_images, image_height, image_width, mask=mask, device=device)
        assert self.config.fisheye_crop_radius is not None
        indices = torch.zeros((batch_size, 3), dtype=torch.long)
        missing = torch.ones(batch_size, dtype=torch.bool)
        while missing.any():
            count = int(missing.sum())
            radius_draw, angle_draw = self._uniform((2, count))
            radii, angles = self.config.fisheye_crop_radius * torch.sqrt(radius_draw), 2.0 * torch.pi * angle_draw
            rows = (radii * torch.sin(angles) + image_height // 2).long()
            columns = (radii * torch.cos(angles) + image_width // 2).long()
            images = torch.randint(0, num_images, (count,), generator=self.generator)
            drawn = missing.clone()
            indices[drawn] = torch.stack([images, rows, columns], dim=-1)
            missing[drawn] = (rows < 0) | (rows >= image_height) | (columns < 0) | (columns >= image_width)
        return indices.to(device)


@dataclass
class SeededPatchPixelSamplerConfig(PatchPixelSamplerConfig):
    """nerfstudio's patch sampler with a generator of its own."""

    _target: Type = field(default_factory=lambda: SeededPatchPixelSampler)


class SeededPatchPixelSampler(SeededPixelSampler, PatchPixelSampler):
    """nerfstudio's sampler of square ``patch_size`` patches, drawing from :attr:`generator`."""

    config: SeededPatchPixelSamplerConfig  # type: ignore[assignment]

    def batch_size_step(self) -> int:
        """Whole patches; for lists of images, whole patches in each image's even share, which holds for
        multiples of ``images_per_batch * lcm(2, patch_size**2)`` (equal shares)."""
        patch = self.config.patch_size**2
        return self.images_per_batch * math.lcm(2, patch) if self.variable_resolution else patch

    def sample_method(
        self,
        batch_size: int,
        num_images: int,
        image_height: int,
        image_width: int,
        mask: Optional[Tensor] = None,
        device: Device = "cpu",
    ) -> Int[Tensor, "batch_size 3"]:
        """``batch_size // patch_size**2`` patches, their pixels ``(image, row, column)`` patch by patch in
        row-major order, on ``device``: top-left corners uniform, or patch centres among the pixels the
        ``(num_images, H, W, 1)`` ``mask`` keeps after eroding it by half a patch."""
        size = self.config.patch_size
        count = batch_size // size**2
        if isinstance(mask, Tensor) and not self.config.ignore_mask:
            half = size // 2
            eroded = erode_mask(mask.permute(0, 3, 1, 2).float(), pixel_radius=half)[:, 0]
            corners = self._pixels_in_mask(eroded, count, "cpu") - torch.tensor([0, half, half])
        else:
            corners = self._uniform_pixels(count, num_images, image_height - size, image_width - size)
        rows, columns = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
        offsets = torch.stack([torch.zeros_like(rows), rows, columns], dim=-1).view(1, size * size, 3)
        return (corners.view(count, 1, 3) + offsets).view(count * size * size, 3).to(device)
