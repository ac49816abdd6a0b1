"""Ray geometry in fp32 whatever the autocast: the pose refinement's corrected rays.

Autocast runs matrix products (``bmm``, ``@``) in the lower precision; a bf16 rotation rounds a ray's
direction by about 1e-3, several of the finest hash cells at scene scale. So rays, and everything
computed from them (positions, contraction, marching), stay fp32 in every precision.
"""

from __future__ import annotations

from typing import Tuple

import torch
from jaxtyping import Float, Int
from nerfstudio.cameras.camera_optimizers import CameraOptimizer
from torch import Tensor


def pose_corrected_rays(
    camera_optimizer: CameraOptimizer,
    origins: Float[Tensor, "n_rays 3"],
    directions: Float[Tensor, "n_rays 3"],
    cameras: Int[Tensor, " n_rays"],
) -> Tuple[Float[Tensor, "n_rays 3"], Float[Tensor, "n_rays 3"]]:
    """``origins, directions`` moved by the camera optimizer's corrections of their ``cameras``, in fp32
    (through the corrections' graph when grad is on)."""
    with torch.autocast(device_type=origins.device.type, enabled=False):
        correction = camera_optimizer(cameras).float()  # (n_rays, 3, 4)
        rotated = torch.bmm(correction[:, :3, :3], directions.float()[..., None])[..., 0]
        return origins.float() + correction[:, :3, 3], rotated
