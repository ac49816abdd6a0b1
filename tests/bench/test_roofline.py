"""benchmarks/roofline.py: its rate kernels stay inside each level's slice of the table and count every read, and its report charges
each phase the work counted in the same steps (counts and their arithmetic only: never timings)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from accel_test_helpers import run_step_benchmark
from nerfstudio_accel.kernels.hash_layout import HASH_PRIMES, HashGridLayout

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import roofline  # noqa: E402


def test_random_reads_stay_in_their_own_level():
    rows = [8, 4096, 37]
    offsets = roofline.table_offsets(rows)
    table = np.repeat(np.arange(1, 4, dtype=np.float32), rows)[:, None].repeat(2, axis=1)  # level l holds l + 1
    sums = np.zeros(3, dtype=np.float32)
    roofline._random_reads(table, offsets, 1000, sums)
    assert sums.tolist() == [2000.0, 4000.0, 6000.0]


def test_corner_adds_land_in_their_own_level_and_count_every_corner():
    layout = HashGridLayout.from_resolutions(6, 4, 300, 10, 2)
    points = torch.rand(500, 3, generator=torch.Generator().manual_seed(0))
    levels = layout.level_tensors(torch.device("cpu"))
    arrays = (levels.scales.numpy(), levels.resolutions.numpy(), levels.offsets.numpy(), levels.dense.numpy())
    table = np.zeros((int(arrays[2][-1]), 2), dtype=np.float32)
    primes = np.array(HASH_PRIMES, dtype=np.int64)
    roofline._corner_pass(points.numpy(), table, *arrays, primes, True, np.zeros(6, dtype=np.float32))
    for level in range(6):
        level_rows = table[arrays[2][level] : arrays[2][level + 1]]
        assert level_rows.sum(axis=0).tolist() == [500.0 * 8, 500.0 * 8]
    assert layout.level_is_dense(0) and not layout.level_is_dense(5)  # both kinds of rows are covered


def test_corner_reads_point_by_point_read_the_rows_the_level_pass_reads():
    """Point by point, each point's sum is over the very rows the level-by-level pass reads for it (counted by that
    pass's adds, one point at a time), in a table whose rows hold different values; more points than one chunk."""
    layout = HashGridLayout.from_resolutions(6, 4, 300, 10, 2)
    points = torch.rand(roofline.POINTS_PER_CHUNK + 44, 3, generator=torch.Generator().manual_seed(1)).numpy()
    levels = layout.level_tensors(torch.device("cpu"))
    arrays = (levels.scales.numpy(), levels.resolutions.numpy(), levels.offsets.numpy(), levels.dense.numpy())
    rows = int(arrays[2][-1])
    values = (np.arange(rows) % 97 + 1).astype(np.float32)
    table = np.stack([values, 2 * values], axis=1)  # sums stay exact in float32
    primes = np.array(HASH_PRIMES, dtype=np.int64)
    sums = np.zeros(len(points), dtype=np.float32)
    roofline._corner_pass_by_point(points, table, *arrays, primes, sums)
    for i in (0, 7, roofline.POINTS_PER_CHUNK, len(points) - 1):
        reads = np.zeros((rows, 2), dtype=np.float32)
        roofline._corner_pass(points[i : i + 1], reads, *arrays, primes, True, np.zeros(6, dtype=np.float32))
        assert reads[:, 0].sum() == 6 * 8  # 8 corners at each of the 6 levels
        assert sums[i] == float((reads[:, 0] * values).sum() * 3)


def test_roofline_charges_each_phase_the_work_of_its_steps(tiny_scene, tmp_path):
    # a grid update at step 2, still in the grid's warm-up: every cell of the 64^3 CPU grid is evaluated
    flags = ("--rate-repeats", "1", "--", "--pipeline.model.occupancy.update-every", "2")
    result, report = run_step_benchmark("roofline.py", tiny_scene, tmp_path, *flags)
    work, rates, phases = result["work"], result["rates"], result["phases"]
    assert 0 < work["graph"] <= work["kept"] <= work["evaluated"] <= work["candidates"] and work["lattice_steps"] > 0
    assert work["update_points_per_update"] == 64**3 and work["update"] == 64**3 / 2  # one update in 2 steps
    levels = result["levels"]
    culling = phases["culling density pass"]["resources_ms"]
    by_point = rates["corner reads, marched, point by point"]  # the CPU's default culls in the fused kernels
    assert culling["reads"] == pytest.approx(1000 * work["evaluated"] * levels * 8 / by_point)
    density_flops = sum(2 * k * m for k, m in result["shapes"]["density"])
    assert culling["flops"] == pytest.approx(1000 * work["evaluated"] * density_flops / rates["best matmul"])
    assert phases["optimizer"]["resources_ms"]["bytes"] == pytest.approx(
        1000 * work["parameters"] * 28 / rates["bandwidth"]
    )
    for row in phases.values():
        assert row["floor_ms"] is None or row["floor_ms"] == pytest.approx(max(row["resources_ms"].values()))
    assert "| culling density pass |" in report and "| **step** |" in report
    assert result["cpu_model"] and f"({result['cpu_model']})" in report.splitlines()[0]
    assert (
        "grid reads" not in phases["graph forward"]["resources_ms"]
        and "reads" not in phases["graph forward"]["resources_ms"]
    )


def test_roofline_refuses_another_device_or_sampler(tiny_scene):
    for option in (["--device", "cuda"], ["--samplers", "proposal"]):
        done = subprocess.run(
            [sys.executable, "benchmarks/roofline.py", "--data", str(tiny_scene), *option],
            cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 1 and "use --device cpu and --samplers occupancy" in done.stderr
