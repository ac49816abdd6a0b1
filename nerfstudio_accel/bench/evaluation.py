"""Scoring a pipeline on every view of its evaluation split, in the shape ``ns-eval`` writes.

Every method is scored by the same code: the RGBA target composited over one background (white,
what accel methods and nerfstudio's blender parser evaluate on), so methods that keep or drop
alpha are compared alike, whatever each model's own ``get_image_metrics_and_images`` would do.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, List, Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from nerfstudio_accel.metrics import psnr_and_ssim
from nerfstudio_accel.rendering import composite_ground_truth

ImageScorer = Callable[[Float[Tensor, "H W 3"], Float[Tensor, "H W 3"]], Dict[str, float]]


def mean_and_std(per_view: Sequence[Dict[str, float]]) -> Dict[str, float]:
    """``{key: mean, key_std: std}`` over views, as ``ns-eval``'s ``results`` block (population std,
    so a single view gives 0 rather than NaN)."""
    summary: Dict[str, float] = {}
    for key in per_view[0]:
        values = torch.tensor([view[key] for view in per_view], dtype=torch.float64)
        summary[key] = float(values.mean())
        summary[f"{key}_std"] = float(values.std(unbiased=False))
    return summary


@torch.no_grad()
def evaluate_views(pipeline, score: ImageScorer = psnr_and_ssim, background=(1.0, 1.0, 1.0)) -> Dict[str, float]:
    """Mean and std over every eval view of the image metrics ``score`` returns (PSNR in dB, SSIM,
    LPIPS when the scorer has it) and of render speed (``num_rays_per_sec``, ``fps``), keyed as
    ``ns-eval`` keys them. Render time is measured with the device synchronized."""
    was_training = pipeline.training
    pipeline.eval()
    dataset = pipeline.datamanager.eval_dataset
    device = torch.device(pipeline.device)
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    per_view: List[Dict[str, float]] = []
    for index in range(len(dataset)):
        camera = dataset.cameras[index : index + 1].to(device)
        synchronize()
        start = time.perf_counter()
        rgb = pipeline.model.get_outputs_for_camera(camera)["rgb"]
        synchronize()
        seconds = max(time.perf_counter() - start, 1e-9)
        target = dataset.get_image_float32(index).to(rgb.device)
        view = score(rgb, composite_ground_truth(target, torch.tensor(background, device=rgb.device)))
        view.update(num_rays_per_sec=rgb.shape[0] * rgb.shape[1] / seconds, fps=1.0 / seconds)
        per_view.append(view)
    pipeline.train(was_training)
    return mean_and_std(per_view)
