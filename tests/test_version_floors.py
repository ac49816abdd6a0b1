"""The libraries' version floors: declared in pyproject.toml, checked where the package starts, named in one line."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from nerfstudio_accel.version_floors import VERSION_FLOORS, UnsupportedVersion, check_version_floors, release


def test_release_numbers_ignore_local_and_pre_release_tags():
    assert release("2.4.1+cu121") == (2, 4, 1)
    assert release("2.10.0") > release("2.4")
    assert release("0.59.0rc1") == (0, 59, 0)


def test_an_old_torch_is_named_in_one_line_with_the_fix():
    with pytest.raises(UnsupportedVersion) as refusal:
        check_version_floors({"torch": "2.1.2", "numba": "0.60.0"})
    message = str(refusal.value)
    assert "\n" not in message and "torch >= 2.4" in message and "found 2.1.2" in message
    assert "pip install --upgrade 'torch>=2.4'" in message


def test_versions_at_the_floor_and_missing_optional_libraries_pass():
    check_version_floors({name: ".".join(map(str, floor)) for name, (floor, _) in VERSION_FLOORS.items()})
    check_version_floors({"torch": "2.11.0", "triton": None})
    check_version_floors()  # this environment


def test_pyproject_declares_the_same_floors():
    dependencies = re.search(
        r"\ndependencies = \[(.*?)\n\]", (Path(__file__).parents[1] / "pyproject.toml").read_text(), re.S
    )
    declared = {name: release(version) for name, version in re.findall(r'"([a-z]+)>=([0-9.]+)', dependencies.group(1))}
    for name, (floor, _) in VERSION_FLOORS.items():
        if name != "triton":  # comes with torch on Linux; not a dependency of its own
            assert declared.get(name) == floor, name


OLD_TORCH_SCRIPT = textwrap.dedent(
    """
    import importlib.metadata, json
    real = importlib.metadata.version
    importlib.metadata.version = lambda name: "2.1.2" if name == "torch" else real(name)
    from nerfstudio.configs.method_configs import all_methods  # what ns-train builds its subcommands from
    print("ALL " + json.dumps(sorted(all_methods)), flush=True)
    """
)


def test_ns_train_with_an_old_torch_lists_the_reason_and_keeps_nerfstudio_methods(run_cli):
    code, out, err = run_cli("python", "-c", OLD_TORCH_SCRIPT, timeout=120)
    assert code == 0 and "Traceback" not in out + err, err[-3000:]
    listed = next(line for line in out.splitlines() if line.startswith("ALL "))
    assert "accel-ngp" not in listed and "nerfacto" in listed
    assert "<accel-ngp unavailable: nerfstudio-accel needs torch >= 2.4" in " ".join((out + err).split())
