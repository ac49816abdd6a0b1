"""PyTorch's OpenMP threads told to wait passively, so they leave the cores to the CPU kernels' threads.

On the CPU a training step alternates PyTorch ops, which run on PyTorch's OpenMP threads, with numba kernels, which
run on numba's own threads. After each parallel op an OpenMP thread keeps spinning on its core for a while
(libgomp's default: 300,000 spins) in case more work comes. The numba kernel that follows then shares the two cores
with a spinning thread. ``OMP_WAIT_POLICY=PASSIVE`` makes PyTorch's threads sleep at once instead. OpenMP reads the
variable once, when PyTorch loads, so it must be in the environment before the process starts: the processes this
package starts get it (:func:`passive_wait_environment`), and ``ns-train`` says how to set it where the model
trains through numba kernels (:func:`wait_policy_hint`). Measurements: docs/trainer.md#openmp-threads-waiting-on-the-cpu.
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional

WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
"""The variables through which a user already chose how OpenMP threads wait (the standard one, libgomp's own)."""


def openmp_wait_setting(environ: Mapping[str, str]) -> str:
    """How ``environ`` has OpenMP threads wait, as ``NAME=value`` pairs (empty: OpenMP's default)."""
    return ", ".join(f"{name}={environ[name]}" for name in WAIT_VARIABLES if environ.get(name, "") != "")


def wait_chosen(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` already says how OpenMP threads wait."""
    return openmp_wait_setting(environ) != ""


def passive_wait_environment(environ: Mapping[str, str]) -> Dict[str, str]:
    """A copy of ``environ`` for a process this package starts: ``OMP_WAIT_POLICY=PASSIVE`` unless the user chose
    how OpenMP threads wait."""
    child = dict(environ)
    if not wait_chosen(environ):
        child["OMP_WAIT_POLICY"] = "PASSIVE"
    return child


def wait_policy_hint(environ: Mapping[str, str], numba_kernels: bool) -> Optional[str]:
    """One line for a run through numba kernels started without a wait policy; None otherwise."""
    if not numba_kernels or wait_chosen(environ):
        return None
    return (
        "CPU training: PyTorch's OpenMP threads spin between ops and take cores from the CPU kernels; start with "
        "OMP_WAIT_POLICY=PASSIVE for faster steps (docs/trainer.md#openmp-threads-waiting-on-the-cpu)"
    )
