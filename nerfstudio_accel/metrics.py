"""Image metrics that work offline: PSNR and SSIM always, LPIPS only when its weights are on disk.

torchmetrics' LPIPS ships its linear heads but builds AlexNet from torchvision, which downloads
ImageNet weights on first use. Offline that download raises and takes the whole run with it, so
LPIPS is built only when the AlexNet checkpoint already sits in torch's hub cache; elsewhere a stand-in
scores NaN. :func:`lpips_without_downloads` gives nerfstudio's own models the same.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Dict, Iterator

import torch
from jaxtyping import Float
from torch import Tensor, nn
from torchmetrics.functional import structural_similarity_index_measure

logger = logging.getLogger(__name__)


def alexnet_checkpoint_path() -> str:
    """Where torchvision keeps (or would download) the AlexNet ImageNet weights LPIPS needs."""
    from torchvision.models import AlexNet_Weights

    file_name = os.path.basename(AlexNet_Weights.IMAGENET1K_V1.url)
    return os.path.join(torch.hub.get_dir(), "checkpoints", file_name)


class UnavailableLPIPS(nn.Module):
    """Stands in for LPIPS where its weights are not on disk: every score is NaN."""

    def forward(self, *args, **kwargs) -> Tensor:
        return torch.tensor(float("nan"))


def load_lpips(normalize: bool = True) -> nn.Module:
    """LPIPS (AlexNet) when its weights are present locally, else :class:`UnavailableLPIPS` with one warning."""
    path = alexnet_checkpoint_path()
    if not os.path.exists(path):
        logger.warning(
            "LPIPS disabled: AlexNet weights not found at %s (offline); psnr and ssim are still reported", path
        )
        return UnavailableLPIPS()
    from torchmetrics.image.lpip import LearnedPerceptualImagePatchSimilarity

    return LearnedPerceptualImagePatchSimilarity(normalize=normalize)


@contextlib.contextmanager
def lpips_without_downloads() -> Iterator[None]:
    """While nerfstudio builds a model: its LPIPS constructor (torchmetrics' class, as every loaded nerfstudio
    module names it) gives :func:`load_lpips` instead of downloading AlexNet."""
    import torchmetrics.image.lpip as lpip_module

    original = lpip_module.LearnedPerceptualImagePatchSimilarity
    holders = [lpip_module] + [
        module
        for name, module in list(sys.modules.items())
        if name.startswith("nerfstudio.") and getattr(module, "LearnedPerceptualImagePatchSimilarity", None) is original
    ]
    for module in holders:
        module.LearnedPerceptualImagePatchSimilarity = lambda *args, normalize=False, **kwargs: load_lpips(normalize)
    try:
        yield
    finally:
        for module in holders:
            module.LearnedPerceptualImagePatchSimilarity = original


def psnr_and_ssim(prediction: Float[Tensor, "H W 3"], target: Float[Tensor, "H W 3"]) -> Dict[str, float]:
    """PSNR (dB) and SSIM of one image pair with values in ``[0, 1]`` (the prediction is clamped)."""
    pred = torch.moveaxis(prediction.float().clamp(0.0, 1.0), -1, 0)[None]
    gt = torch.moveaxis(target.float(), -1, 0)[None]
    return {
        "psnr": float(-10.0 * torch.log10(torch.mean((pred - gt) ** 2))),
        "ssim": float(structural_similarity_index_measure(pred, gt, data_range=1.0)),
    }


class ImageMetrics(nn.Module):
    """PSNR, SSIM and (when available) LPIPS of a rendered image against its target."""

    def __init__(self) -> None:
        super().__init__()
        self.lpips = load_lpips()

    def forward(self, prediction: Float[Tensor, "H W 3"], target: Float[Tensor, "H W 3"]) -> Dict[str, float]:
        """Scalar metrics of one image pair with values in ``[0, 1]``."""
        metrics = psnr_and_ssim(prediction, target)
        if not isinstance(self.lpips, UnavailableLPIPS):
            pred = torch.moveaxis(prediction.float().clamp(0.0, 1.0), -1, 0)[None]
            metrics["lpips"] = float(self.lpips(pred, torch.moveaxis(target.float(), -1, 0)[None]))
        return metrics
