"""Tests for the noise-textured photo generator (a folder of photos for ns-process-data); that COLMAP registers
its photos is ``tests/data/test_own_capture.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from nerfstudio_accel.scenes.photo_scene import TABLE_SIZE, PhotoSceneSpec, cell_noise, generate_photos

SPEC = PhotoSceneSpec(num_train=3, resolution=24, supersample=1, seed=1)


def test_photos_are_only_rgb_pngs_of_the_spec_size_and_fixed_by_the_seed(tmp_path: Path):
    first = generate_photos(tmp_path / "a", SPEC)
    again = generate_photos(tmp_path / "b", SPEC)
    other = generate_photos(tmp_path / "c", PhotoSceneSpec(num_train=3, resolution=24, supersample=1, seed=2))

    names = sorted(path.name for path in first.iterdir())
    assert names == ["IMG_0001.png", "IMG_0002.png", "IMG_0003.png"]  # no poses, no json: photos only
    for name in names:
        with Image.open(first / name) as image:
            assert image.mode == "RGB" and image.size == (SPEC.resolution, SPEC.height)
        assert (first / name).read_bytes() == (again / name).read_bytes()
    assert any((first / name).read_bytes() != (other / name).read_bytes() for name in names)
    views = [np.asarray(Image.open(first / name)) for name in names]
    assert not np.array_equal(views[0], views[1])  # the cameras move


def test_cell_noise_is_one_colour_per_cell_and_does_not_repeat_across_cells():
    table = np.random.default_rng(0).uniform(size=(TABLE_SIZE, 3))
    corners = np.stack(np.meshgrid(*[np.arange(10)] * 2, [0], indexing="ij"), axis=-1).reshape(-1, 3) * 0.5
    inside = corners + np.array([0.1, 0.4, 0.2])  # the same cells of side 0.5, elsewhere inside them

    colours = cell_noise(corners + 0.01, 0.5, table)

    np.testing.assert_array_equal(colours, cell_noise(inside, 0.5, table))
    assert len(np.unique(colours, axis=0)) >= 95  # 100 neighbouring cells, (almost) all different
