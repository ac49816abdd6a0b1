"""A run folder as ns-train leaves it: ``config.yml`` beside ``nerfstudio_models/``, read from a checkpoint's path."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Tuple

import yaml


def run_config(checkpoint: Path) -> Optional[Tuple[Any, Path]]:
    """The config (nerfstudio's ``TrainerConfig``) of the checkpoint's run, from the ``config.yml`` beside its
    checkpoint folder, and the absolute folder of that file (the run folder); None when there is none."""
    for config_path in (checkpoint.parent.parent / "config.yml", checkpoint.parent / "config.yml"):
        if config_path.is_file():
            try:
                config = yaml.load(config_path.read_text(), Loader=yaml.Loader)
            except Exception:  # noqa: BLE001 - a config this install cannot rebuild (another version's classes) tells nothing
                return None
            return config, config_path.parent.absolute()
    return None
