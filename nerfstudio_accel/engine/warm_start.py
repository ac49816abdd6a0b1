"""Warm start: a run's model begins from another run's tensors (``--pipeline.model.init-from PATH``).

Network tensors (everything inside one of nerfstudio's ``MLP`` modules) load from any run whose names and
shapes match: they hold what a radiance field learns in general. Scene tensors (hash tables, occupancy grids,
per-image embeddings and pose corrections, the scene box) describe one scene, so they load only from a run
trained on the same data folder, e.g. a low-resolution run as the start of a full-resolution one. The
optimizer, schedulers and step count start fresh.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Set

import torch
import yaml
from nerfstudio.field_components.mlp import MLP
from torch import Tensor, nn

from nerfstudio_accel.errors import CheckpointError

CHECKPOINT_FOLDER = "nerfstudio_models"
MODEL_PREFIX = "_model."
"""The pipeline's key prefix of its model's tensors in a checkpoint."""


@dataclass
class WarmStartReport:
    """What :func:`warm_start` loaded and skipped (with why), for one line on the console."""

    checkpoint: Path
    step: int
    same_scene: bool
    loaded: List[str] = field(default_factory=list)
    skipped: Dict[str, str] = field(default_factory=dict)

    def line(self) -> str:
        scene = "same scene" if self.same_scene else "another scene: networks only"
        reasons: Dict[str, List[str]] = {}
        for name, reason in self.skipped.items():
            reasons.setdefault(reason, []).append(name)
        skipped = "; ".join(
            f"{len(names)} {reason} ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
            for reason, names in reasons.items()
        )
        return (
            f"Warm start from {self.checkpoint} (step {self.step}, {scene}): loaded {len(self.loaded)} tensors"
            + (f", skipped {skipped}" if skipped else "")
            + "; fresh optimizer"
        )


def checkpoint_of(path: Path) -> Path:
    """The checkpoint ``path`` names: a ``.ckpt`` file itself, else the newest ``step-*.ckpt`` in a run folder's
    ``nerfstudio_models`` or in the folder itself. Raises :class:`CheckpointError` when there is none."""
    path = Path(path)
    if path.is_file():
        return path
    for folder in (path / CHECKPOINT_FOLDER, path):
        checkpoints = sorted(folder.glob("step-*.ckpt")) if folder.is_dir() else []
        if checkpoints:
            return checkpoints[-1]
    raise CheckpointError(
        f"no checkpoint at {path}; give --pipeline.model.init-from a run folder (with {CHECKPOINT_FOLDER}/) or a .ckpt file"
    )


def data_folder_of_run(checkpoint: Path) -> Optional[Path]:
    """The data folder the checkpoint's run trained on, from the ``config.yml`` beside its checkpoint folder;
    None when there is no readable one."""
    for config_path in (checkpoint.parent.parent / "config.yml", checkpoint.parent / "config.yml"):
        if config_path.is_file():
            try:
                config = yaml.load(config_path.read_text(), Loader=yaml.Loader)
                datamanager = config.pipeline.datamanager
                data = datamanager.data or datamanager.dataparser.data
            except Exception:  # noqa: BLE001 - another version's config: the scene is unknown, networks still load
                return None
            return Path(data) if data is not None else None
    return None


def network_tensor_names(model: nn.Module) -> Set[str]:
    """State-dict names of every tensor inside an ``MLP`` module of ``model``."""
    names: Set[str] = set()
    for module_name, module in model.named_modules():
        if isinstance(module, MLP):
            prefix = f"{module_name}." if module_name else ""
            names.update(prefix + name for name in module.state_dict())
    return names


def warm_start(model: nn.Module, init_from: Path, data: Optional[Path]) -> WarmStartReport:
    """Copy into ``model``, in place, the tensors of ``init_from``'s checkpoint (see the module docstring) whose
    names and shapes match; ``data``: this run's data folder, which decides whether scene tensors load."""
    checkpoint = checkpoint_of(init_from)
    try:
        state = torch.load(checkpoint, map_location="cpu")
        pipeline_state: Dict[str, Tensor] = state["pipeline"]
    except Exception as error:  # noqa: BLE001 - a truncated or foreign file: say which, in one line
        raise CheckpointError(f"cannot read {checkpoint} as a nerfstudio checkpoint ({error})") from None
    source = {
        key.removeprefix("module.")[len(MODEL_PREFIX) :]: value
        for key, value in pipeline_state.items()
        if key.removeprefix("module.").startswith(MODEL_PREFIX)
    }
    source_data = data_folder_of_run(checkpoint)
    same_scene = data is not None and source_data is not None and Path(source_data).resolve() == Path(data).resolve()
    report = WarmStartReport(checkpoint, int(state.get("step", 0)), same_scene)
    networks = network_tensor_names(model)
    target = model.state_dict()
    selected: Dict[str, Tensor] = {}
    for name, tensor in target.items():
        if name not in source:
            report.skipped[name] = "not in the checkpoint"
        elif source[name].shape != tensor.shape:
            report.skipped[name] = "of another shape"
        elif name not in networks and not same_scene:
            report.skipped[name] = "scene tensors"
        else:
            selected[name] = source[name]
            report.loaded.append(name)
    if not report.loaded:
        raise CheckpointError(
            f"nothing in {checkpoint} fits this model (another method or other network sizes); "
            f"train without --pipeline.model.init-from, or with the sizes of that run's config.yml"
        )
    model.load_state_dict(selected, strict=False)
    return report
