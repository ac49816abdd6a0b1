"""The software prefetch intrinsic: it compiles to the CPU's prefetch instruction, changes no value, and refuses
what it cannot address."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from nerfstudio_accel.kernels.prefetch import prefetch_row


@numba.njit
def gathered_sum(table, rows, prefetch):
    """Sum of ``table[rows[i], 0]``, each next row prefetched first when ``prefetch``."""
    total = np.float32(0.0)
    for i in range(rows.shape[0]):
        if prefetch and i + 1 < rows.shape[0]:
            prefetch_row(table, rows[i + 1])
        total += table[rows[i], 0]
    return total


def test_a_prefetch_changes_no_value_and_compiles_to_the_prefetch_instruction():
    table = np.random.default_rng(0).random((1 << 12, 2), dtype=np.float32)
    rows = np.random.default_rng(1).integers(0, table.shape[0], 5000)
    assert gathered_sum(table, rows, True) == gathered_sum(table, rows, False) != 0.0
    assembly = gathered_sum.inspect_asm(gathered_sum.signatures[0]).lower()
    assert "prefetch" in assembly or "prfm" in assembly  # x86's prefetcht0, Arm's prfm


def test_a_prefetch_takes_only_a_table_and_an_integer_row():
    @numba.njit
    def prefetch_a_vector(vector):
        prefetch_row(vector, 0)

    with pytest.raises(numba.core.errors.TypingError):
        prefetch_a_vector(np.zeros(4, dtype=np.float32))
