"""The oldest versions of the libraries this package runs with, checked where it starts.

pip keeps an installed torch that satisfies nerfstudio (whose install guide pins 2.1.2) unless a floor says
otherwise; the floor in pyproject.toml makes pip upgrade it, and :func:`check_version_floors` names the
problem in one line where an older one is found anyway (an environment installed with ``--no-deps``).
"""

from __future__ import annotations

import importlib.metadata
import re
from typing import Dict, Optional, Tuple

from nerfstudio_accel.errors import AccelError

VERSION_FLOORS: Dict[str, Tuple[Tuple[int, ...], str]] = {
    "torch": ((2, 4), "torch.amp.GradScaler(device), torch.get_autocast_dtype"),
    "numba": ((0, 59), "the CPU kernels' parallel loops"),
    "nerfacc": ((0, 5), "the OccGridEstimator"),
    "triton": ((3, 0), "the CUDA kernels' int64 offsets and tl.math"),
}
"""Distribution -> (oldest version, what this package needs from it). pyproject.toml declares the same floors
(triton comes with torch on Linux and is not declared)."""


class UnsupportedVersion(AccelError):
    """An installed library older than :data:`VERSION_FLOORS` allows."""


def release(version: str) -> Tuple[int, ...]:
    """The leading release numbers of a version string: ``"2.4.1+cu121"`` -> ``(2, 4, 1)``."""
    match = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(part) for part in match.group(0).split(".")) if match else ()


def installed_version(distribution: str) -> Optional[str]:
    """The installed version of ``distribution``, or None when it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_version_floors(versions: Optional[Dict[str, Optional[str]]] = None) -> None:
    """Raise :class:`UnsupportedVersion` (one line, with the pip command) for the first installed library of
    :data:`VERSION_FLOORS` older than its floor; ``versions``: name -> version (default: what is installed;
    None: not installed, which is not checked here)."""
    for name, (floor, needed_for) in VERSION_FLOORS.items():
        version = versions.get(name) if versions is not None else installed_version(name)
        if version is not None and release(version) < floor:
            wanted = ".".join(map(str, floor))
            raise UnsupportedVersion(
                f"nerfstudio-accel needs {name} >= {wanted} ({needed_for}), found {version}; "
                f"pip install --upgrade '{name}>={wanted}'"
            )
