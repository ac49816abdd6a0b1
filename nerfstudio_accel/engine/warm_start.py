"""Warm start: a run's model begins from another run's tensors (``--pipeline.model.init-from PATH``).

- **Networks** (every tensor inside one of nerfstudio's ``MLP`` modules) load alone, from any run whose names
  and shapes match: they hold what a radiance field learns in general.
- **Scene tensors** (hash tables, occupancy grids, per-image embeddings and pose corrections, scene boxes)
  load only from a run on the same scene (:func:`scene_match`): the same camera files, else the same folder.
- **Groups**: the tensors of a module with persistent buffers of its own describe one structure together
  (networks inside it aside), so they load whole or not at all. In accel-ngp: the occupancy sampler (nerfacc's
  grid resolution, boxes, occupancies and bits, and the sampler's warm-up flag), the hash-grid field (its box
  and table) and each proposal field (likewise); in accel-nerfacto the field (box, hash sizes, table,
  appearance embedding) and each proposal network. A group loads when each of its tensors is in the
  checkpoint with its shape, its buffers that describe the structure (:data:`STRUCTURE_BUFFERS`) hold the
  same values, and, when it holds a hash table, the source's config.yml gives the same hash-grid sizes
  (:data:`HASH_GRID_SIZES`, any of them for every table: another ``max_res`` may keep a table's length and
  move every level's cells). A group without parameters (the occupancy grid) summarises the field: it loads
  only when every learned tensor does.
- **Hash tables of fewer rows a level** (a smaller ``log2_hashmap_size``, every other size the same) are laid out
  in this run's rows first (:func:`~nerfstudio_accel.encodings.table_growth.grow_table`), so their points read
  what they read in the source run: a 100x100 CPU run's 2^15 rows carry into a 400x400 run's 2^17.

A checkpoint of which no learned tensor (a parameter outside the camera optimizer) would load is refused:
buffers, scene boxes and pose corrections alone are a cold start. The optimizer, schedulers and step count
start fresh.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple

import torch
from nerfstudio.cameras.camera_optimizers import CameraOptimizer
from nerfstudio.field_components.encodings import HashEncoding
from nerfstudio.field_components.mlp import MLP
from torch import Tensor, nn

from nerfstudio_accel.data.scene_identity import scene_fingerprint
from nerfstudio_accel.encodings.hash_encoding import MultiresHashEncoding
from nerfstudio_accel.encodings.table_growth import grow_table, layout_of_length
from nerfstudio_accel.engine.run_folder import run_config
from nerfstudio_accel.errors import CheckpointError
from nerfstudio_accel.kernels.hash_layout import HashGridLayout
from nerfstudio_accel.pipelines.accel_pipeline import AccelPipelineConfig

CHECKPOINT_FOLDER = "nerfstudio_models"
MODEL_PREFIX = "_model."
"""The pipeline's key prefix of its model's tensors in a checkpoint."""

STRUCTURE_BUFFERS = frozenset({"aabb", "aabbs", "resolution", "max_res", "num_levels", "log2_hashmap_size"})
"""Last names of the buffers that describe a structure (its box, resolution, hash sizes), not what it learned."""

HASH_GRID_SIZES = (
    "num_levels",
    "base_res",
    "max_res",
    "log2_hashmap_size",
    "features_per_level",
    "proposal.max_res",
    "proposal.log2_hashmap_size",
    "proposal_net_args_list",
)
"""Model config fields (accel-ngp's and nerfacto's, a nested one by its dotted path) that lay out the hash tables'
levels."""

TABLE_ROWS = frozenset({"log2_hashmap_size", "proposal.log2_hashmap_size"})
"""The :data:`HASH_GRID_SIZES` that only set rows a level: a smaller table of this package's layout grows into a
larger one (:func:`grow_smaller_tables`; a table of another length is not loaded, one of the same length has every
level dense in both)."""


@dataclass(frozen=True)
class SceneMatch:
    """Whether a source run trained on this run's scene, and how that was told (for the console line)."""

    same: bool
    by: str


@dataclass(frozen=True)
class TensorGroup:
    """State-dict names of one module's tensors that load whole or not at all (see the module docstring)."""

    module: str
    kind: str
    names: List[str]
    structure: List[str]
    """The group's buffers that describe the structure (:data:`STRUCTURE_BUFFERS`)."""
    learned: bool
    """Whether it holds a learned tensor; a group without one summarises the learned ones."""
    hash_table: bool


@dataclass
class WarmStartReport:
    """What :func:`warm_start` loaded and skipped (with why), tensor by tensor and group by group."""

    checkpoint: Path
    step: int
    scene: SceneMatch
    loaded: List[str] = field(default_factory=list)
    skipped: Dict[str, str] = field(default_factory=dict)
    groups: Dict[str, Tuple[str, Optional[str]]] = field(default_factory=dict)
    """Each group's module path: its module's class name, and None when carried whole, else why not."""
    grown: Dict[str, Tuple[int, int]] = field(default_factory=dict)
    """Hash tables laid out in more rows a level before loading: ``log2_hashmap_size`` in the checkpoint and here."""

    @property
    def same_scene(self) -> bool:
        return self.scene.same

    def scene_phrase(self) -> str:
        """``same scene (how told)`` or ``another scene (how told): networks only``."""
        if self.scene.same:
            return f"same scene ({self.scene.by})"
        return f"another scene ({self.scene.by}): networks only"

    def line(self) -> str:
        """One console line: the source, the scene, tensors loaded, skipped tensors by reason, groups."""
        group_reasons = {_in_group(module) for module in self.groups}
        reasons: Dict[str, List[str]] = {}
        for name, reason in self.skipped.items():
            if reason not in group_reasons:  # said by the group's clause
                reasons.setdefault(reason, []).append(name)
        skipped = "; ".join(
            f"{len(names)} {reason} ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
            for reason, names in reasons.items()
        )
        carried = [f"{module} ({kind})" for module, (kind, why) in self.groups.items() if why is None]
        grown = [f"{name} (2^{a} to 2^{b})" for name, (a, b) in self.grown.items() if name in self.loaded]
        missed = [f"{module} ({kind}: {why})" for module, (kind, why) in self.groups.items() if why is not None]
        return (
            f"Warm start from {self.checkpoint} (step {self.step}, {self.scene_phrase()}): "
            f"loaded {len(self.loaded)} tensors"
            + (f", skipped {skipped}" if skipped else "")
            + (f"; carried whole: {', '.join(carried)}" if carried else "")
            + (f"; hash tables grown to this run's rows a level: {', '.join(grown)}" if grown else "")
            + (f"; not carried: {', '.join(missed)}" if missed else "")
            + "; fresh optimizer"
        )


def _in_group(module: str) -> str:
    """The skip reason of a tensor whose group (of module path ``module``) was not carried."""
    return f"of group {module}"


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


def scene_match(run: Optional[Tuple[Any, Path]], data: Path) -> SceneMatch:
    """Whether the source ``run`` (:func:`run_config`) trained on scene ``data``: by the camera-file fingerprints
    when its config.yml recorded one and ``data`` has camera files, else by the recorded absolute path; a run saved
    before either was recorded, by its ``--data``, a relative one taken from the folder it ran in (its run
    folder less ``output_dir/experiment_name/method_name/timestamp``) or, where that cannot be told, from
    this working directory."""
    if run is None:
        return SceneMatch(False, "no readable config.yml beside it")
    config, run_folder = run
    here = Path(data).resolve()
    try:
        pipeline = config.pipeline
        recorded_path = pipeline.scene_path if isinstance(pipeline, AccelPipelineConfig) else None
        recorded_fingerprint = pipeline.scene_fingerprint if isinstance(pipeline, AccelPipelineConfig) else None
        source_data = pipeline.datamanager.data or pipeline.datamanager.dataparser.data
        base_dir = config.get_base_dir()
    except Exception:  # noqa: BLE001 - another tool's config: the scene is unknown, networks still load
        return SceneMatch(False, "its config.yml names no scene")
    fingerprint = scene_fingerprint(here) if recorded_fingerprint is not None else None
    if fingerprint is not None:
        same = fingerprint == recorded_fingerprint
        return SceneMatch(same, "same camera files" if same else "other camera files")
    if recorded_path is not None:
        same = Path(recorded_path) == here
        return SceneMatch(same, "same folder" if same else "another folder")
    if source_data is None:
        return SceneMatch(False, "its config.yml names no scene")
    source_data = Path(source_data)
    if source_data.is_absolute():
        same = source_data.resolve() == here
        return SceneMatch(same, "same folder" if same else "another folder")
    parts = base_dir.parts
    if not base_dir.is_absolute() and run_folder.parts[-len(parts) :] == parts:
        ran_in, by = Path(*run_folder.parts[: -len(parts)]), "its relative --data, from the folder it ran in"
    else:
        ran_in, by = Path.cwd(), "its relative --data, from this working directory"
    return SceneMatch((ran_in / source_data).resolve() == here, by)


def network_tensor_names(model: nn.Module) -> Set[str]:
    """State-dict names of every tensor inside an ``MLP`` module of ``model``."""
    names: Set[str] = set()
    for module_name, module in model.named_modules():
        if isinstance(module, MLP):
            prefix = f"{module_name}." if module_name else ""
            names.update(prefix + name for name in module.state_dict())
    return names


def learned_tensor_names(model: nn.Module) -> Set[str]:
    """Names of ``model``'s trainable, non-empty parameters outside its camera optimizer."""
    pose_parameters = {
        id(parameter)
        for module in model.modules()
        if isinstance(module, CameraOptimizer)
        for parameter in module.parameters()
    }
    return {
        name
        for name, parameter in model.named_parameters(remove_duplicate=False)
        if parameter.requires_grad and parameter.numel() > 0 and id(parameter) not in pose_parameters
    }


def tensor_groups(model: nn.Module) -> List[TensorGroup]:
    """The groups of ``model``'s state-dict tensors: one per outermost module with persistent buffers of its
    own, holding every tensor under it but its networks' (see the module docstring)."""
    state = model.state_dict()
    networks = network_tensor_names(model)
    learned = learned_tensor_names(model)
    buffers = {name for name, _ in model.named_buffers(remove_duplicate=False)}
    groups: List[TensorGroup] = []
    for path, module in model.named_modules():
        prefix = f"{path}."
        if not path or any(path.startswith(f"{group.module}.") for group in groups):
            continue
        if not any(prefix + name in state for name, _ in module.named_buffers(recurse=False)):
            continue
        names = [name for name in state if name.startswith(prefix) and name not in networks]
        structure = [name for name in names if name in buffers and name.rsplit(".", 1)[-1] in STRUCTURE_BUFFERS]
        hash_table = any(isinstance(inner, (MultiresHashEncoding, HashEncoding)) for inner in module.modules())
        groups.append(
            TensorGroup(path, type(module).__name__, names, structure, bool(learned & set(names)), hash_table)
        )
    return groups


def differing_hash_sizes(source_config: Any, target_config: Any) -> List[str]:
    """The :data:`HASH_GRID_SIZES` fields whose values differ between two model configs."""
    return [name for name in HASH_GRID_SIZES if _field(source_config, name) != _field(target_config, name)]


def _field(config: Any, path: str) -> Any:
    """The value at dotted ``path`` in ``config``, None where it has no such field."""
    for name in path.split("."):
        config = vars(config).get(name) if config is not None else None
    return config


def warm_start(model: nn.Module, init_from: Path, data: Path) -> WarmStartReport:
    """Copy into ``model``, in place, the tensors of ``init_from``'s checkpoint that fit (see the module
    docstring); ``data``: this run's scene folder. Raises :class:`CheckpointError` (one line) for a path
    without a checkpoint, an unreadable file, or one of which no learned tensor would load."""
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
    run = run_config(checkpoint)
    if run is not None:
        source_blocks = _field(run[0].pipeline.model, "spatial_blocks") or 1
        blocks = model.config.spatial_blocks
        if source_blocks != blocks:
            raise CheckpointError(
                f"{checkpoint} is of a run in {source_blocks} spatial block(s) and this run has {blocks}: their fields "
                f"cover other cells, so none carries over; warm start from a run with --pipeline.spatial-blocks "
                f"{blocks}, or train without --pipeline.model.init-from"
            )
    report = WarmStartReport(checkpoint, int(state.get("step", 0)), scene_match(run, data))
    report.grown = grow_smaller_tables(model, source)
    target = model.state_dict()
    growing = larger_tables_to_grow_into(model, source)
    target.update({name: source[name] for name in growing})  # they fit once grown, should they load
    misfits = {name: _misfit(source.get(name), tensor) for name, tensor in target.items()}
    networks = network_tensor_names(model)
    groups = tensor_groups(model)
    grouped = {name for group in groups for name in group.names}
    for name in target:
        if misfits[name] is not None:
            report.skipped[name] = misfits[name]
        elif name not in networks and not report.same_scene:
            report.skipped[name] = "scene tensors"
        elif name not in grouped:
            report.loaded.append(name)
    learned = learned_tensor_names(model)
    if report.same_scene and run is not None:
        for group in sorted(groups, key=lambda group: not group.learned):  # summaries after what they summarise
            why = _group_misfit(group, source, target, misfits, run[0].pipeline.model, model)
            if why is None and not group.learned and not learned <= set(report.loaded):
                why = "the field it summarises did not load whole"
            report.groups[group.module] = (group.kind, why)
            for name in group.names:
                if why is None:
                    report.loaded.append(name)
                else:
                    report.skipped[name] = _in_group(group.module)
    if not learned & set(report.loaded):
        raise CheckpointError(
            f"nothing learned in {checkpoint} fits this model (no network or field tensor: another method, or other "
            f"network sizes; {report.scene_phrase()}), so it would start cold; train without "
            f"--pipeline.model.init-from, or from a run of this method with the sizes in its config.yml"
        )
    for name, (encoding, log2_rows) in growing.items():
        if name in report.loaded:
            encoding.grow(log2_rows)
    model.load_state_dict({name: source[name] for name in report.loaded}, strict=False)
    return report


def grow_smaller_tables(model: nn.Module, source: Dict[str, Tensor]) -> Dict[str, Tuple[int, int]]:
    """Replace, in ``source`` (a checkpoint's model tensors), each hash table of ``model``'s layout with fewer rows
    a level by the table laid out in ``model``'s rows; returns their names with both sizes (as powers of two)."""
    grown = {}
    for name, (module, saved) in _saved_layouts(model, source).items():
        if saved.log2_hashmap_size < module.layout.log2_hashmap_size:
            source[name] = grow_table(source[name], saved, module.layout)
            grown[name] = (saved.log2_hashmap_size, module.layout.log2_hashmap_size)
    return grown


def larger_tables_to_grow_into(
    model: nn.Module, source: Dict[str, Tensor]
) -> Dict[str, Tuple[MultiresHashEncoding, int]]:
    """The hash tables of ``source`` with more rows a level than ``model``'s that its encodings grow to in training
    (``max_log2_hashmap_size``, a run of ``--pipeline.model.table-growth-step``), by name: the encoding and the rows
    (a power of two) to grow it to before the table loads."""
    return {
        name: (module, saved.log2_hashmap_size)
        for name, (module, saved) in _saved_layouts(model, source).items()
        if saved.log2_hashmap_size > module.layout.log2_hashmap_size and module.can_grow_to(saved)
    }


def _saved_layouts(
    model: nn.Module, source: Dict[str, Tensor]
) -> Dict[str, Tuple[MultiresHashEncoding, HashGridLayout]]:
    """``model``'s hash encodings whose table in ``source`` has another length that a layout of other rows a level
    gives, by table name, with that layout (a block's table, or a length no rows give, is refused later as of another
    shape)."""
    layouts = {}
    for path, module in model.named_modules():
        name = f"{path}.table"
        table = source.get(name)
        if not isinstance(module, MultiresHashEncoding) or table is None or table.shape == module.table.shape:
            continue
        saved = layout_of_length(module.layout, table.numel())
        if saved is not None:
            layouts[name] = (module, saved)
    return layouts


def _tables_grow(module: nn.Module) -> bool:
    """Whether every hash table under ``module`` is of this package's layout without dense levels past its rows:
    the tables that :func:`grow_smaller_tables` lays out in more rows (others of another size stay refused)."""
    tables = [inner for inner in module.modules() if isinstance(inner, (MultiresHashEncoding, HashEncoding))]
    return all(isinstance(table, MultiresHashEncoding) and table.layout.log2_dense_limit is None for table in tables)


def _misfit(source: Optional[Tensor], tensor: Tensor) -> Optional[str]:
    """Why the checkpoint's tensor (None: absent) cannot replace ``tensor``; None when it can."""
    if source is None:
        return "not in the checkpoint"
    if source.shape != tensor.shape:
        return "of another shape"
    return None


def _group_misfit(
    group: TensorGroup,
    source: Dict[str, Tensor],
    target: Dict[str, Tensor],
    misfits: Dict[str, Optional[str]],
    source_model: Any,
    model: nn.Module,
) -> Optional[str]:
    """Why ``group`` cannot load whole from ``source`` (a checkpoint's model tensors); None when it can."""
    for name in group.names:
        if misfits[name] is not None:
            return f"{name} {misfits[name]}"
    for name in group.structure:
        if not torch.equal(source[name].to(target[name].device, target[name].dtype), target[name]):
            return f"{name} differs"
    if group.hash_table:
        differing = differing_hash_sizes(source_model, model.config)
        if _tables_grow(model.get_submodule(group.module)):
            differing = [size for size in differing if size not in TABLE_ROWS]
        if differing:
            return f"hash grid of other sizes: {', '.join(differing)}"
    return None
