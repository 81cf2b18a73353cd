"""What the packed SafeTensors layouts (NVFP4, int pack-quantized) share: output dtypes, row
chunks, checked shapes and the one error for a group whose parts disagree (a
`QuantizedLayoutError`, as the FP8 and MXFP4 layouts raise, so one handler catches them all).

Both layouts' dequantizers write a row range at a time into a preallocated output, so a call's
peak memory is its output plus one chunk (`CHUNK_ELEMENTS` outputs and their temporaries).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any, Final

import numpy as np

from weightstore.dtypes import from_numpy
from weightstore.errors import DTypeError, QuantizedLayoutError
from weightstore.quantized._group import QuantizedGroup

__all__ = [
    "CHUNK_ELEMENTS",
    "TensorInfo",
    "companion_prefix",
    "dtype_name",
    "group_error",
    "output_dtype",
    "part",
    "row_chunks",
]

TensorInfo = tuple[str, tuple[int, ...]]
"""What a rule sees of a stored tensor: its weightstore dtype name and its shape."""

CHUNK_ELEMENTS: Final = 1 << 18
"""Outputs per chunk (1 MiB of float32), as in the ggml kernels: the chunk and its temporaries
stay in cache, and the peak memory of a dequantization is its output plus one chunk."""

_OUTPUT_DTYPES: Final = ("float32", "float16", "bfloat16")


def dtype_name(array: np.ndarray[Any, Any]) -> str:
    """The weightstore name of an array's dtype (``"F8_E4M3"``), for messages; NumPy's own
    spelling where the table has no row."""
    try:
        return from_numpy(array.dtype).name
    except DTypeError:
        return str(array.dtype)


def output_dtype(dtype: Any, group: QuantizedGroup) -> np.dtype[Any]:
    """`dtype` as a NumPy dtype (float32 for None), refused unless float32, float16, bfloat16."""
    if dtype is None:
        return np.dtype(np.float32)
    wanted: np.dtype[Any] | None
    try:
        wanted = np.dtype(dtype)
    except TypeError:
        wanted = None
    if wanted is None or wanted.name not in _OUTPUT_DTYPES:
        raise DTypeError(
            f"{group.layout} group {group.name!r} dequantizes to float32, float16 or bfloat16, "
            f"not {dtype!r}",
            tensor=group.name,
        )
    return wanted


def group_error(group: QuantizedGroup, companion: str | None, detail: str) -> QuantizedLayoutError:
    """The error for `group`'s codes and its `companion` (the part at fault; None when the
    codes alone are) disagreeing, naming the group and both tensors."""
    return QuantizedLayoutError(
        f"{group.layout}: {detail}", group=group.name, codes=group.codes, companion=companion
    )


def part(group: QuantizedGroup, parts: Mapping[str, np.ndarray], name: str) -> np.ndarray:
    """The array of stored tensor `name`, refused when the caller did not pass it."""
    array = parts.get(name)
    if array is None:
        raise group_error(
            group, None if name == group.codes else name,
            f"part {name!r} of the group was not handed to the dequantization",
        )  # fmt: skip
    return np.asarray(array)


def companion_prefix(name: str, suffix: str) -> str | None:
    """The module prefix of `name` when it ends with `suffix` (``"a.b."`` for ``a.b.weight``,
    ``""`` for a bare ``weight``), else None."""
    if name == suffix:
        return ""
    if name.endswith("." + suffix):
        return name[: -len(suffix)]
    return None


def row_chunks(rows: int, row_elements: int) -> Iterator[slice]:
    """Row ranges of about `CHUNK_ELEMENTS` outputs each (at least one row)."""
    step = max(1, CHUNK_ELEMENTS // max(1, row_elements))
    for start in range(0, rows, step):
        yield slice(start, min(rows, start + step))


def elements(shape: tuple[int, ...]) -> int:
    """The element count of `shape`."""
    return math.prod(shape)
