"""Image metrics that work offline: PSNR and SSIM always, LPIPS only when its weights are on disk.

torchmetrics' LPIPS ships its linear heads but builds AlexNet from torchvision, which downloads
ImageNet weights on first use. Offline that download raises and takes the whole run with it, so
LPIPS is built only when the AlexNet checkpoint already sits in torch's hub cache.
"""

from __future__ import annotations

import logging
import os
from typing import Dict, Optional

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


def load_lpips() -> Optional[nn.Module]:
    """LPIPS (AlexNet) when its weights are present locally, else ``None`` with one warning."""
    path = alexnet_checkpoint_path()
    if not os.path.exists(path):
        logger.warning("LPIPS disabled: AlexNet weights not found at %s (offline); psnr and ssim are still reported", path)
        return None
    from torchmetrics.image.lpip import LearnedPerceptualImagePatchSimilarity

    return LearnedPerceptualImagePatchSimilarity(normalize=True)


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
        if self.lpips is not None:
            pred = torch.moveaxis(prediction.float().clamp(0.0, 1.0), -1, 0)[None]
            metrics["lpips"] = float(self.lpips(pred, torch.moveaxis(target.float(), -1, 0)[None]))
        return metrics
