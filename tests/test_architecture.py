"""The package's declared architecture holds: no import cycle, kernels and ops below everything else, the bench and
the viewer on top, backend choices only in the ops and the config resolution, no attribute probe of its own
components, nothing that asks which sampler it holds, and tests that mirror the lower layers' modules."""

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


def package_imports(path: Path) -> Set[str]:
    """This package's modules ``path`` imports anywhere: at module level, inside functions and in TYPE_CHECKING
    blocks (``from package import module`` names both)."""
    imported: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nerfstudio_accel"):
            imported.add(node.module)
            imported.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names if alias.name.startswith("nerfstudio_accel"))
    return imported


def test_no_import_cycle_between_modules():
    """Counting every import: module level, in functions, under TYPE_CHECKING."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: Dict[str, List[str]] = {
        name: sorted(target for target in package_imports(path) if target in modules and target != name)
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


LOWER_LAYERS = {"kernels": {"kernels"}, "ops": {"kernels", "ops", "errors"}}
"""The package's lowest layers and all they may import of it: the kernels nothing else, the ops the kernels
(and the package's error types); samplers, encodings, fields, the renderer, models and the rest sit above."""


def test_kernels_and_ops_import_nothing_above_them():
    for layer, allowed in LOWER_LAYERS.items():
        for path in (PACKAGE / layer).glob("*.py"):
            above = {
                target
                for target in package_imports(path)
                if target != "nerfstudio_accel" and target.split(".")[1] not in allowed
            }
            assert not above, f"{layer}/{path.name} imports from above its layer: {sorted(above)}"


UPPER_LAYERS = {
    "bench": set(),
    "viewer": {"engine/trainer.py", "models/accel_ngp.py", "models/accel_nerfacto.py"},
}
"""The package's top layers and the only modules outside them that may import them: nothing builds on the bench;
the trainer attaches the viewer's panel, the models hold the finished run's viewer."""


def test_the_bench_and_the_viewer_sit_on_top():
    for layer, importers in UPPER_LAYERS.items():
        for path in PACKAGE.rglob("*.py"):
            relative = path.relative_to(PACKAGE).as_posix()
            if relative.startswith(f"{layer}/") or relative in importers:
                continue
            reaching = {target for target in package_imports(path) if target.startswith(f"nerfstudio_accel.{layer}")}
            assert not reaching, f"{relative} imports the {layer} layer: {sorted(reaching)}"


BACKEND_NAMES = {"nerfacc", "kernel"}
BACKEND_BRANCHES = {
    "ops/backends.py",
    "ops/marching.py",
    "ops/volume_rendering.py",
    "ops/hash_encoding.py",
    "ops/direction_encoding.py",
}
"""The only files that compare with a compiled backend's name: the config resolution and the ops that dispatch."""


def compares_with_a_backend_name(node: ast.AST) -> bool:
    if not isinstance(node, ast.Compare):
        return False
    for operand in [node.left, *node.comparators]:
        elements = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
        if any(isinstance(element, ast.Constant) and element.value in BACKEND_NAMES for element in elements):
            return True
    return False


def test_only_the_ops_and_the_config_resolution_branch_on_a_backend():
    """Samplers, the renderer, encodings and fields pass a resolved backend on to the ops and never branch on it;
    no flag stands for one backend."""
    branching = set()
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        source = path.read_text()
        for flag in ("use_nerfacc", "composites_with_nerfacc"):
            assert flag not in source, f"{relative} names {flag}; pass the resolved backend to the ops"
        if any(compares_with_a_backend_name(node) for node in ast.walk(ast.parse(source))):
            branching.add(relative)
    assert branching <= BACKEND_BRANCHES, f"backend branches outside the ops: {sorted(branching - BACKEND_BRANCHES)}"


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


def test_at_most_eight_attribute_probes_remain():
    assert len(FOREIGN_PROBES) <= 8, "a declared interface instead of a new probe"


def test_nothing_asks_which_sampler_it_holds():
    """Models, the viewer and the rest reach a sampler through the Sampler interface only."""
    sampler_classes = {"Sampler", "OccupancySampler", "ProposalSampler"}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
                named = {part.id for part in ast.walk(node.args[1]) if isinstance(part, ast.Name)}
                named |= {part.attr for part in ast.walk(node.args[1]) if isinstance(part, ast.Attribute)}
                assert not named & sampler_classes, f"{path.name}: {ast.unparse(node)}"


def test_packed_samples_carry_geometry_only():
    """Rays, their intervals and the image each ray is from; what samplers and models compute stays with them."""
    from dataclasses import fields

    from nerfstudio_accel.sampling.packed import PackedSamples

    names = [field.name for field in fields(PackedSamples)]
    assert names == ["ray_indices", "t_starts", "t_ends", "origins", "directions", "camera_indices"]


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


MIRRORED_LAYERS = ("kernels", "ops", "fields", "sampling")
"""Folders whose every module has its tests in ``tests/<folder>/test_<module>.py`` (a leading ``_`` dropped), or
in the file :data:`TESTED_IN` names."""
TESTED_IN = {
    "kernels/compositing_numba.py": "ops/test_volume_rendering.py",
    "kernels/density_network.py": "kernels/test_culling_numba.py",
    "kernels/spherical_harmonics_numba.py": "ops/test_direction_encoding.py",
    "kernels/hash_encoding_numba.py": "ops/test_hash_encoding_backends.py",
    "kernels/hash_layout.py": "encodings/test_hash_encoding.py",
    "kernels/lattice.py": "ops/test_marching.py",
    "kernels/marching_numba.py": "ops/test_marching.py",
    "kernels/packed_rays.py": "ops/test_volume_rendering.py",
    "ops/hash_encoding.py": "ops/test_hash_encoding_backends.py",  # the encodings module's test has that file name
    "ops/_hash_encoding_torch.py": "ops/test_hash_encoding_backends.py",
    "ops/precision.py": "ops/test_torch_impl.py",
    "sampling/base.py": "sampling/test_sampler_interface.py",
    "sampling/packed.py": "sampling/test_sampler_interface.py",
    "sampling/proposal_ops.py": "sampling/test_proposal.py",
}
"""Modules tested beside another one's, and where."""


def test_the_lower_layers_tests_mirror_their_modules():
    tests = Path(__file__).resolve().parent
    for layer in MIRRORED_LAYERS:
        for path in (PACKAGE / layer).glob("*.py"):
            if path.name == "__init__.py":
                continue
            relative = path.relative_to(PACKAGE).as_posix()
            expected = TESTED_IN.get(relative, f"{layer}/test_{path.stem.lstrip('_')}.py")
            assert (tests / expected).is_file(), f"{relative} has no tests/{expected}"
