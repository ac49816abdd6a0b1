"""One process-wide lock around numba's parallel kernels.

numba's ``workqueue`` threading layer (its fallback where neither TBB nor OpenMP loads) aborts the
process when two threads launch parallel kernels at once, as the viewer's render thread does while
training runs. Each kernel already uses every core, so taking turns costs nothing.
"""

from __future__ import annotations

import threading

PARALLEL_KERNELS = threading.RLock()
