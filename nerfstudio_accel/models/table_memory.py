"""Whether a hash table fits the machine: a size out of range or a table (with its gradient and Adam's two moments)
larger than the device's memory is refused in one line while the config resolves, before anything is allocated."""

from __future__ import annotations

import os
from typing import Optional

import torch

from nerfstudio_accel.errors import ConfigError
from nerfstudio_accel.kernels.hash_layout import MAX_LOG2_ROWS, HashGridLayout

TABLE_COPIES = 4
"""Float32 copies of the table training holds: the table, its gradient, Adam's first and second moments."""


def machine_memory_bytes(device_type: str) -> Optional[int]:
    """The memory of ``device_type`` here: the GPU's for ``cuda``, the machine's physical memory for ``cpu``; None
    where it is not known (another device, or Windows)."""
    if device_type == "cuda" and torch.cuda.is_available():
        try:
            return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        except (RuntimeError, AssertionError):  # no driver, or a torch built without CUDA: not known
            return None
    if device_type == "cpu" and os.name == "posix":  # sysconf: Linux, macOS
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            return None
    return None


def check_table_fits(num_levels: int, max_res: int, log2_hashmap_size: int, device_type: str) -> None:
    """Raise :class:`~nerfstudio_accel.errors.ConfigError` (one line, with an estimate) when
    ``--pipeline.model.log2-hashmap-size`` is out of range or its table cannot be trained in this device's memory."""
    if not 1 <= log2_hashmap_size <= MAX_LOG2_ROWS:
        raise ConfigError(
            f"--pipeline.model.log2-hashmap-size {log2_hashmap_size} is out of range; choose 1 to {MAX_LOG2_ROWS} "
            f"(15 to 19 are usual)"
        )
    layout = HashGridLayout.from_resolutions(num_levels, 16, max_res, log2_hashmap_size)
    needed = layout.num_params * 4 * TABLE_COPIES
    available = machine_memory_bytes(device_type)
    if available is not None and needed > available:
        raise ConfigError(
            f"--pipeline.model.log2-hashmap-size {log2_hashmap_size} needs about {needed / 2**30:.1f} GiB for the hash "
            f"table, its gradient and Adam's state, more than this {device_type}'s {available / 2**30:.1f} GiB; "
            f"choose a smaller size (15 to 19 are usual)"
        )
