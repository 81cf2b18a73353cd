"""Whether a tensor's chunks tile its shape exactly (each element in exactly one chunk), in time
near-linear in the chunks however a hostile index arranges them.

Comparing chunks with each other is quadratic: 10,000 thin chunks side by side, each as long as
the tensor, keep every one of them in any sweep. Instead two exact checks, neither comparing
chunks:

- **A grid**, which is what DCP's planners write (row blocks, column blocks, FSDP x TP blocks):
  along each dimension the distinct extents of the chunks partition it, no two chunks start at
  the same place, and there are as many chunks as the partitions make cells. Each chunk is then
  one cell, no cell twice, so every cell once. Sorting the extents: O(n log n).
- **Otherwise, corners.** Map a box to the signed sum of its corners: +1 at its start, and along
  each dimension -1 one past its end, the signs multiplied (the mixed difference of its
  indicator). The map is linear and one-to-one (prefix sums undo it), so the chunks tile the
  tensor exactly if and only if their corners, summed, are the tensor's own: inside the tensor,
  a single +1 at the origin. The first point in row-major order where the sums differ is the
  first element that no chunk or several chunks hold, and the sum there says how many. Only
  corners inside the tensor need counting (a difference outside implies one inside), so a chunk
  has 2**k of them, k the dimensions it stops short in; `MAX_TILING_CORNERS` bounds their total
  over an index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from weightstore.errors import LimitExceeded

__all__ = ["MAX_TILING_CORNERS", "CornerBudget", "first_miscovered"]

MAX_TILING_CORNERS: Final = 2**22
"""Corners of chunks counted by the tiling check of one index, for the tensors whose chunks are
no grid (a grid is checked without counting any). A planner's chunks form a grid; a
hand-arranged split of a 4-d tensor on 1,024 ranks counts at most 16,384, and 2**22 takes
about five seconds."""

Box = tuple[Sequence[int], Sequence[int]]  # (offsets, sizes)


class CornerBudget:
    """Corners the checks of one index may still count (`MAX_TILING_CORNERS`)."""

    __slots__ = ("left", "limit")

    def __init__(self, limit: int = MAX_TILING_CORNERS) -> None:
        self.left = self.limit = limit


def first_miscovered(
    shape: Sequence[int],
    boxes: Sequence[Box],
    budget: CornerBudget,
    *,
    path: str,
    tensor: str,
) -> tuple[tuple[int, ...], int] | None:
    """The first element of `shape` (row-major) that is in no box or in several, with how many
    boxes hold it; None when the boxes tile `shape` exactly. Every box must lie inside `shape`.

    Raises:
        LimitExceeded: the boxes are no grid, and counting their corners would pass what is
            left of `budget` (`path` and `tensor` name them).
    """
    if 0 in shape:
        return None  # no elements; boxes inside the shape hold none
    held = [(offsets, sizes) for offsets, sizes in boxes if 0 not in sizes]
    if _is_grid(shape, held):
        return None
    return _first_by_corners(shape, held, budget, path, tensor)


def _is_grid(shape: Sequence[int], boxes: Sequence[Box]) -> bool:
    """The non-empty `boxes` are each cell, once, of a grid partitioning `shape`."""
    cells = 1
    for axis, size in enumerate(shape):
        reached = 0
        extents = sorted({(offsets[axis], sizes[axis]) for offsets, sizes in boxes})
        for start, length in extents:
            if start != reached:  # a gap, or two extents starting at one place
                return False
            reached = start + length
        cells *= len(extents)
        if reached != size or cells > len(boxes):
            return False
    # Each box is a cell, named by its starts; distinct starts and as many boxes as cells.
    return cells == len(boxes) == len({tuple(offsets) for offsets, _ in boxes})


def _first_by_corners(
    shape: Sequence[int],
    boxes: Sequence[Box],
    budget: CornerBudget,
    path: str,
    tensor: str,
) -> tuple[tuple[int, ...], int] | None:
    sums: dict[tuple[int, ...], int] = {(0,) * len(shape): -1}  # less the tensor's own corner
    for offsets, sizes in boxes:
        short = sum(o + s < d for o, s, d in zip(offsets, sizes, shape, strict=True))
        budget.left -= 1 << short
        if budget.left < 0:
            raise LimitExceeded(
                "corners of chunks counted to check they tile the tensor (chunks on no grid)",
                budget.limit - budget.left,
                budget.limit,
                path=path,
                tensor=tensor,
            )
        corners: list[tuple[tuple[int, ...], int]] = [((), 1)]
        for start, size, whole in zip(offsets, sizes, shape, strict=True):
            end = start + size
            starts = [((*point, start), sign) for point, sign in corners]
            if end < whole:
                starts += [((*point, end), -sign) for point, sign in corners]
            corners = starts
        for point, sign in corners:
            sums[point] = sums.get(point, 0) + sign
    differing = [point for point, total in sums.items() if total]
    if not differing:
        return None
    first = min(differing)
    return first, 1 + sums[first]
