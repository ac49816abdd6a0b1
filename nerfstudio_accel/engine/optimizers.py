"""Adam that runs as one fused kernel wherever torch has one (CPU, CUDA, MPS).

Per step, torch's default CPU Adam loops over parameters with a dozen elementwise passes each; the fused
kernel makes one (docs/hash_encoding.md has the measurement). The optimizer state has the same keys either way;
``fused`` is part of the saved parameter groups, so a checkpoint resumes with the Adam it was saved with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Tuple

import torch
from nerfstudio.engine.optimizers import AdamOptimizerConfig


@dataclass
class FusedAdamOptimizerConfig(AdamOptimizerConfig):
    """nerfstudio's Adam config with ``fused``: None picks the fused kernel when every parameter is a
    floating-point tensor on a device that has one."""

    fused: Optional[bool] = None
    betas: Tuple[float, float] = (0.9, 0.999)
    """Adam's decay rates of the gradient's first and second moments (torch's unless a method sets them; accel-ngp's
    fields use 0.99 for the second, docs/trainer.md#adams-second-moment)."""

    def setup(self, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        params = list(params)
        fused = self.fused if self.fused is not None else fused_adam_supported(params)
        return torch.optim.Adam(
            params, lr=self.lr, betas=self.betas, eps=self.eps, weight_decay=self.weight_decay, fused=fused
        )


def fused_adam_supported(params: Iterable[torch.Tensor]) -> bool:
    """Whether torch's fused Adam takes ``params`` (floating point, on devices with fused kernels)."""
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices  # private: may move
    except ImportError:
        return False
    devices = set(_get_fused_kernels_supported_devices())
    params = list(params)
    return bool(params) and all(p.is_floating_point() and p.device.type in devices for p in params)
