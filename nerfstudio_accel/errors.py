"""The errors a user fixes: one line each, saying what is wrong and how to fix it.

Library code raises these; only entry points turn them into a one-line exit (:func:`exit_message`):
``ns-train`` through :mod:`nerfstudio_accel.engine.trainer`, ``ns-accel-bench``, ``ns-accel-scene``, and
nerfstudio's other tools (``ns-eval``, ``ns-render``, ``ns-viewer``) through :func:`install_exit_hook`, which
the method catalogue installs when nerfstudio loads it.
"""

from __future__ import annotations

import sys


class AccelError(ValueError):
    """Bad input or an unsupported choice; the message is one line with the fix."""


class BackendUnavailable(AccelError):
    """A kernel backend (hash encoding, field implementation, ray marching) that cannot run here."""


class SceneDataError(AccelError):
    """A scene folder that cannot be trained on."""


class ConfigError(AccelError):
    """A configuration that cannot be built or resumed (flags that contradict each other, an old config)."""


class CheckpointError(AccelError):
    """A checkpoint that cannot be loaded into this model."""


def exit_message(error: AccelError) -> str:
    """The one line an entry point exits with."""
    return f"error: {error}"


def install_exit_hook() -> None:
    """Print an uncaught :class:`AccelError` as its one line (exit status 1) instead of a stack trace; any
    other exception reaches the hook installed before. Installing twice changes nothing."""
    if sys.excepthook is not _print_accel_errors:
        _previous_hooks.append(sys.excepthook)
        sys.excepthook = _print_accel_errors


_previous_hooks: list = []


def _print_accel_errors(kind, error, trace) -> None:
    if isinstance(error, AccelError):
        print(exit_message(error), file=sys.stderr)
    else:
        _previous_hooks[-1](kind, error, trace)
