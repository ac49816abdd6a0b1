"""The marching op on each backend against its torch twin: the same packed samples, on bounded and contracted
(multi-level, cone-angle) grids, rays from inside and outside the box, misses, no rays.

``kernel`` is numba for CPU tensors and Triton for CUDA ones (Triton's source also runs on CPU tensors under its
interpreter: ``tests/kernels/test_marching_triton.py``); ``nerfacc`` sums its lattice step by step, so it is held
to the twin within a cell face's rounding (``test_nerfacc_cuda_parity.py``).
"""

from __future__ import annotations

import pytest
import torch

from accel_test_helpers import marching_scene as scene
from accel_test_helpers import sample
from nerfstudio_accel.kernels.marching_numba import empty_cube_pyramid
from nerfstudio_accel.ops import _torch_impl, backends
from nerfstudio_accel.ops.marching import traverse_occupancy_grid
from nerfstudio_accel.sampling.occupancy import MarchingOptions, OccupancySampler

SCENES = {
    # name: (levels, step_size, cone_angle)
    "bounded": (1, 2 * 3**0.5 / 1000, 0.0),
    "contracted-cone": (4, 2 * 3**0.5 / 256, 1 / 256),
    "coarse-cone": (2, 0.01, 0.02),
}
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="Triton marches CUDA tensors: needs a CUDA GPU")


def assert_twins_samples(actual, expected, cone_angle: float) -> None:
    """The same rays exactly; uniform steps bit-identical, geometric steps within an ulp of ``pow``."""
    assert torch.equal(actual[0].cpu(), expected[0])
    assert actual[1].dtype == expected[1].dtype == torch.float32
    tolerance = 0.0 if cone_angle == 0.0 else 1e-6
    for got, want in zip(actual[1:], expected[1:]):
        torch.testing.assert_close(got.cpu(), want, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("name", sorted(SCENES))
def test_kernel_backend_on_cpu_gives_the_twins_samples(name):
    levels, step_size, cone_angle = SCENES[name]
    inputs = scene(levels, seed=levels)
    expected = _torch_impl.traverse_occupancy_grid(*inputs, step_size, cone_angle)
    assert expected[0].numel() > 1000  # the grids are neither empty nor trivially full
    assert traverse_occupancy_grid(*inputs, step_size, cone_angle, backend="torch")[0].equal(expected[0])
    assert_twins_samples(
        traverse_occupancy_grid(*inputs, step_size, cone_angle, backend="kernel"), expected, cone_angle
    )


@pytest.mark.parametrize(
    "levels, cap, side", [(1, None, 24), (3, None, 24), (1, 7, 24), (1, None, 22), (1, None, 21), (1, None, 64)]
)
def test_kernel_crosses_cells_to_the_twins_samples(levels, cap, side):
    """A sparse grid (a shell of occupied cells, most cells empty), whose empty cubes and cells the numba marcher
    crosses in one go on a uniform lattice: the twin's samples bit for bit (the first ``cap`` of each ray, as the op
    caps the twin's), with rays along the axes (directions with zero components), rays grazing cell faces and rays
    starting inside empty cells. The largest empty cubes: 8 cells at ``side`` 24, 2 at 22, none at 21 (cells only),
    32 at 64."""
    origins, directions, _, aabbs, near, far = scene(levels, seed=11, n_rays=1200)
    axis = torch.eye(3).repeat(40, 1)  # along +x, +y, +z ...
    directions[:120] = torch.where(torch.arange(120)[:, None] % 2 == 0, axis, -axis)
    origins[:120] = torch.rand(120, 3, generator=torch.Generator().manual_seed(3)) * 1.6 - 0.8
    origins[:120:4] = torch.round(origins[:120:4] * side / 2) / (side / 2)  # on the faces of the cells
    origins[:120] -= directions[:120] * 3.0  # from outside the box
    centres = (torch.stack(torch.meshgrid(*[torch.arange(side)] * 3, indexing="ij"), -1) + 0.5) / (side / 2) - 1.0
    shell = (centres.norm(dim=-1) - 0.6).abs() < 0.09
    binaries = torch.zeros(levels, side, side, side, dtype=torch.bool)
    binaries[:] = shell
    assert 0.005 < shell.float().mean() < 0.15
    step_size = 2 * 3**0.5 / 1000
    inputs = (origins, directions, binaries, aabbs, near, far)
    expected = traverse_occupancy_grid(*inputs, step_size, 0.0, backend="torch", max_samples_per_ray=cap)
    assert expected[0].numel() > 5000
    if cap is not None:  # the cap binds
        assert torch.bincount(expected[0]).max() == cap
        assert expected[0].numel() < _torch_impl.traverse_occupancy_grid(*inputs, step_size, 0.0)[0].numel()
    actual = traverse_occupancy_grid(*inputs, step_size, 0.0, backend="kernel", max_samples_per_ray=cap)
    assert_twins_samples(actual, expected, 0.0)


@pytest.mark.parametrize("shape", [(64, 64, 64), (24, 40, 8), (22, 20, 12), (21, 22, 22)])
def test_empty_cube_pyramid_marks_the_cubes_that_hold_an_occupied_cell(shape):
    """Each size of aligned cube, up to the largest that divides every side (at most 32 cells), marks exactly the
    cubes where any of its cells is occupied: what pooling the cells says."""
    cells = torch.rand(shape, generator=torch.Generator().manual_seed(sum(shape))) < 0.01
    occupied, starts, sides = empty_cube_pyramid(cells[None])
    divides = [shift for shift in range(1, 6) if all(side % 2**shift == 0 for side in shape)]
    assert sides.shape[0] == 1 + len(divides) and sides[0].tolist() == list(shape)
    assert occupied.size == sum(int(sides[shift].prod()) for shift in divides)
    for shift in divides:
        edge = 2**shift
        pooled = cells.reshape(shape[0] // edge, edge, shape[1] // edge, edge, shape[2] // edge, edge)
        expected = pooled.any(dim=5).any(dim=3).any(dim=1)
        assert 0 < expected.sum() <= expected.numel()
        got = torch.from_numpy(occupied[starts[shift] : starts[shift] + expected.numel()].copy())
        assert torch.equal(got.reshape(expected.shape), expected)


@pytest.mark.parametrize("cap", [None, 5])
@pytest.mark.parametrize("occupancy", [0.05, 0.5])
def test_kernel_runs_on_midpoints_that_fall_on_cell_faces(cap, occupancy):
    """Axis-aligned rays on a lattice whose midpoints land exactly on the faces of 3 levels' cells (a quarter cell a
    step, the first midpoint at the near plane), some with tiny, denormal or -0.0 components across: where a run
    ends is only an estimate there, so the kernel must check it with its own arithmetic to give the twin's
    samples (a kernel that trusts the estimate is off by a few samples)."""
    generator = torch.Generator().manual_seed(1)
    side, n = 16, 3000
    step = 2.0 / side / 4
    axis, sign = torch.arange(n) % 3, torch.where(torch.arange(n) % 2 == 0, 1.0, -1.0)
    origins = torch.rand(n, 3, generator=generator) * 1.8 - 0.9
    origins[torch.arange(n), axis] = -3.0 * sign
    directions = torch.zeros(n, 3)
    directions[torch.arange(n), axis] = sign
    directions[::5, (axis[::5] + 1) % 3] = 1e-30
    directions[1::5, (axis[1::5] + 1) % 3] = -1e-41
    directions[2::5, (axis[2::5] + 2) % 3] = -0.0
    aabbs = torch.tensor([[-1.0, -1, -1, 1, 1, 1], [-2.0, -2, -2, 2, 2, 2], [-4.0, -4, -4, 4, 4, 4]])
    binaries = torch.rand(3, side, side, side, generator=generator) < occupancy
    inputs = (origins, directions, binaries, aabbs, torch.full((n,), 0.5 * step), torch.full((n,), 100.0))
    expected = traverse_occupancy_grid(*inputs, step, 0.0, backend="torch", max_samples_per_ray=cap)
    assert expected[0].numel() > 1000
    actual = traverse_occupancy_grid(*inputs, step, 0.0, backend="kernel", max_samples_per_ray=cap)
    assert_twins_samples(actual, expected, 0.0)


@pytest.mark.parametrize("backend", ["torch", "kernel"])
def test_a_negative_cap_keeps_no_samples(backend):
    inputs = scene(1, seed=2, n_rays=50)
    marched = traverse_occupancy_grid(*inputs, 0.01, backend=backend, max_samples_per_ray=-1)
    assert all(t.numel() == 0 for t in marched)


@needs_cuda
@pytest.mark.parametrize("levels, step_size, cone_angle", [(1, 2 * 3**0.5 / 1000, 0.0), (4, 2 * 3**0.5 / 256, 1 / 256)])
def test_kernel_backend_on_cuda_gives_the_twins_samples(levels, step_size, cone_angle):
    """The Triton marcher compiled for this GPU marches the twin's samples (uniform and cone-angle lattices), and
    the backend probe that ``auto`` reads finds it runnable."""
    generator = torch.Generator().manual_seed(levels)
    origins = torch.randn(20000, 3, generator=generator) * 2.0
    directions = torch.nn.functional.normalize(torch.randn(20000, 3, generator=generator) * 0.4 - origins, dim=-1)
    aabbs = torch.stack([torch.tensor([-1.0, -1.0, -1.0, 1.0, 1.0, 1.0]) * 2**level for level in range(levels)])
    binaries = torch.rand(levels, 64, 64, 64, generator=generator) > 0.5
    near = 0.05 + 0.01 * torch.rand(20000, generator=generator)
    inputs = [origins, directions, binaries, aabbs, near, torch.full((20000,), 1e3)]
    # against the twin on CPU, whose float32 arithmetic the kernels follow (torch on CUDA divides by
    # reciprocals, an ulp away at cell boundaries)
    expected = _torch_impl.traverse_occupancy_grid(*inputs, step_size, cone_angle)
    actual = traverse_occupancy_grid(*[t.cuda() for t in inputs], step_size, cone_angle, backend="kernel")
    assert expected[0].numel() > 100000
    assert_twins_samples(actual, expected, cone_angle)
    assert backends.marcher_unavailable_reason("cuda") == ""


@pytest.mark.parametrize("backend", ["torch", "kernel"])
def test_no_rays_or_no_occupied_cells_give_no_samples(backend):
    origins, directions, binaries, aabbs, near, far = scene(1, seed=0, n_rays=10)
    empty = traverse_occupancy_grid(
        origins[:0], directions[:0], binaries, aabbs, near[:0], far[:0], 0.01, backend=backend
    )
    assert all(t.numel() == 0 for t in empty) and empty[0].dtype == torch.int64
    nothing = traverse_occupancy_grid(
        origins, directions, torch.zeros_like(binaries), aabbs, near, far, 0.01, backend=backend
    )
    assert all(t.numel() == 0 for t in nothing)


def test_sampler_with_kernel_backend_samples_like_the_torch_backend():
    """Through OccupancySampler.sample with culling: the two backends keep the same samples."""
    origins, directions, binaries, _, _, _ = scene(1, seed=5)
    options = MarchingOptions(render_step_size=0.01)
    results = []
    for backend in ("kernel", "torch"):
        sampler = OccupancySampler(torch.tensor([-1.0, -1.0, -1.0, 1.0, 1.0, 1.0]), resolution=24, backend=backend)
        sampler.grid.binaries = binaries.clone()
        density = lambda points: 50.0 * torch.exp(-(points**2).sum(dim=-1, keepdim=True) / 0.2)  # noqa: E731
        results.append(sample(sampler, origins, directions, options, density_fn=density))
    for actual, expected in zip(*results):
        assert torch.equal(actual, expected)
