"""accel-ngp's flags that moved into its samplers' own option groups, and how their old names are met.

``--pipeline.model.grid-resolution`` became ``--pipeline.model.occupancy.resolution`` and so on
(:data:`MOVED_MODEL_FIELDS`). ``ns-train`` with an old name stops with one line naming the new one
(:func:`refuse_moved_flags`, which the method catalogue runs when nerfstudio loads it, before its flags are
parsed); a ``config.yml`` written with the old names opens with them moved (:func:`move_model_fields`).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Sequence

from nerfstudio_accel.errors import ConfigError

MOVED_MODEL_FIELDS: Dict[str, str] = {
    "sampler_backend": "occupancy.backend",
    "grid_resolution": "occupancy.resolution",
    "grid_levels": "occupancy.levels",
    "render_step_size": "occupancy.render_step_size",
    "cone_angle": "occupancy.cone_angle",
    "alpha_threshold": "occupancy.alpha_threshold",
    "early_stop_eps": "occupancy.early_stop_eps",
    "max_samples_per_ray": "occupancy.max_samples_per_ray",
    "culling_first_samples": "occupancy.culling_first_samples",
    "grid_update_every": "occupancy.update_every",
    "grid_warmup_steps": "occupancy.warmup_steps",
    "grid_ema_decay": "occupancy.ema_decay",
    "occupancy_threshold": "occupancy.threshold",
    "num_samples": "proposal.num_samples",
    "proposal_samples": "proposal.samples_per_round",
    "proposal_max_res": "proposal.max_res",
    "proposal_log2_hashmap_size": "proposal.log2_hashmap_size",
    "proposal_anneal_steps": "proposal.anneal_steps",
    "interlevel_loss_mult": "proposal.interlevel_loss_mult",
    "distortion_loss_mult": "proposal.distortion_loss_mult",
}
"""accel-ngp's model config fields that moved: old name -> ``group.name`` in its nested sampler options."""

MODEL_PREFIX = "--pipeline.model."


def flag(field_path: str) -> str:
    """``--pipeline.model.occupancy.resolution`` for ``occupancy.resolution``, as tyro spells it."""
    return MODEL_PREFIX + field_path.replace("_", "-")


def refuse_moved_flags(args: Sequence[str]) -> None:
    """Raise :class:`~nerfstudio_accel.errors.ConfigError` naming the new flag for the first moved model flag in
    command-line ``args`` (``--flag value`` or ``--flag=value``, dashes or underscores)."""
    for arg in args:
        name = arg.split("=", 1)[0]
        if not name.startswith(MODEL_PREFIX):
            continue
        old = name[len(MODEL_PREFIX) :].replace("-", "_")
        if old in MOVED_MODEL_FIELDS:
            new = MOVED_MODEL_FIELDS[old]
            raise ConfigError(
                f"{flag(old)} is now {flag(new)} (each sampler's options have their own group: "
                f"{MODEL_PREFIX}occupancy.* and {MODEL_PREFIX}proposal.*; ns-train accel-ngp --help lists them)"
            )


def move_model_fields(state: Dict[str, Any], groups: Dict[str, Callable[[], Any]]) -> Dict[str, Any]:
    """A model config's saved fields ``state`` with every old name moved into its group, each group made by
    ``groups[name]()`` where ``state`` has none (a config.yml written before the move)."""
    for name, make in groups.items():
        if name not in state:
            state[name] = make()
    for old, new in MOVED_MODEL_FIELDS.items():
        if old in state:
            group, name = new.split(".")
            setattr(state[group], name, state.pop(old))
    return state
