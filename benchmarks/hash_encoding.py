"""Hash-encoding throughput per backend: forward and forward+backward points per second.

    python benchmarks/hash_encoding.py [--device cpu] [--points 14 16 18] [--tables 17 19] [--repeats 3]
        [--backends ...] [--markdown FILE]

16 levels, 2 features, resolutions 16..2048 (accel-ngp's grid), uniform random points in the unit cube
(the worst case for caches: samples along rays are far more coherent). Each figure is the median of
``--repeats`` timed calls after one untimed call (which also compiles the kernels). Backends:

- ``kernel``: our fused kernels (numba on CPU, Triton on CUDA);
- ``torch``: our pure-torch reference (the same table layout);
- ``nerfstudio``: nerfstudio's ``HashEncoding(implementation="torch")`` (nerfstudio's own pure-torch encoding);
- ``torch-compile``: our reference through ``torch.compile`` (needs a C++ compiler on CPU);
- ``tcnn``: tiny-cuda-nn, where it imports (CUDA).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch

from nerfstudio_accel.encodings.hash_encoding import MultiresHashEncoding
from nerfstudio_accel.kernels.hash_layout import HashGridLayout
from nerfstudio_accel.ops._hash_encoding_torch import encode_torch
from nerfstudio_accel.ops.backends import tcnn_encoding_unavailable_reason

BACKENDS = ("kernel", "torch", "nerfstudio", "torch-compile", "tcnn")


def build(backend: str, layout: HashGridLayout, device: torch.device) -> Optional[torch.nn.Module]:
    """The encoding module for ``backend``, or None when it cannot run here."""
    if backend in ("kernel", "torch"):
        return MultiresHashEncoding(layout, backend).to(device)
    if backend == "tcnn":
        return (
            None if tcnn_encoding_unavailable_reason(device.type) else MultiresHashEncoding(layout, "tcnn").to(device)
        )
    if backend == "nerfstudio":
        from nerfstudio.field_components.encodings import HashEncoding

        max_res = round(layout.base_resolution * layout.per_level_scale ** (layout.num_levels - 1))
        return HashEncoding(
            layout.num_levels, layout.base_resolution, max_res, layout.log2_hashmap_size, layout.features_per_level,
            implementation="torch",
        ).to(device)  # fmt: skip
    if backend == "torch-compile":
        reference = MultiresHashEncoding(layout, "torch").to(device)
        compiled = torch.compile(lambda points: encode_torch(points, reference.table, layout))
        return _Wrapped(reference, compiled)
    raise ValueError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")


class _Wrapped(torch.nn.Module):
    """A compiled function with the module that owns its table (for zero_grad)."""

    def __init__(self, owner: torch.nn.Module, function: Callable) -> None:
        super().__init__()
        self.owner, self.function = owner, function

    def forward(self, points: torch.Tensor) -> torch.Tensor:
        return self.function(points)


def points_per_second(run: Callable[[], None], count: int, repeats: int, device: torch.device) -> float:
    """Median throughput of ``run`` over ``repeats`` calls after one warm-up call."""
    run()
    seconds = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    return count / statistics.median(seconds)


def measure(
    backend: str, log2_points: int, log2_table: int, device: torch.device, repeats: int
) -> Optional[Dict[str, float]]:
    layout = HashGridLayout.from_resolutions(16, 16, 2048, log2_table)
    try:
        encoding = build(backend, layout, device)
    except Exception as error:  # noqa: BLE001 - a candidate that cannot build is reported, not fatal
        print(f"  {backend}: cannot run here ({str(error).splitlines()[0] if str(error) else type(error).__name__})")
        return None
    if encoding is None:
        return None
    points = torch.rand(2**log2_points, 3, device=device)

    def forward() -> None:
        with torch.no_grad():
            encoding(points)

    def forward_backward() -> None:
        encoding.zero_grad(set_to_none=True)
        encoding(points).sum().backward()

    try:
        return {
            "forward": points_per_second(forward, points.shape[0], repeats, device),
            "forward_backward": points_per_second(forward_backward, points.shape[0], repeats, device),
        }
    except Exception as error:  # noqa: BLE001
        print(f"  {backend}: failed ({str(error).splitlines()[0] if str(error) else type(error).__name__})")
        return None


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--points", type=int, nargs="+", default=[14, 16, 18], help="log2 of the point counts")
    parser.add_argument("--tables", type=int, nargs="+", default=[17, 19], help="log2 of the rows per level")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    header = f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} CPU threads"
    print(header)
    rows = [
        "| backend | table | points | forward Mpts/s | fwd+bwd Mpts/s | fwd+bwd vs nerfstudio |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for log2_table in args.tables:
        for log2_points in args.points:
            results = {}
            for backend in args.backends:
                result = measure(backend, log2_points, log2_table, device, args.repeats)
                if result is not None:
                    results[backend] = result
            baseline = results.get("nerfstudio", {}).get("forward_backward")
            for backend, result in results.items():
                ratio = f"{result['forward_backward'] / baseline:.1f}x" if baseline else "-"
                row = (
                    f"| {backend} | 2^{log2_table} | 2^{log2_points} | {result['forward'] / 1e6:.2f} | "
                    f"{result['forward_backward'] / 1e6:.2f} | {ratio} |"
                )
                rows.append(row)
                print(row, flush=True)
    if args.markdown:
        args.markdown.write_text(header + "\n\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
