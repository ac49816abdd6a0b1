"""A roofline of accel-ngp's training step: per phase, the work it does, the least time this machine needs for
that work, the time it takes, and the ratio.

    python benchmarks/roofline.py [--data data/blender/lego] [--downscale 4] [--device cpu] [--warmup 300]
        [--steps 48] [--rate-repeats 5] [--markdown FILE] [--json FILE] [-- ns-train flags...]

Three parts, on the CPU and the occupancy sampler (object scenes) only:

1. **This machine's rates**, each the best of ``--rate-repeats`` back-to-back runs on every numba thread (work cut
   by level, as the hash kernels cut it) or every torch thread. Reads of the hash grid's table (laid out as the
   model's, filled): the 8 corner rows of each point's cell at every level, found as the kernels find them but
   with no weights and no output, for the candidates the trained grid marches on one training batch (in ray
   order, as the culling pass reads them) and for uniform random points (the grid update's); the same corners
   read, added to and written back (the table gradient's scatter); the marched points' corners read point by
   point instead, every level of a point before the next (the fused culling kernels' order, which an early stop
   needs: a thread no longer sweeps one level's slice of the table); and, for reference, rows read at random.
   Random reads from a table the size of the occupancy grid, cut into one slice per thread (marching); a linear
   layer at each MLP layer's shape and at 1024 x 1024 (the FLOP floor takes the best of them: a slow shape could
   be padded to a fast one); streamed copy bandwidth (bytes read plus bytes written).
2. **The step's work**, counted from the model's real shapes over ``--steps`` steps after ``--warmup`` (the
   counting between steps is not timed): rays, marched candidates, densities evaluated, samples kept, samples in
   the graph (fewer with hard mining), grid update points (every cell during the grid's warm-up), lattice steps
   marched, parameters.
3. **Per phase** (the phases of ``benchmarks/step_profile.py``, timed in the same steps): a floor, the largest
   of the phase's reads / read rate, FLOPs / matmul rate and bytes / bandwidth, and measured / floor.

What each phase is charged (per step): marching: one grid read per lattice step (the marcher reads each twice, a
count pass and a fill pass; one pass would do) and 16 bytes written per candidate; culling density pass:
``levels x 8`` corner reads (marched points, at the point-by-point rate where the CPU's fused kernels cull) and
the density MLP per evaluated point, its encoding written; grid
update: the same per update point (uniform points); scoring forward: the colour MLP per kept sample; graph
forward: both MLPs per graph sample (its encodings come from the culling pass where the hash backend reuses them,
else ``levels x 8`` corner reads more); backward: twice the forward FLOPs and ``levels x 8`` corner adds per graph
sample; optimizer: Adam's 28 bytes per parameter (parameter, gradient and two moments read, three written); the
render phases: 64 bytes per kept sample; importance and selection: 16 bytes per kept sample. Ray batch and
``other`` have no floor. Where marching runs inside the culling pass (the fused CPU kernel of the defaults), it has
no time of its own and the pass is charged its corner reads only, a lower bound. A floor leaves out what a phase
does besides its main work (trilinear weights, activations, scans, copies): it is a bound, not a forecast. Timings,
so never a test assert.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numba
import numpy as np
import torch
from step_ops import step_arguments, warmed_up_trainer, write_report
from step_profile import PHASE_ORDER

from nerfstudio_accel.engine.trainer import training_step
from nerfstudio_accel.kernels.hash_encoding_numba import corner_row, lattice_cell
from nerfstudio_accel.kernels.hash_layout import HASH_PRIMES
from nerfstudio_accel.kernels.threads import choose_threading_layer
from nerfstudio_accel.ops.ray_aabb import ray_aabb_intersect
from nerfstudio_accel.step_phases import PhaseClock

choose_threading_layer()

CANDIDATE_BYTES = 16
"""A marched candidate as the marcher writes it: an int64 ray index and float32 ``t_start``, ``t_end``."""
RENDER_BYTES_PER_SAMPLE = 64
"""What compositing reads and writes per sample (density, colour, interval, weight and their gradients)."""
ADAM_BYTES_PER_PARAMETER = 28
"""Adam per float32 parameter: parameter, gradient, two moments read; parameter and two moments written."""
READS_PER_POINT_LEVEL = 8
"""Trilinear interpolation reads the 8 corners of a point's cell at every level."""


# --- 1. this machine's rates --------------------------------------------------------------------------------


@numba.njit(parallel=True, cache=True)
def _random_reads(table, offsets, reads_per_level, sums):
    """Each level (a thread's share) reads ``reads_per_level`` rows at xorshift-random places of its slice."""
    for level in numba.prange(offsets.shape[0] - 1):
        start, rows = offsets[level], offsets[level + 1] - offsets[level]
        state = np.uint64((2654435761 * (level + 1)) % 4294967291)  # under 2^32, never 0
        total = table[start, 0] * 0
        for _ in range(reads_per_level):
            state ^= (state << np.uint64(13)) & np.uint64(0xFFFFFFFF)
            state ^= state >> np.uint64(17)
            state ^= (state << np.uint64(5)) & np.uint64(0xFFFFFFFF)
            row = start + np.int64((state * np.uint64(rows)) >> np.uint64(32))
            for feature in range(table.shape[1]):
                total += table[row, feature]
        sums[level] = total


@numba.njit(parallel=True, cache=True)
def _corner_pass(points, table, scales, resolutions, offsets, dense, primes, add, sums):
    """Each level (a thread's share) reads the rows of the 8 corners of every point's cell, found as the hash
    kernels find them, without the weights or any output; with ``add`` it adds 1 to each row read (the table
    gradient's scatter), else it sums them into ``sums (levels,)``."""
    for level in numba.prange(scales.shape[0]):
        scale, start, resolution, is_dense = scales[level], offsets[level], resolutions[level], dense[level]
        entries = offsets[level + 1] - start
        total = np.float32(0.0)
        for i in range(points.shape[0]):
            gx, _ = lattice_cell(points[i, 0], scale)
            gy, _ = lattice_cell(points[i, 1], scale)
            gz, _ = lattice_cell(points[i, 2], scale)
            for corner in range(8):
                bx, by, bz = corner & 1, (corner >> 1) & 1, (corner >> 2) & 1
                row = start + corner_row(
                    gx + bx, gy + by, gz + bz, resolution, entries, is_dense, primes[0], primes[1], primes[2]
                )
                for feature in range(table.shape[1]):
                    if add:
                        table[row, feature] += 1.0
                    else:
                        total += table[row, feature]
        sums[level] = total


POINTS_PER_CHUNK = 256
"""Consecutive points (in ray order) one thread reads in :func:`_corner_pass_by_point`: about the candidates of the
16-ray chunk a thread takes in the fused kernels (``CHUNK_RAYS``), so a ray's points stay on one core."""


@numba.njit(parallel=True, cache=True)
def _corner_pass_by_point(points, table, scales, resolutions, offsets, dense, primes, sums):
    """The reads of :func:`_corner_pass` in the fused culling kernels' order: each point's 8 corner rows at every
    level, then the next point; threads take chunks of :data:`POINTS_PER_CHUNK` consecutive points; ``sums (n,)``
    per point."""
    for chunk in numba.prange((points.shape[0] + POINTS_PER_CHUNK - 1) // POINTS_PER_CHUNK):
        for i in range(chunk * POINTS_PER_CHUNK, min((chunk + 1) * POINTS_PER_CHUNK, points.shape[0])):
            total = np.float32(0.0)
            for level in range(scales.shape[0]):
                start, entries = offsets[level], offsets[level + 1] - offsets[level]
                gx, _ = lattice_cell(points[i, 0], scales[level])
                gy, _ = lattice_cell(points[i, 1], scales[level])
                gz, _ = lattice_cell(points[i, 2], scales[level])
                for corner in range(8):
                    bx, by, bz = corner & 1, (corner >> 1) & 1, (corner >> 2) & 1
                    row = start + corner_row(
                        gx + bx,
                        gy + by,
                        gz + bz,
                        resolutions[level],
                        entries,
                        dense[level],
                        primes[0],
                        primes[1],
                        primes[2],
                    )
                    for feature in range(table.shape[1]):
                        total += table[row, feature]
            sums[i] = total


def best_seconds(run: Callable[[], object], repeats: int) -> float:
    """The least wall time of ``repeats`` calls of ``run`` after one untimed call."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def table_offsets(rows_per_level: Sequence[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(rows_per_level)]).astype(np.int64)


def read_rate(rows_per_level: Sequence[int], width: int, dtype, repeats: int, reads_per_level: int = 1 << 21) -> float:
    """Random row reads per second from a table with these rows per level, ``width`` values of ``dtype`` a row."""
    offsets = table_offsets(rows_per_level)
    table = np.ones((int(offsets[-1]), width), dtype=dtype)
    sums = np.zeros(len(rows_per_level), dtype=dtype)
    with numba.parallel_chunksize(1):
        seconds = best_seconds(lambda: _random_reads(table, offsets, reads_per_level, sums), repeats)
    return reads_per_level * len(rows_per_level) / seconds


def thread_slices(rows: int) -> List[int]:
    """``rows`` cut into one slice per numba thread (a single-level grid would otherwise be read by one)."""
    threads = numba.get_num_threads()
    return [rows // threads + (1 if index < rows % threads else 0) for index in range(threads)]


def corner_rate(layout, points: torch.Tensor, repeats: int, add: bool = False, by_point: bool = False) -> float:
    """Corner rows read (or read, added to and written, ``add``) per second for ``points (n, 3)`` in [0, 1] in a
    float32 table with ``layout``: the hash grid's reads with their own locality (corners sharing cache lines,
    neighbouring points sharing cells), without the arithmetic around them; level by level (the hash kernels'
    order: a thread sweeps one level's slice) or, ``by_point``, point by point (the fused culling kernels'; reads
    only, ``add`` does not apply)."""
    assert not (add and by_point), "the point-by-point pass only reads"
    levels = layout.level_tensors(torch.device("cpu"))
    arrays = (levels.scales.numpy(), levels.resolutions.numpy(), levels.offsets.numpy(), levels.dense.numpy())
    table = np.ones((int(arrays[2][-1]), layout.features_per_level), dtype=np.float32)  # written: no shared zero page
    primes = np.array(HASH_PRIMES, dtype=np.int64)
    positions = points.float().contiguous().numpy()
    if by_point:
        sums = np.zeros(positions.shape[0], dtype=np.float32)
        run = lambda: _corner_pass_by_point(positions, table, *arrays, primes, sums)  # noqa: E731
    else:
        sums = np.zeros(layout.num_levels, dtype=np.float32)
        run = lambda: _corner_pass(positions, table, *arrays, primes, add, sums)  # noqa: E731
    with numba.parallel_chunksize(1):
        seconds = best_seconds(run, repeats)
    return positions.shape[0] * layout.num_levels * READS_PER_POINT_LEVEL / seconds


def matmul_rate(rows: int, inputs: int, outputs: int, repeats: int) -> float:
    """FLOP/s (multiply-adds x 2) of a float32 ``nn.Linear(inputs, outputs)`` over ``(rows, inputs)``: the
    weight stored ``(outputs, inputs)`` as the MLPs store it, with its bias."""
    points, layer = torch.randn(rows, inputs), torch.nn.Linear(inputs, outputs)
    with torch.no_grad():
        seconds = best_seconds(lambda: layer(points), repeats)
    return 2.0 * rows * inputs * outputs / seconds


def copy_bandwidth(repeats: int, floats: int = 1 << 26) -> float:
    """Bytes per second of a float32 copy (read plus written) much larger than the caches."""
    source, target = torch.ones(floats), torch.empty(floats)
    seconds = best_seconds(lambda: target.copy_(source), repeats)
    return 2.0 * 4 * floats / seconds


def linear_shapes(mlp: torch.nn.Module) -> List[Tuple[int, int]]:
    """``(inputs, outputs)`` of each ``nn.Linear`` of a torch MLP, in order."""
    return [(layer.in_features, layer.out_features) for layer in mlp.modules() if isinstance(layer, torch.nn.Linear)]


# --- 2. the step's work --------------------------------------------------------------------------------------


def marched_batch(trainer, rays: int = 4096) -> Tuple[float, torch.Tensor]:
    """Mean marching steps per training ray through the grid's box (length inside it / step size), and the
    candidates the trained grid marches on those rays as hash-grid coordinates ``(n, 3)`` in ray order (the
    culling pass's points), from one batch of at most ``rays`` training rays."""
    model = trainer.pipeline.model
    sampler = model.sampler
    bundle, _ = trainer.pipeline.datamanager.next_train(0)
    origins, directions = bundle.origins.reshape(-1, 3)[:rays].float(), bundle.directions.reshape(-1, 3)[:rays].float()
    t_in, t_out, hit = ray_aabb_intersect(origins, directions, sampler.grid.aabbs[0].float())
    length = ((t_out - t_in.clamp(min=sampler.marching.near_plane)).clamp(min=0) * hit).sum()
    ray_indices, t_starts, t_ends = sampler.march(origins, directions, stratified=True)
    positions = origins[ray_indices] + directions[ray_indices] * (0.5 * (t_starts + t_ends))[:, None]
    with torch.no_grad():
        points = model.field.unit_positions(positions)
    return float(length) / sampler.marching.render_step_size / origins.shape[0], points


def update_points(sampler, step: int) -> int:
    """Points the grid update at ``step`` evaluates: every cell during the warm-up, then a random quarter of each
    level's cells and as many occupied ones at most (:meth:`OccupancySampler.update`)."""
    cells = sampler.grid.cells_per_lvl
    if step < sampler.grid_update.warmup_steps:
        return sampler.grid.levels * cells
    occupied = sampler.grid.binaries.reshape(sampler.grid.levels, -1).sum(dim=1)
    return int(sum(cells // 4 + min(int(count), cells // 4) for count in occupied))


def cpu_ticks() -> Optional[Tuple[int, int]]:
    """``(steal, total)`` clock ticks of every CPU so far from ``/proc/stat`` (None where it does not exist): the
    share stolen by other guests of a virtual machine makes a timing slower than the machine is."""
    try:
        fields = [int(value) for value in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    except (OSError, ValueError):
        return None
    return (fields[7] if len(fields) > 7 else 0), sum(fields)


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` ("unknown" where there is none): rates differ by machine, and a
    virtual machine can move to another host between runs."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return "unknown"
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown")


def stolen_share(before: Optional[Tuple[int, int]], after: Optional[Tuple[int, int]]) -> Optional[float]:
    """The share of CPU time stolen between two :func:`cpu_ticks` readings."""
    if before is None or after is None or after[1] == before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def timed_steps(trainer, first_step: int, steps: int, device: str) -> Tuple[Dict[str, float], Dict[str, float]]:
    """Milliseconds per step of each phase (the counting between steps is not timed), the mean counts of a step
    (rays, candidates, evaluated, kept, graph samples, grid-update points) and the grid updates made."""
    model = trainer.pipeline.model
    sampler = model.sampler
    totals: Dict[str, float] = {"rays": 0, "candidates": 0, "evaluated": 0, "kept": 0, "graph": 0, "update": 0}
    clock = PhaseClock(device)
    every, updates = sampler.grid_update.every_n_steps, 0
    for step in range(first_step, first_step + steps):
        if step % every == 0:
            totals["update"] += update_points(sampler, step)
            updates += 1
        with clock.running():
            _, _, metrics = training_step(trainer, step)
        figures = sampler.figures()
        totals["rays"] += float(metrics["num_rays_per_batch"])
        for name in ("candidates", "evaluated", "kept"):
            totals[name] += figures[name]
        totals["graph"] += float(metrics.get("hard_mining_b", figures["kept"]))
    phases = {name: 1000.0 * seconds / steps for name, seconds in clock.seconds.items()}
    return phases, {**{name: value / steps for name, value in totals.items()}, "updates": updates}


# --- 3. floors -----------------------------------------------------------------------------------------------


def mlp_seconds(shapes: Sequence[Tuple[int, int]], points: float, rates: Dict[str, float]) -> float:
    """Seconds of an MLP's forward matmuls over ``points`` at the best matmul rate measured (a layer of a slower
    shape could be padded to a faster one; the report lists each shape's own rate)."""
    return sum(2.0 * points * k * m for k, m in shapes) / rates["best matmul"]


def phase_floors(
    work: Dict[str, float],
    rates: Dict[str, float],
    shapes: Dict[str, List[Tuple[int, int]]],
    layout,
    graph_encodes: bool,
    culls_by_point: bool,
):
    """Per phase ``{"reads": s, "flops": s, "bytes": s}``: the seconds each resource needs for the phase's work
    (``graph_encodes``: the graph forward encodes its samples again, the culling pass's encodings not reused;
    ``culls_by_point``: the culling pass reads the table point by point, as the fused kernels do)."""
    reads = READS_PER_POINT_LEVEL * layout.num_levels
    density, color = shapes["density"], shapes["color"]
    encoding_bytes = 4 * layout.num_levels * layout.features_per_level

    def per(points: float, pattern: str) -> Dict[str, float]:  # an encoded point through the density MLP
        return {
            "reads": points * reads / rates[f"corner reads, {pattern}"],
            "flops": mlp_seconds(density, points, rates),
        }

    graph = work["graph"]
    return {
        "marching": {
            "reads": work["lattice_steps"] / rates["grid reads"],
            "bytes": work["candidates"] * CANDIDATE_BYTES / rates["bandwidth"],
        },
        "culling density pass": {
            **per(work["evaluated"], "marched, point by point" if culls_by_point else "marched"),
            "bytes": work["evaluated"] * encoding_bytes / rates["bandwidth"],
        },
        "grid update": per(work["update"], "uniform"),
        "scoring forward": {"flops": mlp_seconds(color, work["kept"], rates)},
        "render and output gradients": {"bytes": work["kept"] * RENDER_BYTES_PER_SAMPLE / rates["bandwidth"]},
        "importance and selection": {"bytes": work["kept"] * 16 / rates["bandwidth"]},
        "graph forward": {
            "flops": mlp_seconds(density + color, graph, rates),
            **({"reads": graph * reads / rates["corner reads, marched"]} if graph_encodes else {}),
        },
        "render and loss": {"bytes": work["kept"] * RENDER_BYTES_PER_SAMPLE / rates["bandwidth"]},
        "backward": {
            "flops": 2.0 * mlp_seconds(density + color, graph, rates),
            "reads": graph * reads / rates["corner adds, marched"],
        },
        "optimizer": {"bytes": work["parameters"] * ADAM_BYTES_PER_PARAMETER / rates["bandwidth"]},
    }


def machine_rates(trainer, shapes: Dict[str, List[Tuple[int, int]]], marched, rows: int, repeats: int):
    """Every rate part 1 measures, keyed as :func:`phase_floors` reads them; ``marched``: the points of
    :func:`marched_batch`."""
    layout = trainer.pipeline.model.field.position_encoding.layout
    table_rows = [layout.level_entries(level) for level in range(layout.num_levels)]
    grid = trainer.pipeline.model.sampler.grid
    rates = {
        "random reads": read_rate(table_rows, layout.features_per_level, np.float32, repeats),
        "corner reads, marched": corner_rate(layout, marched, repeats),
        "corner reads, marched, point by point": corner_rate(layout, marched, repeats, by_point=True),
        "corner adds, marched": corner_rate(layout, marched, repeats, add=True),
        "corner reads, uniform": corner_rate(layout, torch.rand(marched.shape[0], 3), repeats),
        "grid reads": read_rate(thread_slices(grid.cells_per_lvl * grid.levels), 1, np.uint8, repeats),
        "bandwidth": copy_bandwidth(repeats),
        "peak matmul": matmul_rate(1024, 1024, 1024, repeats),
    }
    layers = {
        f"{k}x{m}": matmul_rate(rows, k, m, repeats) for k, m in dict.fromkeys(shapes["density"] + shapes["color"])
    }
    return {**rates, **layers, "best matmul": max(rates["peak matmul"], *layers.values())}


def roofline(trainer, args) -> Dict[str, object]:
    """The three parts for one warmed-up trainer."""
    model = trainer.pipeline.model
    field = model.field
    shapes = {"density": linear_shapes(field.density_mlp), "color": linear_shapes(field.color_mlp)}
    ticks = cpu_ticks()
    phases, counts = timed_steps(trainer, args.warmup, args.steps, args.device)
    stolen = stolen_share(ticks, cpu_ticks())
    steps_per_ray, marched = marched_batch(trainer)
    trainer.pipeline.datamanager.close()  # its producer thread would run beside the rates' measurements
    work = {
        **counts,
        "lattice_steps": steps_per_ray * counts["rays"],
        "parameters": sum(p.numel() for group in model.get_param_groups().values() for p in group),
        "update_points_per_update": counts["update"] * args.steps / counts["updates"] if counts["updates"] else 0.0,
    }
    rows = int(2 ** round(math.log2(max(counts["evaluated"], 1))))
    rates = machine_rates(trainer, shapes, marched, rows, args.rate_repeats)
    layout = field.position_encoding.layout
    kernel = model.sampler.backend_for(torch.device(args.device)) == "kernel"
    culls_by_point = kernel and field.density_network() is not None  # the fused culling kernels read so
    floors = phase_floors(work, rates, shapes, layout, not field.reuses_encodings, culls_by_point)
    table = {}
    for name in PHASE_ORDER:
        if name not in phases:
            continue
        bound = floors.get(name, {})
        floor_ms = 1000.0 * max(bound.values()) if bound else None
        table[name] = {
            "measured_ms": phases[name],
            "floor_ms": floor_ms,
            "bound_by": max(bound, key=bound.get) if bound else None,
            "resources_ms": {kind: 1000.0 * seconds for kind, seconds in bound.items()},
        }
    return {
        "rates": rates,
        "work": work,
        "shapes": shapes,
        "levels": layout.num_levels,
        "phases": table,
        "stolen_share": stolen,
        "cpu_model": cpu_model(),
    }


# --- report --------------------------------------------------------------------------------------------------


def markdown(result: Dict[str, object], command: str, device: str) -> str:
    rates, work, phases = result["rates"], result["work"], result["phases"]
    lines = [
        f"Roofline of an accel-ngp training step on {device} ({result['cpu_model']}), {torch.get_num_threads()} torch "
        f"threads, {numba.get_num_threads()} numba threads (`{command}`).",
        "",
        "CPU time stolen by other guests while the steps ran: "
        + ("unknown (no /proc/stat)" if result["stolen_share"] is None else f"{100 * result['stolen_share']:.1f}%")
        + ".",
        "",
        "This machine's rates (best of the repeats):",
        "",
        "| rate | value |",
        "|---|---:|",
        f"| random row reads, hash-grid table | {rates['random reads'] / 1e6:.0f} M rows/s |",
        f"| corner reads, hash-grid table, marched points | {rates['corner reads, marched'] / 1e6:.0f} M rows/s |",
        "| corner reads, hash-grid table, marched points, point by point | "
        f"{rates['corner reads, marched, point by point'] / 1e6:.0f} M rows/s |",
        f"| corner read-add-writes, marched points | {rates['corner adds, marched'] / 1e6:.0f} M rows/s |",
        f"| corner reads, uniform random points | {rates['corner reads, uniform'] / 1e6:.0f} M rows/s |",
        f"| random reads, occupancy grid | {rates['grid reads'] / 1e6:.0f} M cells/s |",
        f"| copy bandwidth (read + write) | {rates['bandwidth'] / 1e9:.1f} GB/s |",
        f"| linear layer 1024 -> 1024 | {rates['peak matmul'] / 1e9:.1f} GFLOP/s |",
    ]
    lines += [
        f"| linear layer {k} -> {m} | {rates[f'{k}x{m}'] / 1e9:.1f} GFLOP/s |"
        for k, m in dict.fromkeys(result["shapes"]["density"] + result["shapes"]["color"])
    ]
    kept = max(work["kept"], 1.0)
    lines += [
        "",
        "Work per step (mean over the timed steps):",
        "",
        "| rays | lattice steps | candidates | densities evaluated | kept samples | graph samples | "
        "grid update points per update | parameters | evaluated per kept |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {work['rays']:.0f} | {work['lattice_steps']:.0f} | {work['candidates']:.0f} | {work['evaluated']:.0f} | "
        f"{work['kept']:.0f} | {work['graph']:.0f} | {work['update_points_per_update']:.0f} | "
        f"{work['parameters']:.0f} | {work['evaluated'] / kept:.2f} |",
        "",
        "Per phase, ms per step (floor: the largest resource time; x: measured / floor):",
        "",
        "| phase | measured | floor | bound by | reads | FLOPs | bytes | x |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    total_measured = total_floor = 0.0
    for name, row in phases.items():
        resources = row["resources_ms"]
        cells = [f"{resources[kind]:.2f}" if kind in resources else "" for kind in ("reads", "flops", "bytes")]
        floor = row["floor_ms"]
        total_measured += row["measured_ms"]
        total_floor += floor or 0.0
        ratio = f"{row['measured_ms'] / floor:.1f}" if floor else "-"
        lines.append(
            f"| {name} | {row['measured_ms']:.1f} | {'-' if floor is None else f'{floor:.2f}'} | "
            f"{row['bound_by'] or '-'} | " + " | ".join(cells) + f" | {ratio} |"
        )
    lines.append(f"| **step** | **{total_measured:.1f}** | **{total_floor:.2f}** | | | | | "
                 f"**{total_measured / total_floor:.1f}** |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> None:
    description = __doc__.split("\n\n")[0]

    def options(parser):
        parser.add_argument("--rate-repeats", type=int, default=5, help="runs of each rate benchmark (best kept)")

    args, flags, command = step_arguments(
        argv, "roofline.py", description, 48, "steps timed", options, samplers=("occupancy",)
    )
    if args.device != "cpu" or args.samplers != ["occupancy"]:
        sys.exit(
            "roofline.py: the rates are a CPU's and the work is the occupancy sampler's: use --device cpu and --samplers occupancy"
        )
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = warmed_up_trainer(args, "occupancy", flags, Path(output_dir))
        result = roofline(trainer, args)
    step = sum(row["measured_ms"] for row in result["phases"].values())
    print(f"roofline: {step:.1f} ms/step measured", file=sys.stderr)
    write_report(markdown(result, command, args.device), result, command, args)


if __name__ == "__main__":
    main()
