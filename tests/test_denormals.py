"""Denormals are flushed to zero in every CPU thread of torch and numba once nerfstudio has found the plugin's
methods (:mod:`nerfstudio_accel.denormals`), as in an ``ns-train`` process."""

from __future__ import annotations

import platform

import pytest

COUNT_DENORMALS_SURVIVING = """
import os
import sys

os.environ["NUMBA_THREADING_LAYER"] = "workqueue"  # the plugin's choice (kernels/threads.py), without importing it

import numba
import numpy as np
import torch

if sys.argv[1] == "plugin":
    import nerfstudio.scripts.train  # ns-train's module: finding its methods imports the plugin


@numba.njit(parallel=True)
def times_one(values):
    out = np.empty_like(values)
    for i in numba.prange(values.shape[0]):
        out[i] = values[i] * np.float32(1.0)
    return out


torch.set_num_threads(2)
numba.set_num_threads(2)
bits = np.full(1 << 20, 0x007FFFFF, dtype=np.int32)  # the largest float32 denormal, made without float arithmetic
values = torch.from_numpy(bits).view(torch.float32)
print(int(torch.count_nonzero((values * 1.0).view(torch.int32))), int(np.count_nonzero(times_one(bits.view(np.float32)))))
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the flush-to-zero control bits are x86's")
@pytest.mark.parametrize("imports, survive", [("plugin", False), ("torch only", True)])
def test_denormals_are_flushed_in_every_thread_from_the_import_nerfstudio_makes(run_cli, imports, survive):
    """Multiplying 2^20 denormals by 1 over two torch threads and two numba threads gives zeros in every thread's
    share once the plugin is imported, and the denormals themselves without it (the check can tell them apart)."""
    code, out, err = run_cli("python", "-c", COUNT_DENORMALS_SURVIVING, imports, timeout=300)
    assert code == 0, err
    torch_left, numba_left = map(int, out.split()[-2:])
    if survive:
        assert (torch_left, numba_left) == (1 << 20, 1 << 20)
    else:
        assert (torch_left, numba_left) == (0, 0)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the flush-to-zero control bits are x86's")
def test_numpy_reads_its_float_limits_after_the_flush_without_a_warning(run_cli):
    """NumPy warns that the smallest subnormal is zero where it first reads a float type's limits under the flush;
    the plugin reads them before flushing, so an ns-train process prints no such warning."""
    code, out, err = run_cli(
        "python", "-W", "error::UserWarning", "-c",
        "import numpy as np, nerfstudio.scripts.train; "
        "print(np.finfo(np.float32).smallest_normal, np.finfo(np.float64).smallest_normal)",
        timeout=300,
    )  # fmt: skip
    assert code == 0, err
    assert out.split()[-2:] == ["1.1754944e-38", "2.2250738585072014e-308"]
