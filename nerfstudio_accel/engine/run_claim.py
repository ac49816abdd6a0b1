"""One training process per run folder, and never over another run's checkpoints.

ns-train writes into ``--output-dir/--experiment-name/METHOD/--timestamp``. A second run with the same folder (at
the same time, or the same command run again with a fixed ``--timestamp``) would overwrite the first's config.yml
and, keeping only its own latest checkpoint, delete the first's. :func:`claim_run_folder` locks the folder for the
life of the process (an ``flock`` on a hidden file: the system releases it when the process ends, however it ends)
and refuses a folder that already holds checkpoints unless this run resumes from them (``--load-dir``) or was
asked to replace them (``--overwrite-checkpoints``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Dict

from nerfstudio.utils.rich_utils import CONSOLE

from nerfstudio_accel.errors import ConfigError

if sys.platform != "win32":
    import fcntl

LOCK_NAME = ".ns-train.lock"
CHECKPOINT_GLOB = "step-*.ckpt"
_claimed: Dict[Path, int] = {}
"""Run folder -> the open descriptor that holds its lock (kept open until the process ends)."""


def claim_run_folder(run_dir: Path, checkpoint_dir: Path, resumes: bool, overwrite: bool) -> None:
    """Lock ``run_dir`` for this process and check ``checkpoint_dir``; a folder this process claimed before
    passes at once. Raises :class:`~nerfstudio_accel.errors.ConfigError` (one line) when another process trains
    there, or when it holds checkpoints that this run neither resumes (``resumes``) nor replaces (``overwrite``:
    they are deleted, saying so)."""
    run_dir = run_dir.absolute()
    if run_dir in _claimed:
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    handle = os.open(run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        lock(handle, run_dir)
        earlier = sorted(Path(checkpoint_dir).glob(CHECKPOINT_GLOB))
        if earlier and not resumes:
            if not overwrite:
                raise ConfigError(
                    f"{checkpoint_dir} holds another run's checkpoints (newest: {earlier[-1].name}); resume that run "
                    f"with --load-dir {checkpoint_dir}, train into another folder (--timestamp or --output-dir), or "
                    f"pass --overwrite-checkpoints True to replace them"
                )
            for checkpoint in earlier:
                checkpoint.unlink()
            CONSOLE.print(
                f"--overwrite-checkpoints True: deleted {len(earlier)} earlier checkpoints in {checkpoint_dir}"
            )
    except BaseException:
        os.close(handle)  # releases the lock
        raise
    _claimed[run_dir] = handle


def lock(handle: int, run_dir: Path) -> None:
    """Take the exclusive lock of ``run_dir``'s lock file (open as ``handle``) without waiting; a no-op on
    Windows, which has no ``flock``."""
    if sys.platform == "win32":
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise ConfigError(
            f"another ns-train is training into {run_dir}; wait for it to finish, or train into another folder "
            f"(--timestamp or --output-dir)"
        ) from None
