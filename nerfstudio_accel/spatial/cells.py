"""The cells of a spatially split scene: a k-d split of the scene box into axis-aligned boxes, and the cell of a
point.

A box is cut along its longest axis into two parts holding ``ceil(k / 2)`` and ``floor(k / 2)`` cells, in
proportion, and each part again, until every part is one cell: the cells tile the box, each is convex (a ray
crosses it in one interval), and cells of equal size hold equal shares of the box.
"""

from __future__ import annotations

from typing import List

import torch
from jaxtyping import Float, Int
from torch import Tensor

MAX_BLOCKS = 8
"""The most cells a scene is split into (a k-d split three levels deep)."""


def block_table_log2(log2_hashmap_size: int, blocks: int) -> int:
    """A block's hash-table rows per hashed level, as a power of two: one model's ``2**log2_hashmap_size`` shared out
    by ``2**floor(log2 blocks)``."""
    return log2_hashmap_size - (blocks.bit_length() - 1)


UNBOUNDED_REACH = 1e6
"""How far, in world units, the outer cells of a contracted (unbounded) scene reach beyond the box: past any far
plane, so every sample lies in a cell, and finite, so the slab test of a ray against a cell stays finite."""


def kd_cells(aabb: Float[Tensor, "2 3"], k: int) -> Float[Tensor, "k 2 3"]:
    """``k`` disjoint boxes ``(min corner, max corner)`` tiling ``aabb``, ordered along the splits.

    Example:
        >>> kd_cells(torch.tensor([[0.0, 0.0, 0.0], [2.0, 1.0, 1.0]]), 2)[:, :, 0].tolist()
        [[0.0, 1.0], [1.0, 2.0]]
    """
    if not 1 <= k <= MAX_BLOCKS:
        raise ValueError(f"a scene splits into 1 to {MAX_BLOCKS} cells, not {k}")
    return torch.stack(_split(aabb.detach().float().cpu(), k))


def unbounded_cells(cells: Float[Tensor, "k 2 3"], aabb: Float[Tensor, "2 3"]) -> Float[Tensor, "k 2 3"]:
    """``cells`` of a contracted scene: each face on the boundary of ``aabb`` moved out by
    :data:`UNBOUNDED_REACH`, so the cells tile all of space and each stays convex (an intersection of half-spaces).

    Example:
        >>> cells = kd_cells(torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]]), 2)
        >>> unbounded_cells(cells, torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]]))[:, :, 0].tolist()
        [[-1000001.0, 0.0], [0.0, 1000001.0]]
    """
    aabb = aabb.detach().float().cpu()
    lower = torch.where(cells[:, 0] <= aabb[0], aabb[0] - UNBOUNDED_REACH, cells[:, 0])
    upper = torch.where(cells[:, 1] >= aabb[1], aabb[1] + UNBOUNDED_REACH, cells[:, 1])
    return torch.stack([lower, upper], dim=1)


def contracted_region(cell: Float[Tensor, "2 3"], aabb: Float[Tensor, "2 3"]) -> Float[Tensor, "2 3"]:
    """The box of contracted grid coordinates (``[0, 1]^3``, as
    :func:`~nerfstudio_accel.fields.hash_grid_field.grid_coordinates` maps space around ``aabb``) that holds every
    point of the world-space ``cell``. Per axis, in box units (the box is ``[-1, 1]``) the contraction maps a cell
    bounded by ``p`` (below or above) into the range bounded by ``min(f(p), 0)`` below and ``max(f(p), 0)`` above,
    ``f`` the contraction of the coordinate alone; a cell split by planes through the box's centre maps tightly.

    Example:
        >>> box = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]])
        >>> [round(v, 4) for v in contracted_region(unbounded_cells(kd_cells(box, 2), box)[0], box)[:, 0].tolist()]
        [0.0, 0.5]
    """
    center, half = 0.5 * (aabb[0] + aabb[1]), 0.5 * (aabb[1] - aabb[0])
    unit = (cell.to(aabb) - center) / half  # (2, 3), box units

    def contract(p: Tensor) -> Tensor:
        magnitude = p.abs().clamp(min=1.0)
        return torch.where(p.abs() <= 1.0, p, (2.0 - 1.0 / magnitude) * p.sign())

    lower = torch.clamp(contract(unit[0]), max=0.0)
    upper = torch.clamp(contract(unit[1]), min=0.0)
    return (torch.stack([lower, upper]) + 2.0) / 4.0


def _split(box: Float[Tensor, "2 3"], k: int) -> List[Tensor]:
    if k == 1:
        return [box]
    axis = int(torch.argmax(box[1] - box[0]))
    front = (k + 1) // 2
    plane = box[0, axis] + (box[1, axis] - box[0, axis]) * front / k
    low, high = box.clone(), box.clone()
    low[1, axis], high[0, axis] = plane, plane
    return _split(low, front) + _split(high, k - front)


def cell_of(points: Float[Tensor, "n 3"], cells: Float[Tensor, "k 2 3"]) -> Int[Tensor, " n"]:
    """The cell of each point ``(n,)``: the first cell holding it after it is clamped into the cells' bounding box
    (a point on a shared face goes to the first of the two; one outside every cell to the nearest).

    Example:
        >>> cells = kd_cells(torch.tensor([[0.0, 0.0, 0.0], [2.0, 1.0, 1.0]]), 2)
        >>> cell_of(torch.tensor([[0.5, 0.5, 0.5], [1.5, 0.5, 0.5], [9.0, 0.5, 0.5]]), cells).tolist()
        [0, 1, 1]
    """
    cells = cells.to(points)
    lower, upper = cells[:, 0].amin(dim=0), cells[:, 1].amax(dim=0)
    clamped = torch.minimum(torch.maximum(points, lower), upper)[:, None, :]
    inside = ((clamped >= cells[None, :, 0]) & (clamped <= cells[None, :, 1])).all(dim=-1)
    return torch.argmax(inside.to(torch.uint8), dim=1)
