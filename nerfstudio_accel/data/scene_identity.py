"""Which scene a run trained on, told apart from the path it was given: a fingerprint of the scene's camera files.

The camera files hold what a run's scene tensors (hash grid, occupancy grid, per-image embeddings) are laid
out by: every image's pose and intrinsics, hence the scene box and the images' order. Two folders with the
same camera files (a copy, a symlink, the same folder by another relative path) are one scene; the same
folder after its cameras changed is another. The images themselves are not read: the same cameras at another
resolution (``images_2/``, a downscaled copy) are the same scene. The camera files are, whatever the parser:

- ``transforms*.json`` at the folder's top (blender-data's ``transforms_{train,val,test}.json``,
  nerfstudio-data's ``transforms.json``), or the ``.json`` file itself when ``--data`` names one;
- the COLMAP models (``cameras`` and ``images``, ``.bin`` or ``.txt``) in the folders ``ns-process-data`` and
  COLMAP write (:data:`~nerfstudio_accel.data.scene_checks.COLMAP_MODEL_FOLDERS`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import List, Optional

from nerfstudio_accel.data.scene_checks import COLMAP_MODEL_FOLDERS

CAMERA_FILE_PATTERNS = ("transforms*.json",) + tuple(
    f"{folder}/{name}.{ext}"
    for folder in COLMAP_MODEL_FOLDERS
    for name in ("cameras", "images")
    for ext in ("bin", "txt")
)
"""Where a scene folder's camera files are, as globs relative to it."""


def camera_files(data: Path) -> List[Path]:
    """The camera files of scene ``data`` (a folder, or nerfstudio-data's ``.json`` itself), sorted by path;
    empty where there are none (a parser whose files are elsewhere)."""
    data = Path(data)
    if data.is_file():
        return [data]
    if not data.is_dir():
        return []
    return sorted({path for pattern in CAMERA_FILE_PATTERNS for path in data.glob(pattern) if path.is_file()})


def scene_fingerprint(data: Path) -> Optional[str]:
    """SHA-256 (64 hex digits) of scene ``data``'s camera files: their paths relative to the scene folder and
    their bytes. None without camera files."""
    data = Path(data)
    files = camera_files(data)
    if not files:
        return None
    folder = data.parent if data.is_file() else data
    digest = hashlib.sha256()
    for path in files:
        content = hashlib.sha256()
        with path.open("rb") as stream:
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                content.update(chunk)
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + content.digest())
    return digest.hexdigest()
