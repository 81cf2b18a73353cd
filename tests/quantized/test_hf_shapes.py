"""The shape rule every layout shares: a group with no elements may claim any other dim (the
file holds no bytes for it), and its dequantization is refused, typed, before NumPy is asked
for an array it cannot address."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tests.quantized._refusals import refused
from weightstore.quantized import dequantize_group, recognise
from weightstore.quantized._hf_shapes import MAX_ARRAY_SIZE, check_addressable

E4M3 = ml_dtypes.float8_e4m3fn


def empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray[Any, Any]:
    return np.empty(shape, dtype)  # no elements: NumPy takes any dims at one byte each


CASES = [
    (  # what the fuzzer found: F8 codes [0, 2**62] beside one scale
        {"w": empty((0, 2**62), E4M3), "w_scale_inv": np.ones((1, 1), np.float32)},
        None, "w", "w", [0, 2**62],
    ),
    (
        {"e_blocks": empty((0, 2**58, 16), np.uint8), "e_scales": empty((0, 2**58), np.uint8)},
        None, "e", "e_blocks", [0, 2**63],
    ),
    (
        {"n.weight_packed": empty((0, 2**61), np.uint8),
         "n.weight_scale": empty((0, 2**58), E4M3),
         "n.weight_global_scale": np.ones(1, np.float32)},
        None, "n.weight", "n.weight_packed", [0, 2**62],
    ),
]  # fmt: skip


@pytest.mark.parametrize(("parts", "config", "group", "codes", "logical"), CASES)
def test_an_empty_group_past_addressable_sizes_is_refused(
    parts: dict[str, np.ndarray[Any, Any]],
    config: Any,
    group: str,
    codes: str,
    logical: list[int],
) -> None:
    header = {name: (_name(a.dtype), tuple(a.shape)) for name, a in parts.items()}
    [found], _ = recognise(header, config)
    assert list(found.logical_shape) == logical
    refused(
        lambda: dequantize_group(found, parts), group=group, codes=codes, companion=None,
        match=r"past what one array can address",
    )  # fmt: skip


def test_an_empty_group_within_addressable_sizes_dequantizes_to_empty() -> None:
    parts = {"w": empty((0, 2**40), E4M3), "w_scale_inv": np.ones((1, 1), np.float32)}
    header = {name: (_name(a.dtype), tuple(a.shape)) for name, a in parts.items()}
    [group], _ = recognise(header)
    out = dequantize_group(group, parts)
    assert out.shape == (0, 2**40) and out.dtype == np.float32


def test_the_limit_is_numpys() -> None:
    """The last float32 shape the check allows NumPy makes; the first it refuses NumPy does."""
    largest = (0, MAX_ARRAY_SIZE // 4)
    check_addressable("g", "c", largest)
    assert np.empty(largest, np.float32).shape == largest
    with pytest.raises(ValueError, match="too big"):
        np.empty((0, largest[1] + 1), np.float32)
    refused(
        lambda: check_addressable("g", "c", (0, largest[1] + 1)), group="g", codes="c",
        companion=None,
    )  # fmt: skip


def _name(dtype: np.dtype[Any]) -> str:
    from weightstore.dtypes import from_numpy

    return from_numpy(dtype).name
