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


def kd_cells(aabb: Float[Tensor, "2 3"], k: int) -> Float[Tensor, "k 2 3"]:
    """``k`` disjoint boxes ``(min corner, max corner)`` tiling ``aabb``, ordered along the splits.

    Example:
        >>> kd_cells(torch.tensor([[0.0, 0.0, 0.0], [2.0, 1.0, 1.0]]), 2)[:, :, 0].tolist()
        [[0.0, 1.0], [1.0, 2.0]]
    """
    if not 1 <= k <= MAX_BLOCKS:
        raise ValueError(f"a scene splits into 1 to {MAX_BLOCKS} cells, not {k}")
    return torch.stack(_split(aabb.detach().float().cpu(), k))


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
