"""``verify --values``: NaN, Inf, all-zero and constant tensors, the usual signs of a bad export.

Each tensor is scanned in chunks of `VALUE_CHUNK_ELEMENTS` elements of its flattened view, so
memory stays bounded however large it is (a mapped file's pages come and go). Floats narrower
than 32 bits (f16, bf16, the f8 kinds through ml_dtypes) are widened one chunk at a time to
float32, which holds each of their values, NaN and Inf included; f32, f64 and complex are
compared as they are. Integers have no NaN or Inf, so only their zeros are counted; booleans
and dtypes NumPy cannot hold (GGUF blocks that do not dequantize: Q8_1, a big-endian file's) are
read but not judged.

A tensor of fewer than two elements is never "all-zero" or "constant": a scalar step counter
of 0 is no sign of anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from weightstore.cli._text import plural
from weightstore.dtypes import DType

__all__ = ["VALUE_CHUNK_ELEMENTS", "ValueCounts", "ValueTally", "scan_values"]

VALUE_CHUNK_ELEMENTS: Final = 2**22
"""Elements judged at once: 16 MiB as float32, so a widened chunk stays small."""


@dataclass(slots=True)
class ValueCounts:
    """What one tensor's values hold: `size` elements, of which `nan`, `inf` and `zero`;
    `constant` when every element equals the first (`first`); `floating` for float kinds."""

    size: int = 0
    nan: int = 0
    inf: int = 0
    zero: int = 0
    constant: bool = True
    first: Any = None
    floating: bool = False

    @property
    def broken(self) -> bool:
        """NaN or Inf anywhere: the tensor fails."""
        return bool(self.nan or self.inf)

    @property
    def all_zero(self) -> bool:
        """Two elements or more, every one zero."""
        return self.size > 1 and self.zero == self.size

    @property
    def all_same(self) -> bool:
        """A float tensor of two elements or more, every one the same non-zero value."""
        return self.floating and self.size > 1 and self.constant and not self.all_zero

    def problem(self) -> str:
        """The failure line's text: how many NaN and Inf among how many values."""
        found = [f"{self.nan:,} NaN" if self.nan else "", f"{self.inf:,} Inf" if self.inf else ""]
        return f"{' and '.join(part for part in found if part)} among {self.size:,} values"

    def warning(self) -> str | None:
        """The warning's text for an all-zero or constant tensor, else None."""
        if self.all_zero:
            return f"all {self.size:,} values are zero"
        if self.all_same:
            return f"all {self.size:,} values are {self.first}"
        return None


@dataclass(slots=True)
class ValueTally:
    """Over a file: tensors scanned, broken (NaN/Inf), all-zero, constant, and not judged."""

    scanned: int = 0
    broken: int = 0
    zero: int = 0
    constant: int = 0
    unjudged: int = 0

    def add(self, counts: ValueCounts | None) -> None:
        """Count one tensor's outcome (None: its dtype is not judged)."""
        if counts is None:
            self.unjudged += 1
            return
        self.scanned += 1
        self.broken += counts.broken
        self.zero += counts.all_zero
        self.constant += counts.all_same

    def note(self) -> str:
        """The report's summary line."""
        line = (
            f"values of {plural(self.scanned, 'tensor')} scanned: {self.broken:,} with NaN or "
            f"Inf, {self.zero:,} all-zero, {self.constant:,} constant"
        )
        if self.unjudged:
            why = "bool, no NumPy type, or blocks no kernel reads"
            line += f"; {plural(self.unjudged, 'tensor')} not judged ({why})"
        return line


def _judged_kind(dtype: DType | None, array: np.ndarray[Any, Any]) -> str | None:
    """``"f"`` for floats and complex, ``"i"`` for integers, None for what is not judged."""
    kind = dtype.kind if dtype is not None else array.dtype.kind
    if kind in ("f", "c"):
        return "f"
    if kind in ("i", "u") and array.dtype.kind in ("i", "u"):
        return "i"
    return None


def _comparable(chunk: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """`chunk` as NumPy compares it: ml_dtypes floats (kind ``V``) and f16 widened to f32."""
    if chunk.dtype.kind in ("f", "c") and chunk.dtype.itemsize >= 4:
        return chunk
    return chunk.astype(np.float32)


def scan_values(
    array: np.ndarray[Any, Any], dtype: DType | None, advance: Callable[[int], None]
) -> ValueCounts | None:
    """Count `array`'s NaN, Inf and zeros, chunk by chunk, advancing progress by the bytes read;
    None when its dtype is not judged (the caller then only reads it)."""
    kind = _judged_kind(dtype, array)
    if kind is None:
        return None
    flat = np.ascontiguousarray(array).reshape(-1)
    counts = ValueCounts(size=flat.size, floating=kind == "f")
    for start in range(0, flat.size, VALUE_CHUNK_ELEMENTS):
        raw = flat[start : start + VALUE_CHUNK_ELEMENTS]
        chunk = _comparable(raw) if kind == "f" else raw
        if counts.first is None:
            counts.first = chunk[0]
        if kind == "f":
            counts.nan += int(np.count_nonzero(np.isnan(chunk)))
            counts.inf += int(np.count_nonzero(np.isinf(chunk)))
        counts.zero += int(np.count_nonzero(chunk == 0))
        if counts.constant:
            counts.constant = bool(np.all(chunk == counts.first))
        advance(raw.nbytes)
    return counts
