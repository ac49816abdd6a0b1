"""numba's threading for our CPU kernels: the ``workqueue`` layer, and one process-wide lock around it.

numba picks OpenMP by default where it loads. Its worker threads then spin after each kernel while
PyTorch's own OpenMP threads want the same cores: on 2 cores a proposal-sampler step on a phone capture
took a median 690 ms with spikes to 2.6 s, against 96 ms with ``workqueue`` (``benchmarks/`` and
docs/captured_scenes.md). So, unless the user chose a layer through ``NUMBA_THREADING_LAYER``, the
kernels run on ``workqueue``. That layer aborts the process when two threads launch parallel kernels at
once, as the viewer's render thread does while training runs: :data:`PARALLEL_KERNELS` makes them take
turns (each kernel already uses every core, so taking turns costs nothing).
"""

from __future__ import annotations

import os
import threading

PARALLEL_KERNELS = threading.RLock()


def choose_threading_layer() -> None:
    """Select numba's ``workqueue`` layer unless ``NUMBA_THREADING_LAYER`` says otherwise (call before the
    first parallel kernel runs; later calls change nothing numba has already started)."""
    if "NUMBA_THREADING_LAYER" in os.environ:
        return
    import numba

    numba.config.THREADING_LAYER = "workqueue"
