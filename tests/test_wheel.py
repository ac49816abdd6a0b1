"""The release wheel: ``python -m build --wheel`` on a copy of the source tree makes a wheel with every module of
the package (the numba and Triton kernels included), the methods' entry points and console scripts, the version
of ``nerfstudio_accel.__version__``, and nothing from tests/, docs/, benchmarks/ or scripts/.

The build runs without network (``--no-isolation``, setuptools and build from the test extras) on a copy, so the
checkout gets no build/ or egg-info folders.
"""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import List

import pytest

import nerfstudio_accel

REPO = Path(__file__).resolve().parents[1]
SOURCE_PARTS = ("pyproject.toml", "README.md", "LICENSE", "nerfstudio_accel", "tests", "docs", "benchmarks", "scripts")
"""What is copied: the package and what must stay out of its wheel."""


def package_modules() -> List[str]:
    """Every module of the package in the checkout, as wheel paths (``nerfstudio_accel/ops/marching.py``...)."""
    return sorted(
        path.relative_to(REPO).as_posix()
        for path in (REPO / "nerfstudio_accel").rglob("*.py")
        if "__pycache__" not in path.parts
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    source = tmp_path_factory.mktemp("source")
    for part in SOURCE_PARTS:
        origin = REPO / part
        if origin.is_dir():
            shutil.copytree(origin, source / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(origin, source / part)
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (path,) = out.glob("*.whl")
    with zipfile.ZipFile(path) as archive:
        yield archive


def test_the_wheel_holds_every_module_and_its_kernels(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    missing = [module for module in package_modules() if module not in names]
    assert not missing, f"modules missing from the wheel: {missing}"
    kernels = {name for name in names if name.startswith("nerfstudio_accel/kernels/")}
    assert any(name.endswith("_numba.py") for name in kernels) and any(name.endswith("_triton.py") for name in kernels)


def test_the_wheel_holds_nothing_but_the_package(wheel: zipfile.ZipFile) -> None:
    top_level = {name.split("/", 1)[0] for name in wheel.namelist()}
    version = nerfstudio_accel.__version__
    assert top_level == {"nerfstudio_accel", f"nerfstudio_accel-{version}.dist-info"}, top_level
    assert not [name for name in wheel.namelist() if "__pycache__" in name or name.endswith(".pyc")]


def test_the_wheel_declares_the_version_the_methods_and_the_commands(wheel: zipfile.ZipFile) -> None:
    dist_info = f"nerfstudio_accel-{nerfstudio_accel.__version__}.dist-info"
    metadata = Parser().parsestr(wheel.read(f"{dist_info}/METADATA").decode())
    assert metadata["Name"] == "nerfstudio-accel" and metadata["Version"] == nerfstudio_accel.__version__
    assert any(requirement.startswith("nerfstudio") for requirement in metadata.get_all("Requires-Dist"))
    entry_points = configparser.ConfigParser()
    entry_points.read_string(wheel.read(f"{dist_info}/entry_points.txt").decode())
    assert set(entry_points["nerfstudio.method_configs"]) == {"accel-ngp", "accel-nerfacto"}
    assert set(entry_points["console_scripts"]) == {"ns-accel-scene", "ns-accel-bench"}
