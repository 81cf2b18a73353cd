"""How far apart two tensors of one dtype and shape are, computed a slice at a time.

`compare_arrays` walks both arrays in flat chunks of `CHUNK_NUMEL` elements, so the float64
temporaries stay a few megabytes whatever the tensor's size. Per tensor it reports how many
elements differ and the largest absolute and relative difference:

* equal means equal values: ``-0.0 == 0.0``, and NaN equals NaN at the same position;
* abs diff is ``|a - b|`` (complex: the modulus), infinite where one side is NaN;
* rel diff is ``|a - b| / max(|a|, |b|)``: symmetric, so ``diff A B`` and ``diff B A`` agree;
* an element counts as differing when ``abs diff > atol + rtol * max(|a|, |b|)``; with the
  default ``atol = rtol = 0`` that is any inequality.

Integers are compared exactly; their differences are computed in float64 for the report.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from weightstore.base._record import ValueRecord

__all__ = ["CHUNK_NUMEL", "Difference", "compare_arrays", "compare_bytes"]

CHUNK_NUMEL: Final = 1 << 20  # elements compared at once: 8 MiB per float64 temporary


class Difference(ValueRecord):
    """How two tensors of one dtype and shape differ.

    Attributes:
        numel: elements in each.
        differing: elements that differ (beyond the tolerance).
        max_abs: the largest absolute difference over all unequal elements; None when the
            values could only be compared as bytes.
        max_rel: the largest relative difference, likewise.
    """

    numel: int
    differing: int
    max_abs: float | None = 0.0
    max_rel: float | None = 0.0


def compare_arrays(
    a: np.ndarray[Any, Any],
    b: np.ndarray[Any, Any],
    *,
    atol: float = 0.0,
    rtol: float = 0.0,
    advance: Callable[[int], None] = lambda nbytes: None,
) -> Difference:
    """Compare two arrays of one shape chunk by chunk; `advance` gets each chunk's bytes."""
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    differing, max_abs, max_rel = 0, 0.0, 0.0
    wide = np.complex128 if a.dtype.kind == "c" or b.dtype.kind == "c" else np.float64
    for start in range(0, flat_a.size, CHUNK_NUMEL):
        chunk_a = flat_a[start : start + CHUNK_NUMEL]
        chunk_b = flat_b[start : start + CHUNK_NUMEL]
        count, chunk_abs, chunk_rel = _chunk(chunk_a, chunk_b, wide, atol, rtol)
        differing += count
        max_abs, max_rel = max(max_abs, chunk_abs), max(max_rel, chunk_rel)
        advance(chunk_a.nbytes)
    return Difference(flat_a.size, differing, max_abs, max_rel)


def _chunk(
    a: np.ndarray[Any, Any], b: np.ndarray[Any, Any], wide: Any, atol: float, rtol: float
) -> tuple[int, float, float]:
    """(differing elements, max abs diff, max rel diff) of one chunk."""
    exact = a.dtype.kind in "iub" and b.dtype.kind in "iub"
    unequal = (a != b) if exact else None  # integers compare exactly, whatever their width
    with np.errstate(all="ignore"):
        wa, wb = a.astype(wide), b.astype(wide)
        if unequal is None:
            unequal = ~((wa == wb) | (np.isnan(wa) & np.isnan(wb)))
        if not unequal.any():
            return 0, 0.0, 0.0
        wa, wb = wa[unequal], wb[unequal]
        scale = np.maximum(np.abs(wa), np.abs(wb))
        gap = np.nan_to_num(np.abs(wa - wb), nan=math.inf)
        if exact:  # unequal integers differ by 1 at least, whatever float64 rounds them to
            gap = np.maximum(gap, 1.0)
        rel = np.nan_to_num(gap / scale, nan=math.inf, posinf=math.inf)
        beyond = ~(gap <= atol + rtol * scale)
    return int(beyond.sum()), float(gap.max()), float(rel.max())


def compare_bytes(
    a: memoryview, b: memoryview, numel: int, advance: Callable[[int], None] = lambda n: None
) -> Difference:
    """Compare tensors NumPy cannot hold (packed 4-bit floats) as bytes: equal or not."""
    same = bytes(a) == bytes(b)
    advance(a.nbytes)
    return Difference(numel, 0 if same else numel, None, None)
