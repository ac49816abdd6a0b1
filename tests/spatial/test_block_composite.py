"""The front-to-back composite over blocks: each block rendering only its own samples, composited, gives the merged
samples' image, and each block's gradient, with the other blocks' results taken as constants (as a rank receives
them), is the merged render's gradient at that block's samples. In one process and in 2 gloo processes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from nerfstudio_accel.rendering import render_packed
from nerfstudio_accel.sampling.packed import PackedSamples
from nerfstudio_accel.spatial.block_composite import (
    BlockRender,
    composite_blocks,
    gather_block_renders,
    render_block,
)
from nerfstudio_accel.spatial.cells import cell_of, kd_cells

BOX = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]])
STEP = 0.04
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
"""float32 sums taken in another order (per block, then over blocks) than over the merged samples."""


def scene(n_rays: int = 96, seed: int = 0):
    """Rays from every side through the box (so pairs of cells are crossed in both orders), their lattice samples
    inside the box, and leaf densities and colours."""
    generator = torch.Generator().manual_seed(seed)
    origins = 3.0 * torch.nn.functional.normalize(torch.randn(n_rays, 3, generator=generator), dim=-1)
    targets = 0.7 * (torch.rand(n_rays, 3, generator=generator) * 2 - 1)
    directions = torch.nn.functional.normalize(targets - origins, dim=-1)
    t = 1.0 + STEP * torch.arange(100, dtype=torch.float32)
    ray_indices = torch.arange(n_rays).repeat_interleave(t.numel())
    t_starts = t.repeat(n_rays)
    inside = ((origins[ray_indices] + directions[ray_indices] * (t_starts + STEP / 2)[:, None]).abs() < 1.0).all(-1)
    samples = PackedSamples(ray_indices[inside], t_starts[inside], t_starts[inside] + STEP, origins, directions)
    points = samples.positions
    densities = (25.0 * torch.exp(-(points**2).sum(-1, keepdim=True) / 0.3)).requires_grad_()
    colors = torch.rand(samples.n_samples, 3, generator=generator).requires_grad_()
    background = torch.rand(n_rays, 3, generator=generator)
    target = torch.rand(n_rays, 3, generator=generator)
    return samples, densities, colors, background, target


def loss(rendered, target) -> torch.Tensor:
    """A loss that reads all three outputs, so each one's gradient is checked."""
    return (
        ((rendered["rgb"] - target) ** 2).sum() + 0.3 * rendered["accumulation"].sum() + 0.1 * rendered["depth"].sum()
    )


def block_rows(samples: PackedSamples, k: int):
    cells = kd_cells(BOX, k)
    block = cell_of(samples.positions.detach(), cells)
    return [torch.nonzero(block == b).reshape(-1) for b in range(k)]


def own_block(samples, densities, colors, rows) -> BlockRender:
    return render_block(samples.subset(rows), densities[rows], colors[rows])


@pytest.mark.parametrize("k", [2, 3, 5])
def test_blocks_composited_render_and_train_as_the_merged_samples(k):
    samples, densities, colors, background, target = scene()
    merged = render_packed(samples, densities, colors, background)
    merged_grads = torch.autograd.grad(loss(merged, target), [densities, colors])
    rows = block_rows(samples, k)
    assert all(part.numel() > 0 for part in rows)
    renders = [own_block(samples, densities, colors, part) for part in rows]
    composite = composite_blocks(renders, background)
    for name in ("rgb", "accumulation", "depth"):
        torch.testing.assert_close(composite[name], merged[name], **TOLERANCE)
    entries = torch.stack([render.entry for render in renders])
    crossed_both = torch.isfinite(entries[0]) & torch.isfinite(entries[1])
    assert (entries[0][crossed_both] < entries[1][crossed_both]).any()
    assert (entries[0][crossed_both] > entries[1][crossed_both]).any()  # cells crossed in both orders
    for b, part in enumerate(rows):  # as rank b would: the other blocks' results as constants
        as_received = [
            render if j == b else BlockRender.from_flat(render.flat().detach()) for j, render in enumerate(renders)
        ]
        grads = torch.autograd.grad(loss(composite_blocks(as_received, background), target), [densities, colors])
        for grad, merged_grad in zip(grads, merged_grads):
            torch.testing.assert_close(grad[part], merged_grad[part], **TOLERANCE)
            others = torch.ones(grad.shape[0], dtype=torch.bool)
            others[part] = False
            assert not grad[others].any()


def test_an_opaque_front_block_hides_the_blocks_behind_it():
    samples, densities, colors, background, target = scene()
    rows = block_rows(samples, 2)
    opaque = densities.detach().clone()
    opaque[rows[0]] = 1e4
    renders = [own_block(samples, opaque.requires_grad_(), colors, part) for part in rows]
    composite = composite_blocks(renders, background)
    entries = torch.stack([render.entry for render in renders])
    front_first = torch.isfinite(entries[0]) & (entries[0] < entries[1])
    assert front_first.sum() > 0
    torch.testing.assert_close(composite["rgb"][front_first], renders[0].rgb[front_first], **TOLERANCE)
    (grad,) = torch.autograd.grad(loss(composite, target), [colors])
    behind = torch.isin(samples.ray_indices, torch.nonzero(front_first).reshape(-1))
    assert not grad[rows[1]][behind[rows[1]]].any()


def composite_rank(rank: int, init_file: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        samples, densities, colors, background, target = scene()
        own = own_block(samples, densities, colors, block_rows(samples, 2)[rank])
        composite = composite_blocks(gather_block_renders(own), background)
        grads = torch.autograd.grad(loss(composite, target), [densities, colors])
        torch.save({"rgb": composite["rgb"].detach(), "grads": grads}, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_two_ranks_each_rendering_one_block_composite_and_train_as_one_process(tmp_path):
    """Each of 2 gloo ranks renders its block of the same rays; one all-gather of 6 floats per ray; both composite
    the merged image, and each rank's gradient is the merged render's at its block's samples."""
    mp.spawn(composite_rank, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    samples, densities, colors, background, target = scene()
    merged = render_packed(samples, densities, colors, background)
    merged_grads = torch.autograd.grad(loss(merged, target), [densities, colors])
    for rank, part in enumerate(block_rows(samples, 2)):
        result = torch.load(tmp_path / f"rank{rank}.pt")
        torch.testing.assert_close(result["rgb"], merged["rgb"].detach(), **TOLERANCE)
        for grad, merged_grad in zip(result["grads"], merged_grads):
            torch.testing.assert_close(grad[part], merged_grad[part], **TOLERANCE)


def test_one_process_gathers_its_own_render_only():
    samples, densities, colors, _, _ = scene(8)
    own = own_block(samples, densities, colors, torch.arange(samples.n_samples))
    assert gather_block_renders(own) == [own]
