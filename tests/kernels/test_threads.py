"""numba's threading layer for our CPU kernels: workqueue unless the user chose one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("numba")

PROBE = """
import numba, numpy as np
import nerfstudio_accel.kernels.hash_encoding_numba  # importing a kernel module makes the choice

@numba.njit(parallel=True)
def bump(x):
    for i in numba.prange(x.shape[0]):
        x[i] += 1

bump(np.zeros(8))
print(numba.threading_layer())
"""


@pytest.mark.parametrize("chosen, expected", [(None, "workqueue"), ("omp", "omp")])
def test_kernels_run_on_workqueue_unless_the_user_chose_a_layer(chosen, expected):
    """OpenMP's spinning workers fight PyTorch's for the cores (docs/captured_scenes.md): our import selects
    workqueue before the first parallel launch; an explicit NUMBA_THREADING_LAYER wins."""
    env = {key: value for key, value in os.environ.items() if key != "NUMBA_THREADING_LAYER"}
    if chosen is not None:
        env["NUMBA_THREADING_LAYER"] = chosen
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300)
    if chosen == "omp" and result.returncode != 0 and "omp" in result.stderr.lower():
        pytest.skip("numba's OpenMP layer does not load on this machine")
    assert result.returncode == 0, result.stderr[-1500:]
    assert result.stdout.strip().splitlines()[-1] == expected
