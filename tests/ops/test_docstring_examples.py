"""Every public op's docstring example runs and prints what it says (on CPU tensors, the default ``torch``
backend)."""

from __future__ import annotations

import doctest
import importlib

import pytest
import torch

OP_MODULES = ["marching", "ray_aabb", "volume_rendering", "packed_scan", "hash_encoding", "direction_encoding"]


@pytest.mark.parametrize("name", OP_MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"nerfstudio_accel.ops.{name}")
    results = doctest.testmod(module, extraglobs={"torch": torch}, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert results.attempted > 0 and results.failed == 0, f"{name}: {results}"
