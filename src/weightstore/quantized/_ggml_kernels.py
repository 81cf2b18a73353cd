"""NumPy dequantization kernels for ggml's block types, and the chunked driver that runs them.

A kernel turns ``(n_blocks, type_size)`` uint8 blocks into ``(n_blocks, block_size)`` float32
values, bit for bit what llama.cpp's gguf-py 0.19 (``gguf.quants.dequantize``) computes: each
float operation is done in the same precision and order (float32, the scale widened from float16
first), because a reader that disagrees in the last bit with the reference cannot be checked.

Speed comes from working in chunks of `CHUNK_ELEMENTS` outputs, small enough to stay in cache,
written straight into the caller's array with in-place ufuncs: no full-size temporaries, and the
peak memory of `dequantize_blocks` is its output plus one chunk. Layouts, offsets in bytes
(ggml's ``block_*`` structs; d, m and dmin are float16):

- Q4_0 (18): d, qs[16] (low nibbles are elements 0-15, high 16-31); value ``d * (q - 8)``.
- Q4_1 (20): d, m, qs[16]; value ``d * q + m``.
- Q5_0 (22): d, qh[4] (bit j: the 5th bit of element j), qs[16]; ``d * (q - 16)``.
- Q5_1 (24): d, m, qh[4], qs[16]; ``d * q + m``.
- Q8_0 (34): d, qs[32] (int8); ``d * q``.
- TQ1_0 (54): qs[48] and qh[4] holding base-3 digits (5 and 4 per byte), d; ``d * (t - 1)``.
- TQ2_0 (66): qs[64] (2 bits), d; ``d * (q - 1)``.
- MXFP4 (17): e (E8M0 exponent), qs[16] (E2M1 codes); ``2**(e - 128) * 2 * fp4(q)``.
- NVFP4 (36): d[4] (UE4M3, one per 16 elements), qs[32] (E2M1 codes, 8 bytes per 16).
- The K quants: see `_ggml_kernels_k`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Final

import numpy as np
from numpy.typing import DTypeLike, NDArray

from weightstore.errors import DTypeError, FormatError, InvalidOptionError
from weightstore.quantized._ggml_bits import Bytes, Floats, IntoKernel, f16_column, split_nibbles
from weightstore.quantized._ggml_kernels_k import K_QUANT_KERNELS
from weightstore.quantized._ggml_types import GGML_TYPES_BY_NAME, GgmlType

__all__ = ["CHUNK_ELEMENTS", "KERNELS", "Kernel", "dequantize_blocks", "dequantize_into"]

Kernel = Callable[[np.ndarray], np.ndarray]
"""Dequantize ``(n_blocks, type_size)`` uint8 blocks to ``(n_blocks, block_size)`` float32."""

CHUNK_ELEMENTS: Final = 1 << 18
"""Outputs per chunk (1 MiB of float32): the chunk and its temporaries stay in a core's L2
cache, which is where the speed over whole-array NumPy comes from. Smaller chunks pay more
Python and NumPy call overhead per element (each chunk costs some 20 to 30 calls); larger ones
spill the cache and raise the memory a call needs beyond its output."""

_FP4_DOUBLED: Final = np.array(
    [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32
)
"""The 16 E2M1 values, doubled so they are integers (the scale tables halve to match)."""


def _e8m0_half_table() -> Floats:
    """E8M0 exponent byte e to ``2**(e - 128)`` as float32 (half the scale, since the E2M1
    table is doubled); e = 0 and 1 land in float32's subnormals, as in ggml."""
    codes = np.arange(256, dtype=np.uint32)
    bits = np.where(codes < 2, np.uint32(0x00200000) << codes, (codes - 1) << np.uint32(23))
    table: Floats = bits.astype(np.uint32).view(np.float32)
    return table


def _ue4m3_half_table() -> Floats:
    """UE4M3 byte to half its value as float32: 4 exponent bits (bias 7), 3 mantissa bits,
    subnormal at exponent 0. The sign bit is ignored, and 0x7F (NaN in E4M3) reads as 0, as in
    ggml. Every value is exact in float64 and float32, so computing in float64 is exact."""
    values = []
    for code in range(256):
        exponent, mantissa = (code >> 3) & 0xF, code & 0x7
        if code in (0, 0x7F):
            value = 0.0
        elif exponent == 0:
            value = mantissa * 2.0**-9
        else:
            value = math.ldexp(1.0 + mantissa / 8.0, exponent - 7)
        values.append(value * 0.5)
    return np.array(values, dtype=np.float32)


_E8M0_HALF: Final = _e8m0_half_table()
_UE4M3_HALF: Final = _ue4m3_half_table()

_TERNARY_POWERS_5: Final = np.array([1, 3, 9, 27, 81], dtype=np.uint8).reshape(1, 1, 5, 1)
_TERNARY_POWERS_4: Final = np.array([1, 3, 9, 27], dtype=np.uint8).reshape(1, 1, 4, 1)
_SHIFTS_2BIT: Final = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)


def _nibbles(packed: Bytes) -> Bytes:
    """A 32-element group's 4-bit codes in element order, (m, 32): low nibbles first."""
    m = packed.shape[0]
    codes = np.empty((m, 2, 16), dtype=np.uint8)
    split_nibbles(packed, codes)
    return codes.reshape(m, 32)


def _fifth_bits(packed: Bytes) -> Bytes:
    """Q5_0's and Q5_1's qh: bit j of the little-endian uint32 as 0 or 16, (m, 32)."""
    bits = np.unpackbits(packed, axis=1, bitorder="little")
    np.left_shift(bits, np.uint8(4), out=bits)
    return bits


def _q4_0(blocks: Bytes, out: Floats) -> None:
    q = _nibbles(blocks[:, 2:18])
    np.subtract(q, np.uint8(8), out=q)  # wraps: read as int8 it is q - 8
    out[...] = q.view(np.int8)
    np.multiply(out, f16_column(blocks, 0), out=out)


def _q4_1(blocks: Bytes, out: Floats) -> None:
    out[...] = _nibbles(blocks[:, 4:20])
    np.multiply(out, f16_column(blocks, 0), out=out)
    np.add(out, f16_column(blocks, 2), out=out)


def _q5_0(blocks: Bytes, out: Floats) -> None:
    q = _nibbles(blocks[:, 6:22])
    np.bitwise_or(q, _fifth_bits(blocks[:, 2:6]), out=q)
    np.subtract(q, np.uint8(16), out=q)
    out[...] = q.view(np.int8)
    np.multiply(out, f16_column(blocks, 0), out=out)


def _q5_1(blocks: Bytes, out: Floats) -> None:
    q = _nibbles(blocks[:, 8:24])
    np.bitwise_or(q, _fifth_bits(blocks[:, 4:8]), out=q)
    out[...] = q
    np.multiply(out, f16_column(blocks, 0), out=out)
    np.add(out, f16_column(blocks, 2), out=out)


def _q8_0(blocks: Bytes, out: Floats) -> None:
    out[...] = blocks[:, 2:34].view(np.int8)
    np.multiply(out, f16_column(blocks, 0), out=out)


def _ternary_digits(packed: Bytes, powers: NDArray[np.uint8]) -> Bytes:
    """TQ1_0's base-3 digits: byte b holds ``ceil(digits * 256 / 3**k)``; digit i is the top
    two bits' worth of ``(b * 3**i mod 256) * 3``, i.e. ``((b * 3**i) % 256 * 3) >> 8``."""
    m = packed.shape[0]
    shifted = packed.reshape(m, 1, 1, packed.shape[1]) * powers  # uint8: wraps mod 256
    digits = (shifted.astype(np.uint16) * np.uint16(3)) >> np.uint16(8)
    narrow: Bytes = digits.astype(np.uint8).reshape(m, -1)
    return narrow


def _tq1_0(blocks: Bytes, out: Floats) -> None:
    out[:, 0:160] = _ternary_digits(blocks[:, 0:32], _TERNARY_POWERS_5)
    out[:, 160:240] = _ternary_digits(blocks[:, 32:48], _TERNARY_POWERS_5)
    out[:, 240:256] = _ternary_digits(blocks[:, 48:52], _TERNARY_POWERS_4)
    np.subtract(out, np.float32(1), out=out)  # small integers: exact, as ggml's int8 step
    np.multiply(out, f16_column(blocks, 52), out=out)


def _tq2_0(blocks: Bytes, out: Floats) -> None:
    m = blocks.shape[0]
    q = np.right_shift(blocks[:, 0:64].reshape(m, 2, 1, 32), _SHIFTS_2BIT)
    np.bitwise_and(q, np.uint8(3), out=q)
    np.subtract(q, np.uint8(1), out=q)
    out[...] = q.view(np.int8).reshape(m, 256)
    np.multiply(out, f16_column(blocks, 64), out=out)


def _mxfp4(blocks: Bytes, out: Floats) -> None:
    scale = _E8M0_HALF[blocks[:, 0:1]]
    np.take(_FP4_DOUBLED, _nibbles(blocks[:, 1:17]), out=out)
    np.multiply(out, scale, out=out)


def _nvfp4(blocks: Bytes, out: Floats) -> None:
    m = blocks.shape[0]
    scale = _UE4M3_HALF[blocks[:, 0:4]].reshape(m, 4, 1)
    codes = np.empty((m, 4, 2, 8), dtype=np.uint8)
    split_nibbles(blocks[:, 4:36].reshape(m, 4, 8), codes)
    view = out.reshape(m, 4, 16)
    np.take(_FP4_DOUBLED, codes.reshape(m, 4, 16), out=view)
    np.multiply(view, scale, out=view)


_INTO: Final[Mapping[str, IntoKernel]] = MappingProxyType(
    {
        "Q4_0": _q4_0,
        "Q4_1": _q4_1,
        "Q5_0": _q5_0,
        "Q5_1": _q5_1,
        "Q8_0": _q8_0,
        **K_QUANT_KERNELS,
        "TQ1_0": _tq1_0,
        "TQ2_0": _tq2_0,
        "MXFP4": _mxfp4,
        "NVFP4": _nvfp4,
    }
)


def _blocks_per_chunk(ggml: GgmlType) -> int:
    return max(1, CHUNK_ELEMENTS // ggml.block_size)


def _whole(name: str, into: IntoKernel) -> Kernel:
    """The `Kernel` for `into`: a fresh float32 output, filled chunk by chunk."""
    ggml = GGML_TYPES_BY_NAME[name]

    def kernel(blocks: np.ndarray) -> np.ndarray:
        rows = _as_blocks(blocks, ggml, None, None)
        out = np.empty((rows.shape[0], ggml.block_size), dtype=np.float32)
        step = _blocks_per_chunk(ggml)
        with np.errstate(all="ignore"):  # inf or NaN scales are the file's, not a fault here
            for start in range(0, rows.shape[0], step):
                into(rows[start : start + step], out[start : start + step])
        return out

    kernel.__name__ = kernel.__qualname__ = f"dequantize_{name.lower()}"
    kernel.__doc__ = f"Dequantize {name} blocks to float32, bit-exact with gguf-py."
    return kernel


KERNELS: Final[Mapping[str, Kernel]] = MappingProxyType(
    {name: _whole(name, into) for name, into in _INTO.items()}
)
"""The dequantization kernel of each ggml type this module covers, by ggml name. The IQ types
live elsewhere and reach `dequantize_blocks` through its `extra` argument."""

_OUTPUT_DTYPES: Final = frozenset({"float32", "float16", "bfloat16"})


def _as_blocks(blocks: np.ndarray, ggml: GgmlType, path: str | None, tensor: str | None) -> Bytes:
    """`blocks` as a C-contiguous (n, type_size) uint8 array, or a typed error."""
    if blocks.dtype != np.uint8:
        raise DTypeError(
            f"{ggml.name} blocks must be uint8 bytes, not {blocks.dtype}", path=path, tensor=tensor
        )
    if blocks.size % ggml.type_size:
        raise FormatError(
            f"{blocks.size:,} bytes are not whole {ggml.name} blocks ({ggml.type_size} bytes each)",
            path=path,
            tensor=tensor,
        )
    return np.ascontiguousarray(blocks).reshape(-1, ggml.type_size)


def dequantize_into(
    blocks: np.ndarray,
    ggml: GgmlType,
    out: np.ndarray,
    extra: Mapping[str, Kernel] | None = None,
    *,
    path: str | None = None,
    tensor: str | None = None,
) -> None:
    """Dequantize `blocks` into `out`, a writable C-contiguous array of ``n_blocks *
    block_size`` float32, float16 or bfloat16 elements (any shape).

    Other dtypes than float32 are computed in float32 a chunk at a time and rounded to nearest
    even, so the memory used beyond `out` is one chunk.

    Raises:
        DTypeError: `blocks` is not uint8, `out` has another dtype, or no kernel covers `ggml`
            (neither here nor in `extra`).
        FormatError: the byte count is not a whole number of blocks.
        InvalidOptionError: `out` has the wrong size or is not writable and contiguous.
    """
    rows = _as_blocks(blocks, ggml, path, tensor)
    n_out = rows.shape[0] * ggml.block_size
    if out.dtype.name not in _OUTPUT_DTYPES:
        raise DTypeError(
            f"dequantized values go to float32, float16 or bfloat16, not {out.dtype}",
            path=path,
            tensor=tensor,
        )
    faults = [f"{out.size:,} elements"] if out.size != n_out else []
    faults += [] if out.flags.c_contiguous else ["not C-contiguous"]
    faults += [] if out.flags.writeable else ["read-only"]
    if faults:
        raise InvalidOptionError(
            f"out must be a writable C-contiguous array of {n_out:,} elements "
            f"({rows.shape[0]:,} {ggml.name} blocks), not {', '.join(faults)}",
            option="out",
        )
    target = out.reshape(rows.shape[0], ggml.block_size)
    step = _blocks_per_chunk(ggml)
    into = _INTO.get(ggml.name)
    whole = None if into is not None else (extra or {}).get(ggml.name)
    if into is None and whole is None:
        raise DTypeError(
            f"no dequantization kernel for ggml type {ggml.name}", path=path, tensor=tensor
        )
    direct = target.dtype == np.float32 and into is not None
    scratch = None if direct else np.empty((min(step, rows.shape[0]), ggml.block_size), np.float32)
    with np.errstate(all="ignore"):  # inf or NaN scales are the file's, not a fault here
        for start in range(0, rows.shape[0], step):
            chunk = rows[start : start + step]
            dest = target[start : start + step]
            if direct:
                assert into is not None
                into(chunk, dest)
            elif into is not None:
                assert scratch is not None
                part = scratch[: chunk.shape[0]]
                into(chunk, part)
                dest[...] = part
            else:
                assert whole is not None
                dest[...] = whole(chunk)


def dequantize_blocks(
    blocks: np.ndarray,
    ggml: GgmlType,
    dtype: DTypeLike = np.float32,
    extra: Mapping[str, Kernel] | None = None,
    *,
    path: str | None = None,
    tensor: str | None = None,
) -> np.ndarray:
    """The values of `blocks` (uint8, any shape, whole blocks of `ggml`) as a flat array of
    ``n_blocks * block_size`` elements of `dtype`: float32 (bit-exact with gguf-py), or float16
    or ml_dtypes.bfloat16 (that float32, rounded to nearest even a chunk at a time).

    `extra` adds kernels by ggml name for types this module does not cover (the IQ types).
    `path` and `tensor` only name the data in errors.

    Raises:
        DTypeError: `blocks` is not uint8, `dtype` is not one of the three, or no kernel covers
            `ggml`.
        FormatError: the byte count is not a whole number of blocks.
    """
    try:
        wanted = np.dtype(dtype)
    except TypeError:
        wanted = None
    if wanted is None or wanted.name not in _OUTPUT_DTYPES:
        raise DTypeError(
            f"dequantized values go to float32, float16 or bfloat16, not {dtype!r}",
            path=path,
            tensor=tensor,
        )
    rows = _as_blocks(blocks, ggml, path, tensor)
    out = np.empty(rows.shape[0] * ggml.block_size, dtype=wanted)
    dequantize_into(rows, ggml, out, extra, path=path, tensor=tensor)
    return out
