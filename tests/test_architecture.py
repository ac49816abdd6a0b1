"""The package's declared architecture holds: no import cycle, no attribute probe of its own components,
models that never ask which sampler they hold."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

PACKAGE = Path(__file__).resolve().parents[1] / "nerfstudio_accel"

FOREIGN_PROBES = {
    ("pipelines/hard_mining.py", "getattr(node, 'variable', None)"): "autograd's AccumulateGrad nodes hold their leaf",
    (
        "pipelines/accel_pipeline.py",
        "getattr(parser, 'alpha_color', None)",
    ): "nerfstudio parsers with an alpha_color field",
    (
        "viewer/training_viewer.py",
        "getattr(viewer_state, 'control_panel', None)",
    ): "nerfstudio's viewer has one, the legacy one not",
    ("viewer/training_viewer.py", "getattr(viewer_state, 'viser_server', None)"): "likewise, its viser server",
    (
        "bench/budget.py",
        "getattr(pipeline.datamanager.config, 'train_num_rays_per_batch', 0)",
    ): "any nerfstudio datamanager",
    ("bench/configs.py", "hasattr(datamanager, 'camera_res_scale_factor')"): "any nerfstudio datamanager",
    ("bench/configs.py", "hasattr(parser, 'downscale_factor')"): "any nerfstudio data parser",
    (
        "metrics.py",
        "getattr(module, 'LearnedPerceptualImagePatchSimilarity', None)",
    ): "nerfstudio's modules that name LPIPS",
    ("data/prefetching_datamanager.py", "getattr(value, item.name)"): "the fields of any dataclass in a batch",
    ("scenes/cli.py", "getattr(args, name)"): "argparse's namespace",
}
"""The getattr/hasattr calls that stay, each on something outside this package, and why."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_level_imports(path: Path) -> Set[str]:
    """This package's modules imported at module level (not inside functions or TYPE_CHECKING blocks)."""
    imported: Set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nerfstudio_accel"):
            imported.add(node.module)
            imported.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names if alias.name.startswith("nerfstudio_accel"))
    return imported


def test_no_import_cycle_between_modules():
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: Dict[str, List[str]] = {
        name: sorted(target for target in module_level_imports(path) if target in modules and target != name)
        for name, path in modules.items()
    }
    state: Dict[str, int] = {}
    cycles: List[List[str]] = []

    def visit(name: str, trail: List[str]) -> None:
        state[name] = 1
        for target in graph[name]:
            if state.get(target) == 1:
                cycles.append(trail[trail.index(target) :] + [target])
            elif target not in state:
                visit(target, trail + [target])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, f"import cycles: {cycles}"


def test_every_attribute_probe_is_of_something_outside_the_package():
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
            ):
                found.add((path.relative_to(PACKAGE).as_posix(), ast.unparse(node)))
    assert found <= set(FOREIGN_PROBES), f"probes not in FOREIGN_PROBES: {sorted(found - set(FOREIGN_PROBES))}"


def test_models_never_ask_which_sampler_they_hold():
    sampler_classes = {"Sampler", "OccupancySampler", "ProposalSampler"}
    for path in (PACKAGE / "models").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
                classes = ast.unparse(node.args[1])
                assert not any(name in classes for name in sampler_classes), f"{path.name}: {ast.unparse(node)}"


def test_library_code_raises_no_system_exit_outside_entry_points():
    """Only entry points turn errors into exits (ns-train's through the trainer, the package's own CLIs)."""
    entry_points = {"engine/trainer.py", "bench/cli.py", "bench/worker.py", "scenes/cli.py"}
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in entry_points:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            raised = node.exc if isinstance(node, ast.Raise) and node.exc is not None else None
            if raised is not None:
                assert "SystemExit" not in ast.unparse(raised), f"{relative} raises SystemExit; raise an AccelError"
