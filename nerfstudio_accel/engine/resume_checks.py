"""Resume checks: a checkpoint of another model than this run's stops ``--load-dir`` in one line, before anything
loads. nerfstudio would retry a failed load without ``strict``, keep what fits, drop the rest silently and fail
later in the optimizer's load with a stack trace.

The line names what differs: the method, else the model flags of the run that saved the checkpoint (read from
the ``config.yml`` beside its checkpoint folder) that this run sets otherwise, else the tensors themselves.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

from nerfstudio.engine.trainer import TrainerConfig
from torch import Tensor, nn

from nerfstudio_accel.engine.run_folder import run_config
from nerfstudio_accel.errors import CheckpointError

MODEL_PREFIX = "_model."
"""The pipeline's key prefix of its model's tensors in a checkpoint."""
STATELESS_MODEL_FIELDS = ("_target", "resolved", "init_from", "eval_num_rays_per_chunk")
"""Model config fields that shape no tensor: never named as a difference."""
SET_FROM_PIPELINE = {"spatial_blocks": "--pipeline.spatial-blocks"}
"""Model config fields a pipeline flag sets: named by that flag."""


def model_tensors(pipeline_state: Dict[str, Tensor]) -> Dict[str, Tensor]:
    """The model's tensors in a checkpoint's pipeline state, by the model's own names (no DDP ``module.``)."""
    tensors = {}
    for key, value in pipeline_state.items():
        key = key.removeprefix("module.")
        if key.startswith(MODEL_PREFIX):
            tensors[key[len(MODEL_PREFIX) :].removeprefix("module.")] = value
    return tensors


def flag_values(config: Any, prefix: str) -> Iterator[Tuple[str, Any]]:
    """``(--flag.name, value)`` of every leaf field of a (nested) dataclass config, as tyro names them."""
    yield from _leaves(dataclasses.asdict(config), prefix)


def _leaves(fields: Dict[str, Any], prefix: str) -> Iterator[Tuple[str, Any]]:
    for name, value in fields.items():
        if name in STATELESS_MODEL_FIELDS:
            continue
        flag = SET_FROM_PIPELINE.get(name) or f"{prefix}.{name.replace('_', '-')}"
        if isinstance(value, dict):
            yield from _leaves(value, flag)
        else:
            yield flag, value


def shown(value: Any) -> str:
    """A value as it is typed on the command line."""
    return " ".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)


def model_flag_differences(saved: Any, current: Any) -> List[str]:
    """``--pipeline.model.X SAVED (this run: CURRENT)`` for each model flag the two configs set otherwise."""
    current_values = dict(flag_values(current, "--pipeline.model"))
    return [
        f"{name} {shown(value)} (this run: {shown(current_values[name])})"
        for name, value in flag_values(saved, "--pipeline.model")
        if name in current_values and current_values[name] != value
    ]


def tensor_differences(model: nn.Module, saved: Dict[str, Tensor]) -> List[str]:
    """The tensors that do not match, as ``missing NAME`` / ``unexpected NAME`` / ``NAME of shape A (this run: B)``."""
    current = model.state_dict()
    differences = [f"missing {name}" for name in current if name not in saved]
    differences += [f"unexpected {name}" for name in saved if name not in current]
    differences += [
        f"{name} of shape {tuple(saved[name].shape)} (this run: {tuple(tensor.shape)})"
        for name, tensor in current.items()
        if name in saved and saved[name].shape != tensor.shape
    ]
    return differences


def check_resumable(
    model: nn.Module, config: TrainerConfig, checkpoint: Path, pipeline_state: Dict[str, Tensor]
) -> None:
    """Raise :class:`~nerfstudio_accel.errors.CheckpointError` (one line) unless ``pipeline_state`` (a checkpoint's
    ``pipeline``) holds exactly ``model``'s tensors, of the same shapes."""
    mismatches = tensor_differences(model, model_tensors(pipeline_state))
    if not mismatches:
        return
    run = run_config(checkpoint)
    source = run[0] if run is not None else None
    if source is not None and source.method_name != config.method_name:
        raise CheckpointError(
            f"{checkpoint} is a checkpoint of {source.method_name}, not {config.method_name}; "
            f"resume it with ns-train {source.method_name} --load-dir {checkpoint.parent}"
        )
    flags = model_flag_differences(source.pipeline.model, config.pipeline.model) if source is not None else []
    if flags:
        raise CheckpointError(
            f"{checkpoint} was trained with other model settings: {', '.join(flags[:4])}"
            f"{', ...' if len(flags) > 4 else ''}; resume with those flags (that run's config.yml has them all)"
        )
    if all(".position_encoding.table of shape" in mismatch for mismatch in mismatches):
        raise CheckpointError(
            f"{checkpoint}'s hash tables have another layout than this version builds with the same flags (a split "
            f"object scene trained before its blocks kept one model's lattice, docs/spatial_blocks.md); train it again"
        )
    raise CheckpointError(
        f"{checkpoint} does not fit this model: {len(mismatches)} tensors differ ({', '.join(mismatches[:3])}"
        f"{', ...' if len(mismatches) > 3 else ''}); resume with the model flags of the run that saved it"
    )
