"""A hash table larger than the device's memory is refused in one line, with an estimate, before it is allocated."""

from __future__ import annotations

import pytest

from nerfstudio_accel.errors import ConfigError
from nerfstudio_accel.kernels.hash_layout import HashGridLayout
from nerfstudio_accel.models import table_memory
from nerfstudio_accel.models.table_memory import TABLE_COPIES, check_table_fits


def test_a_table_larger_than_the_memory_is_refused_with_its_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    layout = HashGridLayout.from_resolutions(16, 16, 2048, 22)
    needed = layout.num_params * 4 * TABLE_COPIES
    monkeypatch.setattr(table_memory, "machine_memory_bytes", lambda device_type: needed - 1)
    with pytest.raises(ConfigError) as refused:
        check_table_fits(16, 2048, 22, "cpu")
    message = str(refused.value)
    assert f"needs about {needed / 2**30:.1f} GiB" in message and "more than this cpu's" in message
    assert "\n" not in message
    monkeypatch.setattr(table_memory, "machine_memory_bytes", lambda device_type: needed)
    check_table_fits(16, 2048, 22, "cpu")  # exactly what it needs: accepted


def test_the_cpus_memory_is_known_here() -> None:
    assert table_memory.machine_memory_bytes("cpu") > 2**30
    assert table_memory.machine_memory_bytes("mps") is None
