"""Where a split scene loses PSNR: test-view error near the split plane against elsewhere, for runs opened from their
config.yml (one model and a K-block model trained alike).

    python benchmarks/seam_error.py --band 0.1 RUN_CONFIG.yml [RUN_CONFIG.yml ...]

Every test view is rendered; each pixel goes to one region by its rendered surface point (the visible part's expected
depth): ``seam`` for pixels with opacity above 0.5 within ``--band`` world units of a plane between cells of the
first K-block run given, ``surface`` for the other pixels with opacity above 0.5, ``background`` for the rest. A
plane is taken whole, across the box: right for 2 blocks; with more, a plane that bounds only some cells also
marks pixels beside cells it does not bound. Regions come from the split run's renders, so every
run is scored on the same pixels. Prints one markdown table: PSNR per region per run, and each region's pixel count.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Dict, List

import torch
from nerfstudio.utils.eval_utils import eval_setup

from nerfstudio_accel.rendering import EVAL_BACKGROUND, background_wall, composite_ground_truth


def split_planes(model) -> List[tuple]:
    """``(axis, coordinate)`` of every internal face between the model's cells; none for one model."""
    cells = getattr(model.field, "cells", None)
    if cells is None:
        return []
    cells = cells.cpu()
    lower, upper = cells[:, 0].amin(dim=0), cells[:, 1].amax(dim=0)
    planes = set()
    for axis in range(3):
        for value in cells[:, :, axis].reshape(-1).tolist():
            if lower[axis] < value < upper[axis]:
                planes.add((axis, value))
    return sorted(planes)


@torch.no_grad()
def render_test_views(config_path: Path):
    """Per test view: ``rgb (h, w, 3)``, the ground truth over the run's evaluation background, the surface points
    ``(h, w, 3)`` (the visible part's expected depth, without the background wall that evaluation adds) and
    opacity."""
    _, pipeline, _, _ = eval_setup(config_path, test_mode="test")
    dataset = pipeline.datamanager.eval_dataset
    background = torch.tensor(EVAL_BACKGROUND[pipeline.model.background_mode])
    aabb = pipeline.model.scene_box.aabb.cpu()
    views = []
    for index in range(len(dataset)):
        camera = dataset.cameras[index : index + 1].to(pipeline.device)
        outputs = pipeline.model.get_outputs_for_camera(camera)
        rays = camera.generate_rays(camera_indices=0)
        image = dataset.get_image_float32(index)
        if image.shape[-1] == 4:
            image = composite_ground_truth(image, background.expand(*image.shape[:2], 3))
        origins, opacity = rays.origins.cpu(), outputs["accumulation"].cpu()
        visible = (outputs["depth"].cpu() - (1.0 - opacity) * background_wall(origins, aabb)) / opacity.clamp(min=1e-6)
        points = origins + rays.directions.cpu() * visible
        views.append((outputs["rgb"].cpu(), image[..., :3], points, opacity[..., 0]))
    return pipeline.model, views


def psnr(squared_error_sum: float, count: int) -> float:
    if count == 0:
        return float("nan")
    return -10.0 * math.log10(squared_error_sum / (3 * count)) if squared_error_sum > 0 else float("inf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="+", type=Path)
    parser.add_argument("--band", type=float, default=0.1, help="world units either side of a split plane")
    args = parser.parse_args()
    runs = [(path, *render_test_views(path)) for path in args.configs]
    planes = next((split_planes(model) for _, model, _ in runs if split_planes(model)), [])
    if not planes:
        raise SystemExit("seam_error.py: no run given is split into blocks (--pipeline.spatial-blocks > 1)")
    split_views = next(views for _, model, views in runs if split_planes(model))
    regions: List[Dict[str, torch.Tensor]] = []
    for _, _, points, opacity in split_views:
        near_plane = torch.zeros(opacity.shape, dtype=torch.bool)
        for axis, value in planes:
            near_plane |= (points[..., axis] - value).abs() < args.band
        surface = opacity > 0.5
        regions.append({"seam": surface & near_plane, "surface": surface & ~near_plane, "background": ~surface})
    names = ("seam", "surface", "background")
    counts = {name: sum(int(masks[name].sum()) for masks in regions) for name in names}
    print(f"Split planes (axis, coordinate): {planes}; band {args.band} world units.\n")
    print("| run | all | " + " | ".join(names) + " |")
    print("|---|---:|" + "---:|" * len(names))
    for path, _, views in runs:
        sums = {name: 0.0 for name in names}
        for (rgb, truth, _, _), masks in zip(views, regions):
            error = ((rgb - truth) ** 2).sum(dim=-1)
            for name in names:
                sums[name] += float(error[masks[name]].sum())
        total = psnr(sum(sums.values()), sum(counts.values()))
        cells = " | ".join(f"{psnr(sums[name], counts[name]):.2f}" for name in names)
        print(f"| `{path}` | {total:.2f} | {cells} |")
    print("| pixels | " + str(sum(counts.values())) + " | " + " | ".join(str(counts[name]) for name in names) + " |")


if __name__ == "__main__":
    main()
