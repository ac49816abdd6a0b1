"""Memory measures for benchmarks and tests: autograd's saved tensors and the process's peak RSS."""

from __future__ import annotations

import resource
import sys
from typing import Callable

import torch


def saved_tensor_bytes(fn: Callable[[], object]) -> int:
    """Bytes autograd saves for backward while ``fn`` runs: the training graph's memory, on any device."""
    total = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn()
    return total


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024
