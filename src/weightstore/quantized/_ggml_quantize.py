"""Quantize float values to ggml Q8_0 and Q4_0 blocks, bit-exact with gguf-py 0.19.

Both are ggml's reference quantizers (``quantize_row_q8_0_ref``, ``quantize_row_q4_0_ref``)
as gguf-py computes them, in float32 and in the same order:

- Q8_0: ``d = max|x| / 127``, ``id = 1/d`` (0 when d is 0), ``q = round(x * id)`` with ties
  away from zero (C's ``roundf``, not NumPy's ties-to-even `rint`); d is stored as float16.
- Q4_0: ``max`` is the element of largest magnitude with its sign (the first, on ties),
  ``d = max / -8``, ``q = min(15, trunc(x * id + 8.5))``; d is stored as float16.

Non-finite input is refused (`QuantizeError`): a NaN or infinity has no code, and the
reference turns it into whatever its float-to-int cast gives, which C leaves undefined. Finite
blocks so small that ``1/d`` overflows float32 (max|x| below about 1e-36) are another such
cast in the reference; there every code is 0, what x86 gives, and as d rounds to float16 zero
those blocks read back as zeros whatever their codes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np
from numpy.typing import NDArray

from weightstore.errors import QuantizeError
from weightstore.quantized._ggml_bits import Bytes, Floats
from weightstore.quantized._ggml_types import GgmlType

__all__ = ["QUANTIZABLE", "quantize_blocks"]

QUANTIZABLE: Final = frozenset({"Q8_0", "Q4_0"})
"""The ggml types `quantize_blocks` writes."""

_CHUNK_BLOCKS: Final = 4096
"""Blocks per chunk (128 Ki values): the float32 temporaries of a chunk stay in cache, so the
memory used is the output plus about 2 MiB."""


def _reciprocal(d: Floats) -> Floats:
    """``1/d``, and 0 where d is 0 (an all-zero block), as ggml's ``d ? 1/d : 0``."""
    safe = np.where(d == 0, np.float32(1), d)
    inverse: Floats = np.where(d == 0, np.float32(0), np.float32(1) / safe)
    return inverse


def _round_half_away(values: Floats) -> Floats:
    """C's ``roundf``: nearest integer, ties away from zero, exactly (no ``x + 0.5`` rounding)."""
    magnitude = np.abs(values)
    whole = np.floor(magnitude)
    whole += (magnitude - whole) >= np.float32(0.5)
    return np.copysign(whole, values)


def _q8_0(values: Floats, out: Bytes) -> None:
    d = np.abs(values).max(axis=1, keepdims=True) / np.float32(127)
    scaled = values * _reciprocal(d)
    scaled[~np.isfinite(scaled)] = 0  # 1/d overflowed: see the module docstring
    out[:, 0:2] = d.astype("<f2").view(np.uint8)
    out[:, 2:34] = _round_half_away(scaled).astype(np.int8).view(np.uint8)


def _q4_0(values: Floats, out: Bytes) -> None:
    largest = np.abs(values).argmax(axis=1)[:, None]
    d = np.take_along_axis(values, largest, axis=1) / np.float32(-8)
    shifted = np.trunc(values * _reciprocal(d) + np.float32(8.5))
    shifted[~np.isfinite(shifted)] = 0  # 1/d overflowed: see the module docstring
    codes = np.minimum(shifted, np.float32(15)).astype(np.uint8)
    out[:, 0:2] = d.astype("<f2").view(np.uint8)
    np.bitwise_or(codes[:, 0:16], codes[:, 16:32] << np.uint8(4), out=out[:, 2:18])


_QUANTIZERS: Final[dict[str, Callable[[Floats, Bytes], None]]] = {"Q8_0": _q8_0, "Q4_0": _q4_0}


def quantize_blocks(
    values: np.ndarray, ggml: GgmlType, *, tensor: str | None = None
) -> NDArray[np.uint8]:
    """`values` (any shape, any float dtype; rounded to float32 first, as gguf-py does) as
    ``(n_blocks, type_size)`` uint8 blocks of `ggml`, in order.

    `tensor` only names the data in errors.

    Raises:
        QuantizeError: `ggml` is not in `QUANTIZABLE`, the element count is not a whole number
            of blocks, or a value is NaN or infinite.
    """
    quantize = _QUANTIZERS.get(ggml.name)
    if quantize is None:
        raise QuantizeError(
            f"cannot quantize to {ggml.name}; quantizable: {', '.join(sorted(QUANTIZABLE))}",
            tensor=tensor,
        )
    if values.size % ggml.block_size:
        raise QuantizeError(
            f"{values.size:,} values are not whole {ggml.name} blocks "
            f"({ggml.block_size} values each)",
            tensor=tensor,
        )
    if values.dtype.kind not in "fiu" and values.dtype.name != "bfloat16":
        raise QuantizeError(f"cannot quantize {values.dtype} values", tensor=tensor)
    rows = values.reshape(-1, ggml.block_size)
    out = np.empty((rows.shape[0], ggml.type_size), dtype=np.uint8)
    with np.errstate(all="ignore"):  # overflowing reciprocals are handled, not warned about
        for start in range(0, rows.shape[0], _CHUNK_BLOCKS):
            chunk = rows[start : start + _CHUNK_BLOCKS].astype(np.float32)
            finite = np.isfinite(chunk)
            if not finite.all():
                first = start * ggml.block_size + int(np.argmin(finite.reshape(-1)))
                raise QuantizeError(
                    f"value {first:,} is {chunk.reshape(-1)[first - start * ggml.block_size]}; "
                    f"{ggml.name} has no code for NaN or infinity",
                    tensor=tensor,
                )
            quantize(chunk, out[start : start + _CHUNK_BLOCKS])
    return out
