"""The tiling check of a DCP index: chunks that hold every element of their tensor exactly
once pass, and otherwise the first element (row-major) held by no chunk or by several is named,
exactly as counting every element with NumPy finds it; in time near-linear in the chunks."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weightstore.dcp import _index
from weightstore.dcp._index import parse_dcp_index
from weightstore.dcp._tiling import MAX_TILING_CORNERS, CornerBudget, first_miscovered
from weightstore.errors import LimitExceeded, SetError

from .test_index import FILE0, index_of

Box = tuple[tuple[int, ...], tuple[int, ...]]


def counted(shape: tuple[int, ...], boxes: list[Box]) -> tuple[tuple[int, ...], int] | None:
    """What `first_miscovered` must say, found by counting every element."""
    holders = np.zeros(shape, np.int64)
    for offsets, sizes in boxes:
        holders[tuple(slice(o, o + s) for o, s in zip(offsets, sizes, strict=True))] += 1
    wrong = np.argwhere(holders != 1)
    if not len(wrong):
        return None
    first = tuple(int(i) for i in wrong[0])
    return first, int(holders[first])


def check(shape: tuple[int, ...], boxes: list[Box]) -> tuple[tuple[int, ...], int] | None:
    return first_miscovered(shape, boxes, CornerBudget(), path="i.json", tensor="w")


@st.composite
def layouts(draw: st.DrawFn) -> tuple[tuple[int, ...], list[Box]]:
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    boxes = []
    for _ in range(draw(st.integers(0, 6))):
        offsets = tuple(draw(st.integers(0, d)) for d in shape)
        sizes = tuple(draw(st.integers(0, d - o)) for o, d in zip(offsets, shape, strict=True))
        boxes.append((offsets, sizes))
    return shape, boxes


@st.composite
def grids(draw: st.DrawFn) -> tuple[tuple[int, ...], list[Box]]:
    """A grid's cells, shuffled, sometimes less one or with one twice."""
    cuts = draw(st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=3), max_size=3))
    shape = tuple(sum(sizes) for sizes in cuts)
    axes = [[(sum(sizes[:i]), size) for i, size in enumerate(sizes)] for sizes in cuts]
    boxes: list[Box] = [((), ())]
    for extents in axes:
        boxes = [((*o, start), (*s, size)) for o, s in boxes for start, size in extents]
    boxes = draw(st.permutations(boxes))
    change = draw(st.sampled_from(["none", "drop", "repeat"]))
    if change == "drop":
        boxes = boxes[1:]
    elif change == "repeat":
        boxes = [*boxes, boxes[0]]
    return shape, boxes


@settings(max_examples=400, deadline=None)
@given(layouts() | grids())
def test_the_first_miscovered_element_is_the_one_counting_finds(
    layout: tuple[tuple[int, ...], list[Box]],
) -> None:
    shape, boxes = layout
    assert check(shape, boxes) == counted(shape, boxes)


def test_corners_are_counted_up_to_the_budget() -> None:
    # Four chunks stopping short in both dims (4 corners each) and one in neither (1).
    boxes: list[Box] = [((0, 0), (1, 1)), ((0, 1), (1, 1)), ((1, 0), (1, 1)), ((1, 1), (1, 1))]
    boxes = [((0, 0), (3, 3)), *[((1 + o[0], 1 + o[1]), s) for o, s in boxes]]  # on no grid
    needed = 1 + 4 + 2 + 2 + 1  # the corners inside the (3, 3) tensor
    found = first_miscovered((3, 3), boxes, CornerBudget(needed), path="i.json", tensor="w")
    assert found == ((1, 1), 2)
    with pytest.raises(LimitExceeded) as caught:
        first_miscovered((3, 3), boxes, CornerBudget(needed - 1), path="i.json", tensor="w")
    assert caught.value.limit == needed - 1 and caught.value.tensor == "w"


def test_a_grid_counts_no_corners() -> None:
    boxes: list[Box] = [((r, c), (1, 1)) for r in range(64) for c in range(64)]
    assert first_miscovered((64, 64), boxes, CornerBudget(0), path="i", tensor="w") is None


PINWHEEL: list[Box] = [
    ((0, 0), (1, 2)), ((0, 2), (2, 1)), ((2, 1), (1, 2)), ((1, 0), (2, 1)), ((1, 1), (1, 1)),
]  # fmt: skip  # 4 + 2 + 1 + 2 + 4 = 13 corners inside the (3, 3) tensor


def pinwheel_tensor(fqn: str) -> dict[str, Any]:
    chunks = [
        {"file": FILE0, "name": f"{fqn}{i}", "offsets": list(o), "sizes": list(s)}
        for i, (o, s) in enumerate(PINWHEEL)
    ]
    return {"dtype": "F32", "shape": [3, 3], "chunks": chunks}


def test_tilings_on_no_grid_pass() -> None:
    bricks: list[Box] = [((0, 0), (1, 4)), ((1, 0), (1, 2)), ((1, 2), (1, 2)), ((2, 0), (1, 4))]
    assert check((3, 3), PINWHEEL) is None and check((3, 4), bricks) is None
    assert check((3, 3), PINWHEEL[1:]) == ((0, 0), 0)


def test_the_budget_spans_the_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_index, "CornerBudget", lambda: CornerBudget(26))
    assert parse_dcp_index(index_of({"a": pinwheel_tensor("a"), "b": pinwheel_tensor("b")}), "i")
    monkeypatch.setattr(_index, "CornerBudget", lambda: CornerBudget(25))
    index = index_of({"a": pinwheel_tensor("a"), "b": pinwheel_tensor("b")})
    with pytest.raises(LimitExceeded, match="corners of chunks") as caught:
        parse_dcp_index(index, "i.json")
    assert caught.value.path == "i.json" and caught.value.tensor == "b"
    assert MAX_TILING_CORNERS >= 1_024 * 4**2  # a 4-d tensor on 1,024 ranks split on no grid


@contextmanager
def finishing_within(seconds: int) -> Iterator[None]:
    """Fail, rather than hang, when the block runs longer than `seconds`."""

    def stop(*_: object) -> None:
        raise AssertionError(f"did not finish within {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def staircase(columns: int) -> dict[str, Any]:
    """Each column cut in two at its own row: a tiling on no grid whose long bottom halves keep
    thousands of chunks open in any sweep along the rows (a quadratic check needs minutes)."""
    chunks = []
    for c in range(columns):
        for half, row, rows in (("top", 0, c), ("bottom", c, columns - c)):
            chunk = {"file": FILE0, "name": f"{c}.{half}", "offsets": [row, c], "sizes": [rows, 1]}
            chunks.append(chunk)
    return {"dtype": "U8", "shape": [columns, columns], "chunks": chunks}


def test_ten_thousand_columns_on_no_grid_are_checked() -> None:
    with finishing_within(60):
        tensor = staircase(10_000)
        assert len(json.dumps(tensor)) > 500_000
        assert len(parse_dcp_index(index_of({"w": tensor}), "i.json").tensors["w"].chunks) == 20_000
        tensor["chunks"].pop(2 * 5_000 + 1)  # the bottom of column 5,000
        with pytest.raises(SetError, match=r"gap: element \[5000, 5000\] is in none"):
            parse_dcp_index(index_of({"w": tensor}), "i.json")
        tensor = staircase(10_000)
        tensor["chunks"][-1]["offsets"] = [0, 9_999]  # the last bottom, over its own top
        with pytest.raises(SetError, match=r"overlap: element \[0, 9999\] is in 2"):
            parse_dcp_index(index_of({"w": tensor}), "i.json")
