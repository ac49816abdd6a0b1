"""numba's cache of the kernels is dropped when any kernel source changed, also one whose functions another file's
kernel inlines (numba itself only watches the defining file)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from nerfstudio_accel.kernels.stale_cache import STAMP_NAME, drop_stale_compiled_kernels


def fake_cache(folder: Path) -> list:
    """Two cache files as numba names them, in ``folder/__pycache__``."""
    cache = folder / "__pycache__"
    cache.mkdir(exist_ok=True)
    files = [cache / "kernel.run-3.py311.nbi", cache / "kernel.run-3.py311.1.nbc"]
    for path in files:
        path.write_bytes(b"compiled")
    return files


def test_cache_files_go_when_a_source_changes_and_stay_while_none_does(tmp_path):
    (tmp_path / "helper.py").write_text("ONE = 1\n")
    files = fake_cache(tmp_path)
    assert drop_stale_compiled_kernels(tmp_path)  # no digest yet: compiled from unknown sources
    assert not any(path.exists() for path in files) and (tmp_path / "__pycache__" / STAMP_NAME).is_file()
    files = fake_cache(tmp_path)
    assert not drop_stale_compiled_kernels(tmp_path)
    assert all(path.exists() for path in files)
    (tmp_path / "helper.py").write_text("ONE = 2\n")
    assert drop_stale_compiled_kernels(tmp_path)
    assert not any(path.exists() for path in files)
    (tmp_path / "new_kernel.py").write_text("")  # a new source file changes the digest too
    files = fake_cache(tmp_path)
    assert drop_stale_compiled_kernels(tmp_path) and not any(path.exists() for path in files)


HELPER = """
import numba


@numba.njit(inline="always")
def value():
    return {value}
"""
KERNEL = """
import numba

from kernels_under_test.helper import value


@numba.njit(cache=True)
def run():
    return value()
"""
RUN = """
import sys
from pathlib import Path

sys.path.insert(0, sys.argv[1])
if sys.argv[2] == "guarded":
    from nerfstudio_accel.kernels.stale_cache import drop_stale_compiled_kernels

    drop_stale_compiled_kernels(Path(sys.argv[1]) / "kernels_under_test")
from kernels_under_test.kernel import run

print(run())
"""


def test_a_cached_kernel_is_compiled_again_after_an_inlined_helper_in_another_file_changed(tmp_path):
    """A real numba kernel cached on disk, inlining a helper from another file: after the helper changes, the guarded
    process runs the new helper (numba alone, the control, loads the old machine code)."""
    package = tmp_path / "kernels_under_test"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "kernel.py").write_text(textwrap.dedent(KERNEL))
    (tmp_path / "run.py").write_text(textwrap.dedent(RUN))

    def result(mode: str) -> str:
        command = [sys.executable, str(tmp_path / "run.py"), str(tmp_path), mode]
        environment = {name: value for name, value in os.environ.items() if name != "NUMBA_CACHE_DIR"}  # beside it
        return subprocess.run(command, capture_output=True, text=True, check=True, env=environment).stdout.strip()

    (package / "helper.py").write_text(textwrap.dedent(HELPER.format(value=1)))
    assert result("guarded") == "1"
    assert list((package / "__pycache__").glob("*.nbi"))  # cached on disk
    (package / "helper.py").write_text(textwrap.dedent(HELPER.format(value=2)))
    control = result("unguarded")
    assert result("guarded") == "2", f"stale kernel (numba alone gave {control})"
