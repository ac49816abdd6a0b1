"""Denormal floats flushed to zero on the CPU, in this thread and every thread started after it.

x86 cores take a slow path (tens to hundreds of cycles) for arithmetic on a denormal float, one under 1.2e-38 in
magnitude. A CPU training step meets them by the thousand in its first few thousand steps, in the backward and
the forward alike: flushed, lego 400x400's first 400 steps run about 1.7x faster
(docs/trainer.md#denormals-flushed-to-zero-on-the-cpu). Flushing sets the calling thread's floating-point control
register, which a thread copies from the thread that starts it; torch's and numba's CPU thread pools start at their
first parallel work and keep their threads, so the package flushes when it is imported: nerfstudio imports it to
find its methods, before any tensor work.
"""

from __future__ import annotations

import torch


def flush_denormals() -> bool:
    """Flush denormals to zero (results and inputs) in this thread and the threads it starts from now on; False
    where the CPU cannot (then nothing changes)."""
    return torch.set_flush_denormal(True)
