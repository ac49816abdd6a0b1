"""nerfstudio's event writers, owned by one run at a time.

nerfstudio keeps its writers (tensorboard, wandb, comet, the terminal's stats) in module-level lists that
every ``Trainer.setup`` appends to and nothing empties: a second run in one process (``train_loop`` twice in
a notebook, a script that trains several scenes) writes its events into every earlier run's log too, and
stops with the earlier tensorboard writer's ``FileNotFoundError`` once that run's folder is deleted. A run
calls :func:`release_event_writers` before it sets up its own writers and when it finishes; the second call
also flushes the run's last events to disk, where nerfstudio leaves up to two minutes of them queued.
"""

from __future__ import annotations

import logging

from nerfstudio.utils import writer

logger = logging.getLogger(__name__)


def release_event_writers() -> None:
    """Flush and close the tensorboard writers nerfstudio holds, and drop every writer and pending event."""
    for event_writer in writer.EVENT_WRITERS:
        if isinstance(event_writer, writer.TensorboardWriter):
            try:
                event_writer.tb_writer.close()
            except Exception as error:  # e.g. its run's folder is gone: a log is never worth a training run
                logger.warning("could not close the tensorboard log %s: %s", event_writer.tb_writer.log_dir, error)
    writer.EVENT_WRITERS.clear()
    writer.EVENT_STORAGE.clear()
