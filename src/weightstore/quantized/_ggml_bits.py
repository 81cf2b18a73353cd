"""Shared pieces of the ggml kernels: the in-place kernel type and byte-field readers.

Every kernel here writes into an output it is handed, so that the chunked driver can aim it at a
slice of the caller's array and no full-size temporary is ever made. The helpers read one field
of every block in a chunk at once: a view where the bytes allow, a small copy where they do not.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

__all__ = ["Bytes", "Floats", "IntoKernel", "f16_column", "split_nibbles"]

Bytes = NDArray[np.uint8]
"""Raw block bytes, or small codes unpacked from them."""
Floats = NDArray[np.float32]
"""Dequantized values; every kernel computes in float32, as ggml does."""

IntoKernel = Callable[[Bytes, Floats], None]
"""Dequantize a chunk: `blocks` (m, type_size) uint8 into `out` (m, block_size) float32."""


def f16_column(blocks: Bytes, at: int) -> Floats:
    """The little-endian float16 at byte `at` of every block, widened to float32, shape (m, 1).

    Widening f16 to f32 is exact, so this matches any reference that widens first (ggml does)."""
    return blocks[:, at : at + 2].view("<f2").astype(np.float32)


def split_nibbles(packed: Bytes, out: Bytes) -> None:
    """Low nibbles of `packed` (..., n) into ``out[..., 0, :]``, high ones into ``out[..., 1, :]``.

    ggml stores the first half of a group in the low nibbles and the second in the high ones, so
    `out` (..., 2, n) is the group in element order."""
    np.bitwise_and(packed, np.uint8(0x0F), out=out[..., 0, :])
    np.right_shift(packed, np.uint8(4), out=out[..., 1, :])
