"""Denormal floats flushed to zero on the CPU, in this thread and every thread started after it.

x86 cores take a slow path (tens to hundreds of cycles) for arithmetic on a denormal float, one under 1.2e-38 in
magnitude. CPU training makes them steadily: Adam's first moment of every hash-table row that gets no gradient
shrinks by 0.9 a step, so a few hundred steps after a row was last seen it is denormal, and after some 2000 steps
of lego a sixth of the table's moments are; the fused Adam step then runs several times slower
(docs/results/training_techniques/denormals/README.md). Flushing sets the calling thread's floating-point control
register, which a thread copies from the thread that starts it; torch's and numba's CPU thread pools start at their
first parallel work and keep their threads, so the package flushes when it is imported: nerfstudio imports it to
find its methods, before any tensor work. NumPy's float limits are read before the flush: NumPy warns that the
smallest subnormal is zero when it first reads them after it.
"""

from __future__ import annotations

import numpy as np
import torch


def flush_denormals() -> bool:
    """Flush denormals to zero (results and inputs) in this thread and the threads it starts from now on; False
    where the CPU cannot (then nothing changes)."""
    for dtype in (np.float16, np.float32, np.float64, np.longdouble):
        np.finfo(dtype)  # cached by NumPy: read later, under the flush, without its warning
    return torch.set_flush_denormal(True)
