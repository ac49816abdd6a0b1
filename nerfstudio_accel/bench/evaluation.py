"""Scoring a pipeline on the views of its evaluation split (all, or evenly spaced ones), in the shape ``ns-eval`` writes.

Every method is scored by the same code: the RGBA target composited over one background (white,
what accel methods and nerfstudio's blender parser evaluate on), so methods that keep or drop
alpha are compared alike, whatever each model's own ``get_image_metrics_and_images`` would do.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional, Sequence

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


def evenly_spaced_views(count: Optional[int], total: int) -> List[int]:
    """``count`` view indices spread evenly over ``range(total)``, first and last included:
    ``round(linspace(0, total - 1, count))`` with halves rounded up (so the indices are distinct);
    every view when ``count`` is ``None`` or at least ``total``.

    >>> evenly_spaced_views(5, 20)
    [0, 5, 10, 14, 19]
    >>> evenly_spaced_views(1, 20), evenly_spaced_views(None, 3)
    ([0], [0, 1, 2])
    """
    if count is None or count >= total:
        return list(range(total))
    if count == 1:
        return [0]
    # round(i * (total - 1) / (count - 1)) in integers, halves up: floor((2 i (total - 1) + (count - 1)) / (2 (count - 1)))
    return [(2 * i * (total - 1) + count - 1) // (2 * (count - 1)) for i in range(count)]


@torch.no_grad()
def evaluate_views(
    pipeline, score: ImageScorer = psnr_and_ssim, background=(1.0, 1.0, 1.0), views: Optional[Sequence[int]] = None
) -> Dict[str, float]:
    """Mean and std over the eval views (``views``: their indices; default every view) of the image metrics
    ``score`` returns (PSNR in dB, SSIM, LPIPS when the scorer has it), of render speed (``num_rays_per_sec``,
    ``fps``) and, for models that report it (accel methods, nerfstudio's instant-ngp), of the samples
    marched per ray (``num_samples_per_ray``), keyed as ``ns-eval`` keys them; plus ``views``, how many
    views were scored, of ``views_total``. Render time is measured with the device synchronized."""
    was_training = pipeline.training
    pipeline.eval()
    dataset = pipeline.datamanager.eval_dataset
    device = torch.device(pipeline.device)
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    indices = list(range(len(dataset))) if views is None else list(views)
    per_view: List[Dict[str, float]] = []
    for index in indices:
        camera = dataset.cameras[index : index + 1].to(device)
        synchronize()
        start = time.perf_counter()
        outputs = pipeline.model.get_outputs_for_camera(camera)
        rgb = outputs["rgb"]
        synchronize()
        seconds = max(time.perf_counter() - start, 1e-9)
        target = dataset.get_image_float32(index).to(rgb.device)
        view = score(rgb, composite_ground_truth(target, torch.tensor(background, device=rgb.device)))
        view.update(num_rays_per_sec=rgb.shape[0] * rgb.shape[1] / seconds, fps=1.0 / seconds)
        if "num_samples_per_ray" in outputs:
            view["num_samples_per_ray"] = float(outputs["num_samples_per_ray"].float().mean())
        per_view.append(view)
    pipeline.train(was_training)
    return {**mean_and_std(per_view), "views": len(indices), "views_total": len(dataset)}
