"""Where a training step's time goes: named phases, timed only while a :class:`PhaseClock` runs.

Library code marks its phases with ``with phase("marching"): ...``; without a running clock that is a
no-op (one global read). A running clock (``benchmarks/step_profile.py``) waits for the device at every
phase boundary and charges each interval to the innermost open phase, so the phases of a step add up to
its wall time exactly (the part inside no phase is charged to ``"other"``). Waiting serialises CPU and
GPU work, so a profiled GPU step is slower than an unprofiled one; the shares are what it is for.
"""

from __future__ import annotations

import collections
import contextlib
import time
from typing import Dict, Iterator, List, Optional

import torch

_running: Optional["PhaseClock"] = None


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Charge the time inside this block (less nested phases) to ``name`` while a clock runs."""
    clock = _running
    if clock is None:
        yield
        return
    clock.enter(name)
    try:
        yield
    finally:
        clock.leave()


class PhaseClock:
    """Seconds per phase over the steps it ran for; ``device``: the device to wait for at boundaries."""

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self.seconds: Dict[str, float] = collections.defaultdict(float)
        self._open: List[str] = []
        self._mark = 0.0

    def _now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def _charge(self) -> None:
        now = self._now()
        self.seconds[self._open[-1] if self._open else "other"] += now - self._mark
        self._mark = now

    def enter(self, name: str) -> None:
        self._charge()
        self._open.append(name)

    def leave(self) -> None:
        self._charge()
        self._open.pop()

    @contextlib.contextmanager
    def running(self) -> Iterator["PhaseClock"]:
        """Time the phases of the code inside this block (one clock at a time)."""
        global _running
        if _running is not None:
            raise RuntimeError("a PhaseClock is already running")
        _running = self
        self._mark = self._now()
        try:
            yield self
        finally:
            self._charge()
            _running = None
