"""numba's disk cache of the CPU kernels, dropped when any kernel source changed.

numba keys a cached kernel on the file that defines it (its modification time and size), not on the files of the
functions it inlines (numba/numba#8396, not merged). The fused march-and-cull kernel inlines the marcher, the culling
pass and the hash lattice from three other files, so after an edit or a ``git pull`` that changes only one of
those, numba would load the old machine code. Here one digest of every kernel source is kept beside numba's cache
files; where it no longer matches, the cache files are deleted before any kernel loads, and numba compiles again.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

KERNELS = Path(__file__).resolve().parent
"""The folder of the kernel sources; numba caches their compiled kernels in its ``__pycache__``."""
STAMP_NAME = "kernel_sources.sha256"
"""The digest of the sources the cache files were compiled from, beside them."""


def sources_digest(folder: Path) -> str:
    """SHA-256 over the names and bytes of ``folder``'s ``*.py`` files, in name order."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def drop_stale_compiled_kernels(folder: Path = KERNELS) -> bool:
    """Delete numba's cache files (``*.nbi``, ``*.nbc``) in ``folder/__pycache__`` unless they were compiled from
    ``folder``'s sources as they are now, and record the current digest. Returns whether any were deleted. A
    read-only install (numba then caches elsewhere, and a reinstall rewrites every source) is left alone, and so is
    a cache the user moved with ``NUMBA_CACHE_DIR``."""
    cache = folder / "__pycache__"
    stamp = cache / STAMP_NAME
    digest = sources_digest(folder)
    try:
        if stamp.read_text() == digest:
            return False
    except OSError:
        pass
    stale = [*cache.glob("*.nbi"), *cache.glob("*.nbc")]
    try:
        for path in stale:
            path.unlink(missing_ok=True)
        cache.mkdir(exist_ok=True)
        stamp.write_text(digest)
    except OSError:
        return False
    return bool(stale)
