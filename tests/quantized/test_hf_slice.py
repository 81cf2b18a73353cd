"""`slice_group`: any box of a group's values from the parts' slices alone. The oracle is
`dequantize_group` of the whole group, cut to the box: enclosed boxes anywhere, and boxes on
block edges read as the parts' slices with nothing cut, for every sliced layout."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tests.quantized.test_hf_nvfp4 import ct_parts
from weightstore.errors import InvalidOptionError
from weightstore.quantized import QuantizedGroup, dequantize_group
from weightstore.quantized._hf_slice import logical_bounds, slice_group

F8 = ml_dtypes.float8_e4m3fn
RNG = np.random.default_rng(0)


def _fp8(
    shape: tuple[int, ...], block: tuple[int, ...], scale_shape: tuple[int, ...], layout: str
) -> Any:
    codes = RNG.standard_normal(shape).astype(F8)
    scale = RNG.uniform(0.5, 2, scale_shape).astype(np.float32)
    group = QuantizedGroup(
        name="w", layout=layout, codes="w", companions={"scale": "w_scale", "input_scale": "in"},
        logical_shape=shape, block=block, rule="test",
    )  # fmt: skip
    return group, {"w": codes, "w_scale": scale, "in": np.ones(1, np.float32)}


def _mxfp4() -> Any:
    group = QuantizedGroup(
        name="x", layout="mxfp4", codes="x_blocks", companions={"scale": "x_scales"},
        logical_shape=(3, 5, 128), block=(1, 32), rule="test",
    )  # fmt: skip
    parts = {
        "x_blocks": RNG.integers(0, 256, (3, 5, 4, 16), dtype=np.uint8),
        "x_scales": RNG.integers(120, 134, (3, 5, 4), dtype=np.uint8),
    }
    return group, parts


def _nvfp4() -> Any:
    parts = ct_parts(rows=6, cols=64)
    group = QuantizedGroup(
        name="m.weight", layout="nvfp4", codes="m.weight_packed",
        companions={"scale": "m.weight_scale", "global_scale": "m.weight_global_scale"},
        logical_shape=(6, 64), block=(1, 16), rule="test",
    )  # fmt: skip
    return group, parts


GROUPS = {
    "fp8-block 3d": _fp8((2, 37, 21), (8, 4), (2, 5, 6), "fp8-block"),
    "fp8-block 1d": _fp8((21,), (8, 4), (1, 6), "fp8-block"),
    "fp8-block wide": _fp8((20, 6), (8, 128), (3, 1), "fp8-block"),  # one block column
    "fp8-channel": _fp8((9, 12), (1, 12), (9, 1), "fp8-channel"),
    "fp8-channel rows": _fp8((9, 12), (1, 12), (9,), "fp8-channel"),
    "fp8-tensor": _fp8((9, 12), (), (), "fp8-tensor"),
    "fp8-tensor [1]": _fp8((9, 12), (), (1,), "fp8-tensor"),
    "fp8-tensor grid": _fp8((9, 12), (9, 12), (1, 1), "fp8-tensor"),
    "mxfp4": _mxfp4(),
    "nvfp4": _nvfp4(),
}


def _read(cut: Any, parts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {n: parts[n] if key is None else parts[n][key] for n, key in cut.parts.items()}


def _random_box(shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    box = []
    for size in shape:
        start = int(RNG.integers(0, size + 1))
        box.append((start, int(RNG.integers(start, size + 1))))
    return tuple(box)


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_any_enclosed_box_is_the_whole_dequantization_cut(name: str) -> None:
    group, parts = GROUPS[name]
    shapes = {n: p.shape for n, p in parts.items()}
    whole = dequantize_group(group, parts)
    for _ in range(60):
        box = _random_box(group.logical_shape)
        cut = slice_group(group, shapes, box, enclose=True)
        if any(a == b for a, b in box):  # nothing to dequantize (a rank past the last chunk)
            keep = [k.stop - k.start for k in cut.keep]
            assert keep == [b - a for a, b in box]
            continue
        values = dequantize_group(cut.group, _read(cut, parts))[cut.keep]
        want = whole[tuple(slice(a, b) for a, b in box)]
        assert np.array_equal(values, want, equal_nan=True), box


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_a_box_on_block_edges_is_its_parts_slices_with_nothing_cut(name: str) -> None:
    group, parts = GROUPS[name]
    shapes = {n: p.shape for n, p in parts.items()}
    whole = dequantize_group(group, parts)
    tried = 0
    for _ in range(200):
        box = _random_box(group.logical_shape)
        try:
            cut = slice_group(group, shapes, box, enclose=False)
        except InvalidOptionError as err:
            assert err.option == "plan" and "cuts its blocks of" in str(err)
            continue
        tried += 1
        assert all(k == slice(0, b - a) for k, (a, b) in zip(cut.keep, box, strict=True))
        if any(a == b for a, b in box):
            continue
        values = dequantize_group(cut.group, _read(cut, parts))
        assert np.array_equal(values, whole[tuple(slice(a, b) for a, b in box)], equal_nan=True)
    assert tried >= 5, tried


def test_fp8_scale_rows_follow_code_rows_and_a_cut_is_refused() -> None:
    group, parts = GROUPS["fp8-block 3d"]
    shapes = {n: p.shape for n, p in parts.items()}
    cut = slice_group(group, shapes, ((1, 2), (8, 37), (0, 21)), enclose=False)
    assert cut.parts == {
        "w": (slice(1, 2), slice(8, 37), slice(0, 21)),
        "w_scale": (slice(1, 2), slice(1, 5), slice(0, 6)),
        "in": None,
    }
    with pytest.raises(InvalidOptionError, match=r"the slice \[12:37\] of dim 1 \(size 37\)"):
        slice_group(group, shapes, ((0, 2), (12, 37), (0, 21)), enclose=False)


def test_a_per_row_scale_takes_any_columns_without_reading_more() -> None:
    group, parts = GROUPS["fp8-channel rows"]
    shapes = {n: p.shape for n, p in parts.items()}
    cut = slice_group(group, shapes, ((2, 5), (3, 7)), enclose=True)
    assert cut.parts == {"w": (slice(2, 5), slice(3, 7)), "w_scale": (slice(2, 5),), "in": None}
    assert (cut.group.logical_shape, cut.group.block) == ((3, 4), (1, 4))
    assert cut.keep == (slice(0, 3), slice(0, 4))


def test_mxfp4_block_dim_bounds_are_32_values_a_block() -> None:
    group = GROUPS["mxfp4"][0]
    assert logical_bounds(group, (3, 5, 4, 16), 2, 1, 3) == ((0, 3), (0, 5), (32, 96))
    assert logical_bounds(group, (3, 5, 4, 16), 0, 1, 2) == ((1, 2), (0, 5), (0, 128))
    with pytest.raises(InvalidOptionError, match="16 bytes of each MXFP4 block"):
        logical_bounds(group, (3, 5, 4, 16), 3, 0, 8)
