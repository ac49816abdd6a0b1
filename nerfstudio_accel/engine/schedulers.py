"""Learning-rate schedules whose state holds plain Python floats, so checkpoints load with ``weights_only``.

nerfstudio's ``ExponentialDecayScheduler`` computes rates with numpy: ``numpy.float64`` values end up
in the optimizer and scheduler state, and since torch 2.6 ``torch.load`` (as ``ns-eval`` and
``--load-dir`` call it) refuses such checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Type

from nerfstudio.engine.schedulers import ExponentialDecayScheduler, ExponentialDecaySchedulerConfig
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler


@dataclass
class FloatExponentialDecaySchedulerConfig(ExponentialDecaySchedulerConfig):
    """nerfstudio's exponential decay (same flags), with float-valued state."""

    _target: Type = field(default_factory=lambda: FloatExponentialDecayScheduler)


class FloatExponentialDecayScheduler(ExponentialDecayScheduler):
    """Exponential decay whose multipliers, current rates and last rates are Python floats."""

    def get_scheduler(self, optimizer: Optimizer, lr_init: float) -> LRScheduler:
        scheduler = super().get_scheduler(optimizer, lr_init)
        scheduler.lr_lambdas = [lambda step, decay=decay: float(decay(step)) for decay in scheduler.lr_lambdas]
        for group in optimizer.param_groups:
            group["lr"] = float(group["lr"])
        scheduler._last_lr = [float(lr) for lr in scheduler._last_lr]
        return scheduler
