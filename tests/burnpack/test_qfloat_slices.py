"""`BurnpackReader.get_dequantized_part`: a box of a Burn QFloat tensor equals the whole
tensor's values cut to it, bit for bit, for every scheme the whole-tensor tests cover, and reads
only the codes and scales of the blocks and packed words around it."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.burnpack.test_qfloat import CASES, block_scales, build, random_codes, scheme
from tests.distributed._counting import counting_reads
from weightstore.burnpack import BurnpackReader, _reader
from weightstore.errors import DTypeError, SliceError


def boxes(shape: tuple[int, ...], seed: int) -> list[tuple[slice, ...]]:
    """Every prefix and suffix cut of each dim, random boxes, steps, and an empty one."""
    rng = np.random.default_rng(seed)
    found: list[tuple[slice, ...]] = [(), (slice(0, 1),), (slice(shape[0] - 1, None),)]
    for _ in range(12):
        box = []
        for size in shape:
            low = int(rng.integers(0, size))
            box.append(slice(low, int(rng.integers(low + 1, size + 1))))
        found.append(tuple(box))
    found.append(tuple(slice(None, None, 2) for _ in shape))
    found.append(tuple(slice(None, None, -3) for _ in shape))
    found.append((slice(1, 1),))
    return found


def case_file(value: str, store: Any, shape: tuple[int, ...], block: Any, scale_dtype: str) -> Any:
    codes = random_codes(shape, value, seed=len(shape) * 7 + shape[-1])
    if block is None:
        quant = scheme(value, store, tensor=scale_dtype if scale_dtype != "F32" else None)
        return build(codes, quant, np.array([0.0625], np.float32), scale_dtype)[1]
    scales = block_scales(shape, block, seed=shape[-1])
    quant = scheme(value, store, block=block, block_dtype=scale_dtype)
    return build(codes, quant, scales, scale_dtype)[1]


@pytest.mark.parametrize(
    ("value", "store", "shape", "block", "scale_dtype"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_every_box_equals_the_whole_cut(
    value: str, store: Any, shape: tuple[int, ...], block: Any, scale_dtype: str
) -> None:
    pack = BurnpackReader.from_bytes(case_file(value, store, shape, block, scale_dtype))
    for dtype in ("F32", "BF16", "F16"):
        whole = pack.get_dequantized("q", dtype)
        for box in boxes(shape, seed=len(shape)):
            part = pack.get_dequantized_part("q", box, dtype)
            cut = np.ascontiguousarray(whole[box])
            assert part.dtype == whole.dtype and part.shape == cut.shape, box
            assert part.flags.c_contiguous
            np.testing.assert_array_equal(part.view(np.uint8), cut.view(np.uint8), str(box))


def test_two_level_scales_cut_like_the_whole() -> None:
    codes = random_codes((8, 24), "Q4S", seed=5)
    scales = block_scales((8, 24), (4,), seed=6)
    quant = scheme("Q4S", {"PackedU32": 0}, tensor="F32", block=(4,), block_dtype="UE4M3")
    pack = BurnpackReader.from_bytes(build(codes, quant, scales, "UE4M3", global_scale=3.0)[1])
    whole = pack.get_dequantized("q")
    for rows, cols in itertools.product([slice(0, 8), slice(3, 5)], [slice(5, 19), slice(0, 4)]):
        part = pack.get_dequantized_part("q", (rows, cols))
        np.testing.assert_array_equal(part, whole[rows, cols])


LARGE = [
    ("q4s-u32-block32", "Q4S", {"PackedU32": 0}, (512, 2048), (32,), "F32"),
    ("q8s-native-block2d", "Q8S", "Native", (512, 1024), (16, 16), "F16"),
    ("q8s-native-tensor", "Q8S", "Native", (512, 1024), None, "F32"),
    ("q2s-u32-dim1", "Q2S", {"PackedU32": 1}, (512, 1024), (64, 1), "BF16"),
]


@pytest.mark.parametrize(
    ("value", "store", "shape", "block", "scale_dtype"),
    [case[1:] for case in LARGE],
    ids=[case[0] for case in LARGE],
)
def test_a_quarter_reads_about_a_quarter_of_the_bytes(
    tmp_path: Path, value: str, store: Any, shape: tuple[int, ...], block: Any, scale_dtype: str
) -> None:
    path = tmp_path / "q.bpk"
    path.write_bytes(case_file(value, store, shape, block, scale_dtype))
    rows, cols = shape
    quarters = {
        "rows": (slice(rows // 4, rows // 2),),
        "cols": (slice(None), slice(3 * cols // 4, cols)),
    }
    with BurnpackReader.from_file(path) as pack:
        whole = pack.get_dequantized("q")
        nbytes = pack.descriptor("q").nbytes
    for name, box in quarters.items():
        with counting_reads(_reader) as counter, BurnpackReader.from_file(path) as pack:
            opened = counter.total  # the header, read at open
            part = pack.get_dequantized_part("q", box)
        read = counter.total - opened
        np.testing.assert_array_equal(part, whole[box])
        assert 0.99 * nbytes / 4 <= read <= 1.1 * nbytes / 4 + 64, f"{name}: {read:,} of {nbytes:,}"


def test_bad_indexes_and_plain_tensors_are_refused_by_name() -> None:
    pack = BurnpackReader.from_bytes(case_file("Q8S", "Native", (4, 6), (2, 3), "F16"))
    for bad in [(0, slice(None)), slice(0, 2), (slice(None),) * 3, (slice(0, 2, 0),)]:
        with pytest.raises(SliceError) as caught:
            pack.get_dequantized_part("q", bad)  # type: ignore[arg-type]
        assert caught.value.tensor == "q"
    with pytest.raises(DTypeError):
        pack.get_dequantized_part("q", (slice(0, 2),), "I8")
