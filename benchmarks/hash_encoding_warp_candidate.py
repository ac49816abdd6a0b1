"""The NVIDIA warp candidate for the fused hash encoding, forward only, measured on CPU.

    pip install warp-lang && python benchmarks/hash_encoding_warp_candidate.py [--log2-table 17] [--points 65536]

warp compiles one kernel source for CPU (LLVM) and CUDA (NVRTC) with no compiler installed, which made
it the candidate for "one source of truth". This is the same computation as the shipped numba forward
(threads over level x point, dense or hashed rows, trilinear weights) so the two can be compared on
the same machine; docs/hash_encoding.md has the figures and why numba (CPU) + Triton (CUDA) were kept.
Not part of the package: warp is not a dependency.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import warp as wp

from nerfstudio_accel.kernels.hash_layout import HashGridLayout


@wp.kernel
def encode_forward(
    points: wp.array2d(dtype=wp.float32),
    table: wp.array2d(dtype=wp.float32),
    scales: wp.array(dtype=wp.float32),
    resolutions: wp.array(dtype=wp.int64),
    offsets: wp.array(dtype=wp.int64),
    dense: wp.array(dtype=wp.int32),
    out: wp.array2d(dtype=wp.float32),
):
    tid = wp.tid()
    level = tid // points.shape[0]
    i = tid - level * points.shape[0]
    scale = scales[level]
    px = points[i, 0] * scale + 0.5
    py = points[i, 1] * scale + 0.5
    pz = points[i, 2] * scale + 0.5
    lx = wp.floor(px)
    ly = wp.floor(py)
    lz = wp.floor(pz)
    fx = px - lx
    fy = py - ly
    fz = pz - lz
    start = offsets[level]
    entries = offsets[level + 1] - start
    resolution = resolutions[level]
    acc0 = float(0.0)
    acc1 = float(0.0)
    for corner in range(8):
        bx = corner & 1
        by = (corner >> 1) & 1
        bz = (corner >> 2) & 1
        wx = fx
        if bx == 0:
            wx = 1.0 - fx
        wy = fy
        if by == 0:
            wy = 1.0 - fy
        wz = fz
        if bz == 0:
            wz = 1.0 - fz
        cx = wp.int64(lx) + wp.int64(bx)
        cy = wp.int64(ly) + wp.int64(by)
        cz = wp.int64(lz) + wp.int64(bz)
        index = wp.int64(0)
        if dense[level] != 0:
            index = (cx + cy * resolution + cz * resolution * resolution) % entries
        else:
            index = (cx ^ (cy * wp.int64(2654435761)) ^ (cz * wp.int64(805459861))) & (entries - wp.int64(1))
        row = wp.int32(start + index)
        weight = wx * wy * wz
        acc0 += weight * table[row, 0]
        acc1 += weight * table[row, 1]
    out[i, level * 2] = acc0
    out[i, level * 2 + 1] = acc1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log2-table", type=int, default=17)
    parser.add_argument("--points", type=int, default=1 << 16)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    wp.config.quiet = True
    wp.init()
    layout = HashGridLayout.from_resolutions(16, 16, 2048, args.log2_table)
    levels = layout.level_tensors(torch.device("cpu"))
    rng = np.random.default_rng(0)
    inputs = [
        wp.array(rng.random((args.points, 3), dtype=np.float32), device="cpu"),
        wp.array(rng.random((layout.level_offsets[-1], 2), dtype=np.float32), device="cpu"),
        wp.array(levels.scales.numpy(), device="cpu"),
        wp.array(levels.resolutions.numpy(), device="cpu"),
        wp.array(levels.offsets.numpy(), device="cpu"),
        wp.array(levels.dense.numpy().astype(np.int32), device="cpu"),
        wp.zeros((args.points, 32), dtype=wp.float32, device="cpu"),
    ]
    launch = lambda: wp.launch(encode_forward, dim=16 * args.points, inputs=inputs, device="cpu")  # noqa: E731
    launch()
    wp.synchronize()
    start = time.perf_counter()
    for _ in range(args.repeats):
        launch()
    wp.synchronize()
    seconds = (time.perf_counter() - start) / args.repeats
    print(
        f"warp {wp.config.version} CPU forward, 2^{args.log2_table} table, {args.points} random points: {args.points / seconds / 1e6:.2f} Mpts/s"
    )


if __name__ == "__main__":
    main()
