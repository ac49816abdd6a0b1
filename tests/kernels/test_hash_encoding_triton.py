"""The Triton hash-encoding kernels against the pure-torch reference under ``TRITON_INTERPRET=1`` on CPU
tensors, and through Triton's compiler to GPU code (no GPU needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from accel_test_helpers import TRITON_INTERPRETER_ENV

LAYOUTS = {
    # name: (levels, min_res, max_res, log2_hashmap_size, features[, log2_dense_limit]), as in
    # tests/encodings/test_hash_encoding.py
    "all-dense": (3, 2, 12, 12, 2),
    "block-dense-levels": (6, 16, 256, 12, 2, 15),
    "all-hashed": (2, 64, 512, 6, 2),
    "one-level-4-features": (1, 20, 20, 10, 4),
}


TRITON_INTERPRETER_CHECK = textwrap.dedent(
    """
    import json, os, sys
    assert os.environ["TRITON_INTERPRET"] == "1"
    import torch
    from nerfstudio_accel.kernels import hash_encoding_triton as triton_kernels
    from nerfstudio_accel.ops._hash_encoding_torch import encode_torch
    from nerfstudio_accel.kernels.hash_layout import HashGridLayout

    report = {}
    for name, (levels, min_res, max_res, log2_size, features, *dense_limit) in json.loads(sys.argv[1]).items():
        layout = HashGridLayout.from_resolutions(levels, min_res, max_res, log2_size, features, *dense_limit)
        generator = torch.Generator().manual_seed(5)
        points = torch.cat([torch.rand(200, 3, generator=generator), torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])])
        table = torch.rand(layout.num_params, generator=generator) * 2 - 1
        upstream = torch.randn(points.shape[0], layout.out_dim, generator=generator)
        reference_points = points.clone().requires_grad_(True)
        reference_table = table.clone().requires_grad_(True)
        reference = encode_torch(reference_points, reference_table, layout)
        (reference * upstream).sum().backward()
        level_tensors = layout.level_tensors(points.device)
        rows = table.view(-1, features)
        values = triton_kernels.encode_forward(points, rows, level_tensors)
        table_grad, point_grad = triton_kernels.encode_backward(points, rows, upstream, level_tensors, True)

        def error(actual, expected):
            return float((actual - expected).abs().max() / max(1.0, float(expected.abs().max())))

        report[name] = [
            error(values, reference.detach()),
            error(table_grad.view(-1), reference_table.grad),
            error(point_grad, reference_points.grad),
        ]
        # autocast's half types: written as half, gradients read from half, sums in float32
        for half in (torch.float16, torch.bfloat16):
            values = triton_kernels.encode_forward(points, rows, level_tensors, half)
            table_grad, _ = triton_kernels.encode_backward(points, rows, upstream.to(half), level_tensors, False)
            expected_grad = triton_kernels.encode_backward(points, rows, upstream.to(half).float(), level_tensors, False)[0]
            report[f"{name} {half}"] = [
                float(values.dtype == half), error(values.float(), reference.detach()), error(table_grad, expected_grad)
            ]
    print(json.dumps(report))
    """
)


def test_triton_kernels_match_reference_in_interpreter_mode():
    """The CUDA kernels' source, run by Triton's interpreter on CPU tensors, agrees with the reference."""
    pytest.importorskip("triton")
    layouts = LAYOUTS
    done = subprocess.run(
        [sys.executable, "-c", TRITON_INTERPRETER_CHECK, json.dumps(layouts)],
        capture_output=True, text=True, timeout=600, env={**os.environ, **TRITON_INTERPRETER_ENV},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    halves = {name for name in report if name not in layouts}
    assert set(report) - halves == set(layouts) and len(halves) == 2 * len(layouts)
    for name in layouts:
        assert max(report[name]) <= 1e-5, f"{name}: relative errors (values, table grad, point grad) {report[name]}"
    for name in halves:
        is_half, value_error, grad_error = report[name]
        # one rounding of each output to 8 (bf16) or 11 (fp16) bits; gradients as from the widened half input
        assert is_half == 1.0 and value_error <= (8e-3 if "bfloat16" in name else 1e-3) and grad_error <= 1e-6, (
            f"{name}: {report[name]}"
        )


POINTER_ARGUMENTS = {"scales_ptr": "*fp32", "resolutions_ptr": "*i64", "offsets_ptr": "*i64", "dense_ptr": "*i32"}


@pytest.mark.parametrize("point_grad, half", [(False, "fp32"), (True, "fp32"), (True, "fp16"), (True, "bf16")])
def test_triton_kernels_compile_to_gpu_code_without_a_gpu(point_grad, half):
    """Triton's compiler (front end to cubin, for sm_80) accepts the kernels, with float32 or half outputs and
    output gradients; the interpreter alone would not notice code that only the compiler rejects."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from nerfstudio_accel.kernels import hash_encoding_triton as kernels

    constants = {"NUM_LEVELS": 16, "FEATURES": 2, "BLOCK": kernels.BLOCK_POINTS}
    forward = {
        "points_ptr": "*fp32",
        "table_ptr": "*fp32",
        "out_ptr": f"*{half}",
        "num_points": "i32",
        **POINTER_ARGUMENTS,
    }
    backward = {
        "points_ptr": "*fp32", "table_ptr": "*fp32", "grad_out_ptr": f"*{half}", "grad_table_ptr": "*fp32",
        "grad_points_ptr": "*fp32", "num_points": "i32", **POINTER_ARGUMENTS,
    }  # fmt: skip
    sources = [
        ASTSource(kernels._forward_kernel, {**forward, **{name: "constexpr" for name in constants}}, constants),
        ASTSource(
            kernels._backward_kernel,
            {**backward, **{name: "constexpr" for name in (*constants, "POINT_GRAD")}},
            {**constants, "POINT_GRAD": point_grad},
        ),
    ]
    for source in sources:
        compiled = triton.compile(source, target=GPUTarget("cuda", 80, 32))
        assert compiled.asm["cubin"]


FAR_PROGRAM_CHECK = textwrap.dedent(
    """
    import json, os
    assert os.environ["TRITON_INTERPRET"] == "1"
    import numpy as np
    import torch
    import triton.language as tl
    from triton.runtime import interpreter
    from nerfstudio_accel.kernels import hash_encoding_triton as kernels
    from nerfstudio_accel.kernels.hash_layout import HashGridLayout

    FIRST_PROGRAM = 1 << 25  # its first point: 2^25 * 128 = 2^32, which an int32 product wraps to 0

    def far_program_id(builder, axis):
        return interpreter.TensorHandle(np.array([builder.grid_idx[axis] + FIRST_PROGRAM], dtype=np.int32), tl.int32)

    interpreter.InterpreterBuilder.create_get_program_id = far_program_id
    layout = HashGridLayout(num_levels=2, log2_hashmap_size=8, base_resolution=4, per_level_scale=4.0)
    levels = layout.level_tensors(torch.device("cpu"))
    constants = dict(NUM_LEVELS=2, FEATURES=2, BLOCK=kernels.BLOCK_POINTS)
    level_args = (levels.scales, levels.resolutions, levels.offsets, levels.dense.to(torch.int32))
    points = torch.rand(kernels.BLOCK_POINTS, 3)
    rows = torch.rand(layout.num_params // 2, 2)
    out = torch.full((kernels.BLOCK_POINTS, 4), float("nan"))
    kernels._forward_kernel[(1,)](points, rows, out, points.shape[0], *level_args, **constants)
    grad_table = torch.zeros_like(rows)
    grad_points = torch.zeros_like(points)
    upstream = torch.ones(kernels.BLOCK_POINTS, 4)
    kernels._backward_kernel[(1,)](
        points, rows, upstream, grad_table, grad_points, points.shape[0], *level_args, POINT_GRAD=True, **constants
    )
    print(json.dumps({
        "outputs written": int((~out.isnan()).sum()),
        "table gradients written": int((grad_table != 0).sum()),
        "point gradients written": int((grad_points != 0).sum()),
    }))
    """
)


def test_triton_kernels_index_points_in_int64():
    """Point offsets are int64: a program whose points lie past 2^31 (here 2^32: a launch of 2^25 programs, which
    the interpreter fakes by shifting the program ids of a one-program launch on 128 points) is beyond these
    points and writes nothing; int32 offsets would wrap to points 0-127 and overwrite their rows."""
    pytest.importorskip("triton")
    done = subprocess.run(
        [sys.executable, "-c", FAR_PROGRAM_CHECK],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, **TRITON_INTERPRETER_ENV},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"outputs written": 0, "table gradients written": 0, "point gradients written": 0}
