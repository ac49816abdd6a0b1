"""numba's threading for our CPU kernels: the ``workqueue`` layer, and one process-wide lock around it.

numba takes TBB, else OpenMP, else ``workqueue``; with OpenMP its worker threads spin after each kernel
while PyTorch's own OpenMP threads want the same cores (measured in docs/captured_scenes.md). So, unless
the user chose a layer through ``NUMBA_THREADING_LAYER``, the kernels run on ``workqueue``. That layer
aborts the process when two threads launch parallel kernels at once, as the viewer's render thread does
while training runs: :data:`PARALLEL_KERNELS` makes them take turns (each kernel already uses every
core, so taking turns costs nothing).
"""

from __future__ import annotations

import os
import threading

PARALLEL_KERNELS = threading.RLock()


def choose_threading_layer() -> None:
    """Select numba's ``workqueue`` layer unless ``NUMBA_THREADING_LAYER`` says otherwise. Call it before
    the first parallel kernel runs: numba starts its threads once. The environment variable is set too,
    because numba re-reads its configuration from the environment before compiling."""
    if "NUMBA_THREADING_LAYER" in os.environ:
        return
    import numba

    os.environ["NUMBA_THREADING_LAYER"] = "workqueue"
    numba.config.THREADING_LAYER = "workqueue"
