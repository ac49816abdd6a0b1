"""Ctrl-C (SIGINT) and SIGTERM while training: the first asks training to stop after the step under way, so the
trainer can save a checkpoint and exit with the signal's status (130 for Ctrl-C, 143 for SIGTERM); a second stops
at once (during that save too). Handlers live only while training runs, in the main thread of a one-process run."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Callable, Dict, Optional

from nerfstudio.utils.rich_utils import CONSOLE

SIGNAL_NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


def exit_status(signum: int) -> int:
    """The shell's exit status for a process stopped by ``signum`` (128 + its number: 130 for SIGINT)."""
    return 128 + int(signum)


class TrainingInterrupted(Exception):
    """Raised at the start of ``step`` once a stop was asked for: every step before it is complete."""

    def __init__(self, step: int, signum: int) -> None:
        super().__init__(f"{SIGNAL_NAMES[signum]} before step {step}")
        self.step = step
        self.signum = signum


class StoppedAtOnce(KeyboardInterrupt):
    """A second signal: training stops where it is (a ``KeyboardInterrupt``, so no ``except Exception`` on the way
    catches it); the trainer exits with :func:`exit_status` of :attr:`signum`."""

    def __init__(self, signum: int) -> None:
        super().__init__(SIGNAL_NAMES[signum])
        self.signum = signum


class StopRequests:
    """SIGINT and SIGTERM handlers for the length of a training loop.

    The first signal records itself (:attr:`signum`), calls ``on_first`` (a paused run resumes, to reach the next
    step) and says what happens next; :meth:`check` raises :class:`TrainingInterrupted` at the next step's start. A
    second signal restores the previous handlers, says what ``on_second`` returns (where the last checkpoint is) and
    raises :class:`StoppedAtOnce` wherever training is.
    """

    def __init__(self, on_first: Callable[[], None], on_second: Callable[[], str]) -> None:
        self.signum: Optional[int] = None
        self._on_first = on_first
        self._on_second = on_second
        self._previous: Dict[int, object] = {}

    @property
    def installed(self) -> bool:
        return bool(self._previous)

    def install(self) -> None:
        """Handle SIGINT and SIGTERM from now on; a no-op outside the main thread (Python delivers signals there)."""
        if threading.current_thread() is not threading.main_thread():
            return
        self.signum = None
        for signum in SIGNAL_NAMES:
            self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        """Put back the handlers that were there before :meth:`install`."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def check(self, step: int) -> None:
        """Raise :class:`TrainingInterrupted` when a stop was asked for; called before anything of ``step`` runs."""
        if self.signum is not None:
            raise TrainingInterrupted(step, self.signum)

    def _handle(self, signum: int, frame: Optional[FrameType]) -> None:
        if self.signum is None:
            self.signum = signum
            self._on_first()
            CONSOLE.print(
                f"{SIGNAL_NAMES[signum]}: stopping after this step to save a checkpoint "
                f"(press Ctrl-C again to stop at once, without saving)",
                soft_wrap=True,
            )
            return
        self.restore()
        CONSOLE.print(
            f"{SIGNAL_NAMES[signum]} again: stopped at once, without saving; {self._on_second()}", soft_wrap=True
        )
        raise StoppedAtOnce(signum)
