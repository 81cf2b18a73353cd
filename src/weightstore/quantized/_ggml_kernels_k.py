"""Dequantization kernels for ggml's K quants (256 elements per super-block).

Each super-block holds 8 or 16 sub-blocks with their own 4- to 8-bit scales under one float16
(float32 for Q8_K) super-scale. The float operations follow gguf-py's reference order exactly,
because float multiply-then-subtract is not associative: the sub-block scale is formed first
(``d * sc``), then multiplied by the quant, then the sub-block minimum is subtracted. Layouts,
offsets in bytes (ggml's ``block_q*_K`` structs):

- Q2_K (84): scales[16] (low nibble scale, high nibble min), qs[64] (2 bits), d, dmin.
- Q3_K (110): hmask[32] (the 3rd bit, inverted), qs[64] (2 bits), scales[12] (6 bits, packed),
  d.
- Q4_K (144): d, dmin, scales[12] (6-bit scales and mins, packed), qs[128] (4 bits).
- Q5_K (176): d, dmin, scales[12], qh[32] (the 5th bit), qs[128].
- Q6_K (210): ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] (int8), d.
- Q8_K (292): d (float32), qs[256] (int8), bsums[16] (int16, for dot products; unused here).
"""

from __future__ import annotations

import functools
from types import MappingProxyType
from typing import Final

import numpy as np
from numpy.typing import NDArray

from weightstore.quantized._ggml_bits import Bytes, Floats, IntoKernel, f16_column, split_nibbles

__all__ = ["K_QUANT_KERNELS"]

_SHIFTS_2BIT: Final = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)


def _two_bit_planes(packed: Bytes, groups: int) -> Bytes:
    """Each byte's four 2-bit fields, plane by plane: (m, groups, 4, 32), element order.

    One shift per plane rather than one broadcast shift: NumPy's inner loops then run over
    whole rows instead of 32 bytes at a time."""
    m = packed.shape[0]
    source = np.ascontiguousarray(packed).reshape(m, groups, 32)
    planes = np.empty((m, groups, 4, 32), dtype=np.uint8)
    planes[:, :, 0] = source
    for plane in range(1, 4):
        np.right_shift(source, np.uint8(2 * plane), out=planes[:, :, plane])
    np.bitwise_and(planes, np.uint8(3), out=planes)
    return planes


def _bit_planes(packed: Bytes) -> Bytes:
    """The 8 bits of 32 bytes, bit by bit: (m, 8, 32), where row s holds bit s of each byte."""
    m = packed.shape[0]
    source = np.ascontiguousarray(packed)
    planes = np.empty((m, 8, 32), dtype=np.uint8)
    planes[:, 0] = source
    for bit in range(1, 8):
        np.right_shift(source, np.uint8(bit), out=planes[:, bit])
    np.bitwise_and(planes, np.uint8(1), out=planes)
    return planes


def _q2_k(blocks: Bytes, out: Floats) -> None:
    m = blocks.shape[0]
    scales = blocks[:, 0:16]
    d = f16_column(blocks, 80)
    dmin = f16_column(blocks, 82)
    dl = (d * (scales & np.uint8(0x0F)).astype(np.float32))[:, :, None]
    ml = (dmin * (scales >> np.uint8(4)).astype(np.float32))[:, :, None]
    q = _two_bit_planes(blocks[:, 16:80], 2)
    view = out.reshape(m, 16, 16)
    view[...] = q.reshape(m, 16, 16)
    np.multiply(view, dl, out=view)
    np.subtract(view, ml, out=view)


def _q3_k_scales(packed: Bytes) -> Floats:
    """Q3_K's 16 signed 6-bit scales: low 4 bits from bytes 0-7 (low then high nibbles), high 2
    bits from bytes 8-11 (two bits per scale, four scales per byte), stored plus 32."""
    m = packed.shape[0]
    low = np.empty((m, 2, 8), dtype=np.uint8)
    split_nibbles(packed[:, 0:8], low)
    high = np.right_shift(packed[:, 8:12].reshape(m, 1, 4), _SHIFTS_2BIT.reshape(1, 4, 1))
    high = (high & np.uint8(3)) << np.uint8(4)
    scales = (low.reshape(m, 16) | high.reshape(m, 16)).view(np.int8) - np.int8(32)
    wide: Floats = scales.astype(np.float32)
    return wide


def _q3_k(blocks: Bytes, out: Floats) -> None:
    m = blocks.shape[0]
    d = f16_column(blocks, 108)
    dl = (d * _q3_k_scales(blocks[:, 96:108]))[:, :, None]
    low = _two_bit_planes(blocks[:, 32:96], 2).reshape(m, 8, 32)
    # The third bit is stored inverted: a clear bit subtracts 4.
    minus = _bit_planes(blocks[:, 0:32])
    np.bitwise_xor(minus, np.uint8(1), out=minus)
    np.left_shift(minus, np.uint8(2), out=minus)
    np.subtract(low, minus, out=low)
    view = out.reshape(m, 16, 16)
    view[...] = low.view(np.int8).reshape(m, 16, 16)
    np.multiply(view, dl, out=view)


def _k_scale_rows(blocks: Bytes) -> tuple[Floats, Floats]:
    """Q4_K's and Q5_K's per-sub-block factor ``d * sc`` and offset ``dmin * m``, (m, 8, 1).

    The 8 six-bit scales and 8 six-bit mins are packed in 12 bytes: scales and mins 0-3 are
    the low 6 bits of bytes 0-3 and 4-7; scales and mins 4-7 take their low 4 bits from the
    nibbles of bytes 8-11 and their top 2 bits from the top of bytes 0-3 and 4-7. The first
    16 bytes of the chunk are transposed first, so each step below is one NumPy call over
    the chunk instead of one per block."""
    head = np.ascontiguousarray(blocks[:, 0:16].T)  # (16, m): d, dmin, then the 12 bytes
    halves = head[0:4].astype(np.uint16)
    bits = halves[0::2] | (halves[1::2] << np.uint16(8))
    d, dmin = bits.view("<f2").astype(np.float32)  # widening float16 is exact
    first, second, third = head[4:8], head[8:12], head[12:16]
    scales = np.empty((8, head.shape[1]), dtype=np.uint8)
    mins = np.empty((8, head.shape[1]), dtype=np.uint8)
    np.bitwise_and(first, np.uint8(0x3F), out=scales[:4])
    scales[4:] = (third & np.uint8(0x0F)) | ((first >> np.uint8(2)) & np.uint8(0x30))
    np.bitwise_and(second, np.uint8(0x3F), out=mins[:4])
    mins[4:] = (third >> np.uint8(4)) | ((second >> np.uint8(2)) & np.uint8(0x30))
    factor = d * scales.astype(np.float32)
    offset = dmin * mins.astype(np.float32)
    return factor.T[:, :, None], offset.T[:, :, None]


def _four_bit_codes(packed: Bytes, out: Floats) -> None:
    """Q4_K's and Q5_K's 4-bit codes, (m, 128) bytes, into `out` (m, 256) as floats.

    Each 32-byte group holds 64 elements, low nibbles first. Splitting a contiguous copy into
    two contiguous arrays and interleaving them while widening is quicker than splitting the
    strided block bytes straight into element order."""
    m = packed.shape[0]
    contiguous = np.ascontiguousarray(packed)
    low = np.bitwise_and(contiguous, np.uint8(0x0F)).reshape(m, 4, 32)
    high = np.right_shift(contiguous, np.uint8(4)).reshape(m, 4, 32)
    view = out.reshape(m, 4, 2, 32)
    view[:, :, 0] = low
    view[:, :, 1] = high


def _q4_k(blocks: Bytes, out: Floats) -> None:
    m = blocks.shape[0]
    factor, offset = _k_scale_rows(blocks)
    _four_bit_codes(blocks[:, 16:144], out)
    view = out.reshape(m, 8, 32)
    np.multiply(view, factor, out=view)
    np.subtract(view, offset, out=view)


def _q5_k(blocks: Bytes, out: Floats) -> None:
    m = blocks.shape[0]
    factor, offset = _k_scale_rows(blocks)
    q = np.empty((m, 4, 2, 32), dtype=np.uint8)
    split_nibbles(np.ascontiguousarray(blocks[:, 48:176]).reshape(m, 4, 32), q)
    fifth = _bit_planes(blocks[:, 16:48])
    np.left_shift(fifth, np.uint8(4), out=fifth)
    q8 = q.reshape(m, 8, 32)
    np.bitwise_or(q8, fifth, out=q8)
    view = out.reshape(m, 8, 32)
    view[...] = q8
    np.multiply(view, factor, out=view)
    np.subtract(view, offset, out=view)


@functools.lru_cache(maxsize=32)
def _shift_table(pattern: tuple[int, ...], words: int, rows: int) -> NDArray[np.uint64]:
    """Shift amounts (rows, len(pattern), words): `pattern[k]` all along row k of each group."""
    one = np.repeat(np.array(pattern, dtype=np.uint64), words)
    table: NDArray[np.uint64] = np.tile(one, (rows, 1)).reshape(rows, len(pattern), words)
    table.flags.writeable = False
    return table


def _shifts(pattern: tuple[int, ...], words: int, rows: int) -> NDArray[np.uint64]:
    """`_shift_table` for `rows` rows, cached by the next power of two (a chunk's size)."""
    return _shift_table(pattern, words, 1 << max(0, (rows - 1).bit_length()))[:rows]


_LOW4: Final = np.uint64(0x0F0F0F0F0F0F0F0F)
_LOW2: Final = np.uint64(0x0303030303030303)


def _q6_k(blocks: Bytes, out: Floats) -> None:
    # NumPy's per-call cost is what dominates a kernel that walks 16-element sub-blocks, so
    # every step here is one call over the whole chunk: the fields are copied contiguous, the
    # bit planes cut from 64-bit words repeated once per plane and shifted by a table, and the
    # sub-block factors repeated per element.
    m = blocks.shape[0]
    d = f16_column(blocks, 208)
    factor = d * blocks[:, 192:208].view(np.int8).astype(np.float32)
    # Low 4 bits: each half (128 elements) is 64 bytes, low nibbles then high nibbles.
    low = np.ascontiguousarray(blocks[:, 0:128]).view(np.uint64).reshape(m * 2, 1, 8)
    q = np.repeat(low, 2, axis=1)
    np.right_shift(q, _shifts((0, 4), 8, m * 2), out=q)
    np.bitwise_and(q, _LOW4, out=q)
    # High 2 bits: plane s of each half is bits 2s..2s+1 of its 32 bytes.
    packed = np.ascontiguousarray(blocks[:, 128:192]).view(np.uint64).reshape(m * 2, 1, 4)
    high = np.repeat(packed, 4, axis=1)
    np.right_shift(high, _shifts((0, 2, 4, 6), 4, m * 2), out=high)
    np.bitwise_and(high, _LOW2, out=high)
    np.left_shift(high, np.uint64(4), out=high)
    np.bitwise_or(q, high.reshape(q.shape), out=q)
    codes = q.reshape(-1).view(np.uint8)
    np.subtract(codes, np.uint8(32), out=codes)  # wraps: read as int8 it is q - 32
    flat = out.reshape(-1)
    flat[...] = codes.view(np.int8)
    np.multiply(flat, np.repeat(factor.reshape(-1), 16), out=flat)


def _q8_k(blocks: Bytes, out: Floats) -> None:
    d = blocks[:, 0:4].view("<f4")
    out[...] = blocks[:, 4:260].view(np.int8)
    np.multiply(out, d, out=out)


K_QUANT_KERNELS: Final[MappingProxyType[str, IntoKernel]] = MappingProxyType(
    {
        "Q2_K": _q2_k,
        "Q3_K": _q3_k,
        "Q4_K": _q4_k,
        "Q5_K": _q5_k,
        "Q6_K": _q6_k,
        "Q8_K": _q8_k,
    }
)
"""The K quants' in-place kernels by ggml type name."""
