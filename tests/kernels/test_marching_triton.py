"""The Triton marcher against the torch reference under ``TRITON_INTERPRET=1`` on CPU tensors (the scenes of
``tests/ops/test_marching.py``, rays from inside and outside the box, misses, no rays, an empty grid), and through
Triton's compiler to GPU code (no GPU needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from accel_test_helpers import TRITON_INTERPRETER_ENV
from accel_test_helpers import marching_scene as scene

SCENES = {
    # name: (levels, step_size, cone_angle, rays), as in tests/ops/test_marching.py
    "bounded": (1, 2 * 3**0.5 / 1000, 0.0, "one-block"),
    "contracted-cone": (4, 2 * 3**0.5 / 256, 1 / 256, "one-block"),
    "coarse-cone": (2, 0.01, 0.02, "two-blocks"),
}
# The interpreter's time grows with the blocks' lattice steps (~700 per block in the first two scenes), hardly with
# the rays in a block: one block of 128 rays there (40 starting inside the box, 80 outside, 8 missing it), two
# blocks (the second one partial) in the shorter coarse-cone scene.
RAYS = {
    "one-block": torch.cat([torch.arange(0, 40), torch.arange(100, 180), torch.arange(1492, 1500)]),
    "two-blocks": torch.cat([torch.arange(0, 60), torch.arange(100, 220), torch.arange(1480, 1500)]),
}


TRITON_INTERPRETER_CHECK = textwrap.dedent(
    """
    import json, os, sys, time
    assert os.environ["TRITON_INTERPRET"] == "1"
    import torch
    from nerfstudio_accel.kernels import marching_triton
    from nerfstudio_accel.ops import _torch_impl

    def summary(actual, expected, seconds):
        same_rays = actual[0].shape == expected[0].shape and torch.equal(actual[0], expected[0])
        errors = [
            float(((a - e).abs() / (1.0 + e.abs())).max()) if same_rays and e.numel() else None
            for a, e in zip(actual[1:], expected[1:])
        ]
        return {
            "expected": expected[0].numel(), "actual": actual[0].numel(), "same_rays": same_rays,
            "dtypes": [str(t.dtype) for t in actual], "bit_equal": same_rays and all(
                torch.equal(a, e) for a, e in zip(actual[1:], expected[1:])
            ), "errors": errors, "seconds": seconds,
        }

    report = {}
    for name, (inputs, step_size, cone_angle) in torch.load(sys.argv[1]).items():
        expected = _torch_impl.traverse_occupancy_grid(*inputs, step_size, cone_angle)
        start = time.perf_counter()
        actual = marching_triton.traverse_occupancy_grid(*inputs, step_size, cone_angle)
        report[name] = summary(actual, expected, time.perf_counter() - start)

    origins, directions, binaries, aabbs, near, far = torch.load(sys.argv[1])["bounded"][0]
    no_rays = marching_triton.traverse_occupancy_grid(
        origins[:0], directions[:0], binaries, aabbs, near[:0], far[:0], 0.01
    )
    report["no-rays"] = [t.numel() for t in no_rays] + [str(t.dtype) for t in no_rays]
    empty_grid = marching_triton.traverse_occupancy_grid(
        origins[:20], directions[:20], torch.zeros_like(binaries), aabbs, near[:20], far[:20], 0.01, 0.02
    )
    report["empty-grid"] = [t.numel() for t in empty_grid] + [str(t.dtype) for t in empty_grid]
    print(json.dumps(report))
    """
)


def test_triton_marcher_matches_reference_in_interpreter_mode(tmp_path):
    """The CUDA kernels' source, run by Triton's interpreter on CPU tensors, keeps the reference's samples."""
    pytest.importorskip("triton")
    scenes = {}
    for name, (levels, step_size, cone_angle, rays) in SCENES.items():
        origins, directions, binaries, aabbs, near, far = scene(levels, seed=levels)
        chosen = RAYS[rays]
        inputs = (origins[chosen], directions[chosen], binaries, aabbs, near[chosen], far[chosen])
        scenes[name] = (inputs, step_size, cone_angle)
    torch.save(scenes, tmp_path / "scenes.pt")
    env = {**os.environ, **TRITON_INTERPRETER_ENV}
    done = subprocess.run(
        [sys.executable, "-c", TRITON_INTERPRETER_CHECK, str(tmp_path / "scenes.pt")],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    for name, (_, _, cone_angle, _) in SCENES.items():
        result = report[name]
        assert result["expected"] > 1000, result  # the grids are neither empty nor trivially full
        assert result["same_rays"], result
        assert result["dtypes"] == ["torch.int64", "torch.float32", "torch.float32"]
        if cone_angle == 0.0:  # uniform steps are bit-identical
            assert result["bit_equal"], result
        else:  # geometric steps may differ by an ulp of pow(): |a - e| <= 1e-6 (1 + |e|), as rtol = atol = 1e-6
            assert max(result["errors"]) <= 1e-6, result
    assert report["no-rays"] == [0, 0, 0, "torch.int64", "torch.float32", "torch.float32"]
    assert report["empty-grid"] == [0, 0, 0, "torch.int64", "torch.float32", "torch.float32"]


POINTER_ARGUMENTS = {
    "origins_ptr": "*fp32", "directions_ptr": "*fp32", "near_ptr": "*fp32", "t_min_ptr": "*fp32",
    "t_max_ptr": "*fp32", "k_first_ptr": "*fp32", "counts_ptr": "*i64", "binaries_ptr": "*u8", "aabbs_ptr": "*fp32",
}  # fmt: skip
SCALAR_ARGUMENTS = {
    "res_x": "i32", "res_y": "i32", "res_z": "i32", "num_rays": "i32",
    "step_size": "fp32", "cone_angle": "fp32", "growth": "fp32", "t_switch": "fp32",
}  # fmt: skip
OUTPUT_ARGUMENTS = {
    "kept_ptr": "*i64", "offsets_ptr": "*i64", "ray_indices_ptr": "*i64", "t_starts_ptr": "*fp32",
    "t_ends_ptr": "*fp32",
}  # fmt: skip


@pytest.mark.parametrize("fill", [False, True], ids=["count", "fill"])
@pytest.mark.parametrize("levels, geometric", [(1, False), (4, True)], ids=["bounded", "contracted-cone"])
def test_triton_marcher_compiles_to_gpu_code_without_a_gpu(fill, levels, geometric):
    """Triton's compiler (front end to cubin, for sm_80) accepts both passes, the loop bounded by the block's
    longest lattice included; the interpreter alone would not notice code that only the compiler rejects.
    The launch options (no fused multiply-adds) go through, and divisions are IEEE ones."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from nerfstudio_accel.kernels import marching_triton as kernels

    constants = {"NUM_LEVELS": levels, "FILL": fill, "GEOMETRIC": geometric, "BLOCK": kernels.BLOCK_RAYS}
    signature = {
        **POINTER_ARGUMENTS, **SCALAR_ARGUMENTS, **OUTPUT_ARGUMENTS, **{name: "constexpr" for name in constants},
    }  # fmt: skip
    compiled = triton.compile(
        ASTSource(kernels._march_kernel, signature, constants),
        target=GPUTarget("cuda", 80, 32),
        options=dict(kernels.LAUNCH_OPTIONS),
    )
    assert compiled.asm["cubin"]
    ptx = compiled.asm["ptx"]
    assert "div.rn.f32" in ptx and "div.full.f32" not in ptx and "div.approx.f32" not in ptx
    assert "fma.rn.f32" not in ptx


@pytest.mark.parametrize(
    "missing, named",
    [("version", "enable_fp_fusion"), ("div_rn", "tl.math.div_rn")],
    ids=["triton-2.1", "no-div_rn"],
)
def test_a_triton_without_what_the_marcher_needs_is_not_used(missing, named, monkeypatch, caplog):
    """Without launches free of fused multiply-adds (Triton before 2.2) or IEEE division, the marcher cannot
    follow the reference's rounding: it is reported unusable in one line naming what is missing, before any
    launch, and ``auto`` on CUDA marches with the torch reference after one warning saying why."""
    triton = pytest.importorskip("triton")
    if missing == "version":
        monkeypatch.setattr(triton, "__version__", "2.1.0")
    else:
        monkeypatch.delattr(triton.language.math, "div_rn")
    from nerfstudio_accel.ops import backends

    reason = backends.marcher_unavailable_reason.__wrapped__("cuda")
    assert named in reason and "\n" not in reason, reason
    monkeypatch.setattr(backends, "nerfacc_ops_unavailable_reason", lambda: "nerfacc's CUDA ops did not build")
    monkeypatch.setattr(backends, "marcher_unavailable_reason", backends.marcher_unavailable_reason.__wrapped__)
    with caplog.at_level("WARNING", logger=backends.__name__):
        assert backends.resolve_sampler_backend("auto", "cuda") == "torch"
    assert len(caplog.records) == 1 and named in caplog.records[0].getMessage()


@pytest.mark.parametrize("levels", [1, 4])
def test_triton_marcher_divides_blocks_by_blocks(levels, monkeypatch):
    """``tl.math.div_rn`` gets two blocks of one shape: some Triton releases' ``div_rn`` neither broadcasts nor
    promotes its operands (a block divided by a scalar fails to compile there). Compiled with such a
    ``div_rn``."""
    triton = pytest.importorskip("triton")
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from nerfstudio_accel.kernels import marching_triton as kernels

    precise = tl.math.div_rn

    @tl.core.builtin
    def strict_div_rn(x, y, _semantic=None):
        types = [str(operand.type) if isinstance(operand, tl.tensor) else repr(operand) for operand in (x, y)]
        assert x.type.is_block() and types[0] == types[1], f"div_rn of {types[0]} by {types[1]}"
        return precise(x, y, _semantic=_semantic)

    monkeypatch.setattr(tl.math, "div_rn", strict_div_rn)
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")  # a cached binary would skip the front end
    for geometric in (False, True):
        constants = {"NUM_LEVELS": levels, "FILL": False, "GEOMETRIC": geometric, "BLOCK": kernels.BLOCK_RAYS}
        signature = {
            **POINTER_ARGUMENTS, **SCALAR_ARGUMENTS, **OUTPUT_ARGUMENTS, **{name: "constexpr" for name in constants},
        }  # fmt: skip
        source = ASTSource(kernels._march_kernel, signature, constants)
        triton.compile(source, target=GPUTarget("cuda", 80, 32), options=dict(kernels.LAUNCH_OPTIONS))
