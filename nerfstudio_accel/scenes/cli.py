"""``ns-accel-scene OUT_DIR``: write the procedural Blender-format scene, or with ``--unbounded`` the
capture-like nerfstudio-data scene, into a folder."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from nerfstudio_accel.scenes.object_scene import SceneSpec, generate_scene
from nerfstudio_accel.scenes.unbounded_scene import UnboundedSceneSpec, generate_unbounded_scene

DESCRIPTION = (
    "Procedural synthetic scenes written in the Blender (NeRF-synthetic) format. "
    "With --unbounded: a capture-like scene in nerfstudio-data format."
)


def main(argv: list[str] | None = None) -> int:
    """CLI: ns-accel-scene OUT_DIR [--unbounded] [--num-train N] [--num-val N] [--num-test N]
    [--resolution PX] [--supersample S] [--seed S] [--force]. Returns the exit code."""
    parser = argparse.ArgumentParser(prog="ns-accel-scene", description=DESCRIPTION)
    parser.add_argument("out_dir", type=Path, metavar="OUT_DIR", help="folder to write the scene into")
    parser.add_argument(
        "--unbounded",
        action="store_true",
        help="instead: the object on an endless textured ground inside a far backdrop, seen from a "
        "240-degree arc, in nerfstudio-data format (transforms.json, images/, 4:3 RGB)",
    )
    parser.add_argument("--num-train", type=int, help=f"training views (default {SceneSpec.num_train})")
    parser.add_argument("--num-val", type=int, help=f"validation views (default {SceneSpec.num_val})")
    parser.add_argument("--num-test", type=int, help=f"test views (default {SceneSpec.num_test})")
    parser.add_argument(
        "--resolution",
        type=int,
        help=f"image width in pixels; height = width, or 3/4 of it with --unbounded "
        f"(default {SceneSpec.resolution}, --unbounded {UnboundedSceneSpec.resolution})",
    )
    parser.add_argument(
        "--supersample", type=int, help=f"anti-aliasing rays per axis (default {SceneSpec.supersample})"
    )
    parser.add_argument("--seed", type=int, help=f"varies colours and positions (default {SceneSpec.seed})")
    parser.add_argument("--force", action="store_true", help="write into OUT_DIR even if it is not empty")
    args = parser.parse_args(argv)

    out_dir: Path = args.out_dir
    if out_dir.exists() and not out_dir.is_dir():
        print(f"error: OUT_DIR {out_dir} is not a directory", file=sys.stderr)
        return 2
    if out_dir.is_dir() and any(out_dir.iterdir()) and not args.force:
        print(f"error: OUT_DIR {out_dir} is not empty; pass --force to overwrite", file=sys.stderr)
        return 2
    spec_type, generate = (
        (UnboundedSceneSpec, generate_unbounded_scene) if args.unbounded else (SceneSpec, generate_scene)
    )
    names = ("num_train", "num_val", "num_test", "resolution", "supersample", "seed")
    try:
        spec = spec_type(**{name: getattr(args, name) for name in names if getattr(args, name) is not None})
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    start = time.perf_counter()
    generate(out_dir, spec)
    seconds = time.perf_counter() - start
    views = spec.num_train + spec.num_val + spec.num_test
    print(
        f"wrote {views} views ({spec.num_train} train / {spec.num_val} val / {spec.num_test} test) "
        f"at {spec.resolution}x{spec.height} to {out_dir} in {seconds:.2f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
