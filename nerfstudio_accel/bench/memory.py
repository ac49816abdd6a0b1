"""Memory measures for benchmarks and tests: autograd's saved tensors and training's peak memory."""

from __future__ import annotations

import contextlib
import resource
import sys
from typing import Callable

import torch

from nerfstudio_accel.engine.trainer import AccelTrainer


def saved_tensor_bytes(fn: Callable[[], object]) -> int:
    """Bytes autograd saves for backward while ``fn`` runs: the training graph's memory, on any device.
    Parameters saved by reference (a layer's weights, the hash table) exist anyway and are not counted."""
    total = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal total
        if not (tensor.is_leaf and tensor.requires_grad):
            total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn()
    return total


def training_autocast(trainer) -> contextlib.AbstractContextManager:
    """The autocast a trainer's steps run under: AccelTrainer's own, else nerfstudio's (fp16 when
    ``mixed_precision``, on ``cpu`` for MPS devices, as nerfstudio's ``train_iteration`` opens it)."""
    if isinstance(trainer, AccelTrainer):
        return trainer.autocast()
    device_type = str(trainer.device).split(":")[0]
    return torch.autocast(device_type="cpu" if device_type == "mps" else device_type, enabled=trainer.mixed_precision)


def batch_graph_bytes(trainer, ray_bundle, batch) -> int:
    """Bytes of the graph an accel pipeline's training loss of this given batch saves, under the trainer's
    autocast (:meth:`~nerfstudio_accel.pipelines.accel_pipeline.AccelPipeline.batch_loss`)."""
    pipeline = trainer.pipeline
    pipeline.train()
    with training_autocast(trainer):
        return saved_tensor_bytes(lambda: pipeline.batch_loss(ray_bundle, batch))


def training_graph_bytes(trainer, step: int) -> int:
    """Bytes of the graph one training step of ``trainer``'s pipeline saves, under the trainer's autocast."""
    pipeline = trainer.pipeline
    pipeline.train()
    with training_autocast(trainer):
        return saved_tensor_bytes(lambda: pipeline.get_train_loss_dict(step))


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


class TrainingPeakMemory:
    """Peak memory of the training stretches of a run, leaving out the evaluations between them.

    On CUDA it is the largest ``torch.cuda.max_memory_allocated`` over the stretches (the counter is
    reset after each evaluation). Elsewhere it is the process's peak RSS before the first evaluation:
    RSS cannot be reset, and whole-image rendering would otherwise dominate it.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = torch.device(device)
        self.kind = "cuda_max_allocated" if self.device.type == "cuda" else "process_peak_rss"
        self.bytes = 0
        self._evaluated = False
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def before_evaluation(self) -> None:
        """Fold the training stretch that just ended into the peak."""
        if self.device.type == "cuda":
            self.bytes = max(self.bytes, torch.cuda.max_memory_allocated(self.device))
        elif not self._evaluated:
            self.bytes = peak_rss_bytes()
        self._evaluated = True

    def after_evaluation(self) -> None:
        """Start a new training stretch."""
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
