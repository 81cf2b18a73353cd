"""`slice_group`: any box of a group's values from the parts' slices alone. The oracle is
`dequantize_group` of the whole group, cut to the box: enclosed boxes anywhere, and boxes on
block edges read as the parts' slices with nothing cut, for every sliced layout."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tests.quantized import test_hf_int as hf_int
from tests.quantized.test_hf_int8 import infos_of as int8_infos
from tests.quantized.test_hf_int8 import parts_of as int8_parts
from tests.quantized.test_hf_nvfp4 import ct_parts
from weightstore.errors import InvalidOptionError
from weightstore.quantized import QuantizedGroup, _hf_slice, dequantize_group
from weightstore.quantized._hf_int import rule_int_pack
from weightstore.quantized._hf_int8 import rule_int8
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


def _int_pack(bits: int, strategy: str, gs: int | None, g_idx: bool = False, **kw: Any) -> Any:
    rows, cols = kw.pop("rows", 24), kw.pop("cols", 96)
    parts, _ = hf_int.hand_parts(rows=rows, cols=cols, gs=gs or cols, bits=bits, **kw)
    if strategy == "tensor":
        parts["m.weight_scale"] = np.array([0.25], np.float32)
        parts.pop("m.weight_zero_point", None)
    if g_idx:
        parts["m.weight_g_idx"] = RNG.permutation(np.arange(cols) // (gs or cols)).astype(np.int32)
    [group] = rule_int_pack(hf_int.infos_of(parts), hf_int.config(bits, strategy, gs, False))
    return group, parts


def _int8(scale_shape: tuple[int, ...], zero: bool) -> Any:
    parts = int8_parts(rows=6, cols=16, scale_shape=scale_shape, zero=zero)
    parts["m.input_scale"] = np.ones(1, np.float32)
    [group] = rule_int8(int8_infos(parts), None)
    return group, parts


GROUPS = {
    "int8 channel": _int8((6, 1), zero=True),
    "int8 rows": _int8((6,), zero=False),
    "int8 group": _int8((6, 4), zero=True),
    "int8 tensor": _int8((1,), zero=False),
    "int-pack 4-bit g32 asym": _int_pack(4, "group", 32),
    "int-pack 4-bit g32 sym": _int_pack(4, "group", 32, asymmetric=False),
    "int-pack 3-bit g32 asym": _int_pack(3, "group", 32, rows=64),
    "int-pack 8-bit channel": _int_pack(8, "channel", None),
    "int-pack 4-bit tensor": _int_pack(4, "tensor", None, asymmetric=False),
    "int-pack 4-bit g_idx": _int_pack(4, "group", 16, g_idx=True, cols=64),
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
    read = {n: parts[n] if key is None else parts[n][key] for n, key in cut.parts.items()}
    read.update({name: np.array(values, np.int64) for name, values in cut.derived})
    return read


def _blocks(group: QuantizedGroup) -> tuple[int, ...]:
    blocks_of = _hf_slice._LAYOUTS[group.layout][0]
    return blocks_of(group)


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
    for attempt in range(200):
        box = _random_box(group.logical_shape)
        if attempt % 2:  # half of them snapped outward to the layout's blocks
            box = tuple(
                (a - a % b, min(n, -(-c // b) * b))
                for (a, c), b, n in zip(box, _blocks(group), group.logical_shape, strict=True)
            )
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


def test_int_pack_words_scales_and_zero_point_words_follow_the_box() -> None:
    group, parts = GROUPS["int-pack 4-bit g32 asym"]  # 24x96, zero points packed down rows
    shapes = {n: p.shape for n, p in parts.items()}
    cut = slice_group(group, shapes, ((8, 16), (32, 64)), enclose=False)
    assert cut.parts == {
        "m.weight_packed": (slice(8, 16), slice(4, 8)),  # 8 four-bit codes a word
        "m.weight_scale": (slice(8, 16), slice(1, 2)),
        "m.weight_zero_point": (slice(1, 2), slice(1, 2)),  # 8 rows a word
        "m.weight_shape": None,
    }
    assert cut.derived == (("m.weight_shape", (8, 32)),) and cut.group.logical_shape == (8, 32)
    with pytest.raises(InvalidOptionError, match=r"the slice \[4:24\] of dim 0 .* blocks of 8"):
        slice_group(group, shapes, ((4, 24), (0, 96)), enclose=False)


def test_int_pack_g_idx_reads_every_scale_column_and_its_own_g_idx() -> None:
    group, parts = GROUPS["int-pack 4-bit g_idx"]
    shapes = {n: p.shape for n, p in parts.items()}
    cut = slice_group(group, shapes, ((0, 24), (8, 24)), enclose=False)
    assert cut.parts["m.weight_g_idx"] == (slice(8, 24),)
    assert cut.parts["m.weight_scale"] == (slice(0, 24), slice(None))


def test_int_pack_word_bounds_and_a_word_split_cutting_a_code() -> None:
    four = GROUPS["int-pack 4-bit g32 asym"][0]
    assert logical_bounds(four, (24, 12), 1, 4, 12) == ((0, 24), (32, 96))
    three = GROUPS["int-pack 3-bit g32 asym"][0]  # 96 columns: 9 words, 32 codes in 3
    assert logical_bounds(three, (64, 9), 1, 3, 9) == ((0, 64), (32, 96))
    with pytest.raises(InvalidOptionError, match="split at word 4 cuts a code; split at "
                       "multiples of 3 words"):  # fmt: skip
        logical_bounds(three, (64, 9), 1, 4, 9)


def test_int8_per_row_scale_spelled_as_rows_takes_its_rows() -> None:
    group, parts = GROUPS["int8 rows"]
    shapes = {n: p.shape for n, p in parts.items()}
    cut = slice_group(group, shapes, ((2, 5), (3, 9)), enclose=False)
    assert cut.parts == {
        "m.weight": (slice(2, 5), slice(3, 9)),
        "m.weight_scale": (slice(2, 5),),
        "m.input_scale": None,
    }
    assert cut.group.block == (1, 6)


def test_int_pack_columns_cutting_a_group_read_whole_words_and_name_their_scales() -> None:
    group, parts = GROUPS["int-pack 4-bit g32 asym"]
    shapes = {n: p.shape for n, p in parts.items()}
    cut = slice_group(group, shapes, ((0, 24), (41, 70)), enclose=True)
    assert cut.parts["m.weight_packed"] == (slice(0, 24), slice(5, 9))  # columns 40..72
    assert cut.parts["m.weight_scale"] == (slice(0, 24), slice(1, 3))
    assert cut.group.companions["g_idx"] == "m.weight_g_idx"
    assert dict(cut.derived)["m.weight_g_idx"] == (0,) * 24 + (1,) * 8
    assert cut.keep == (slice(0, 24), slice(1, 30))
