"""Dequantization of ggml's IQ ("importance") block types, vectorized over blocks.

Each kernel takes a tensor's blocks as ``uint8`` of shape ``(n_blocks, type_size)`` and returns
``float32`` of shape ``(n_blocks, block_size)``, the values ggml's reference
``dequantize_row_iq*`` computes, bit for bit. The layouts (offsets in one block; ``d`` is the
block's float16 scale, little-endian like every field)::

    IQ2_XXS 66 B   d | 8 x (4 grid bytes, u32: 4 x 7 sign bits, 4-bit scale)
    IQ2_XS  74 B   d | 32 x u16 (9-bit grid index, 7 sign bits) | 16 x 4-bit scale
    IQ2_S   82 B   d | 32 grid bytes | 32 sign bytes | 32 x 2 high grid bits | 16 x 4-bit scale
    IQ3_XXS 98 B   d | 64 grid bytes | 8 x u32 (4 x 7 sign bits, 4-bit scale)
    IQ3_S  110 B   d | 64 grid bytes | 64 high grid bits | 32 sign bytes | 8 x 4-bit scale
    IQ1_S   50 B   d | 32 grid bytes | 8 x u16 (4 x 3 high grid bits, 3-bit scale, delta sign)
    IQ1_M   56 B   32 grid bytes | 32 x (3 high grid bits, delta sign) | 16 x 3-bit scale,
                   with d's 16 bits in the top nibbles of the four scale u16s
    IQ4_NL  18 B   d | 32 x 4-bit level (low nibbles are elements 0-15)
    IQ4_XS 136 B   d | 8 x 2 high scale bits | 8 x 4 low scale bits | 8 x 32 x 4-bit level

A 7-bit sign index stands for 8 signs: the eighth makes the count of minus signs even (ggml's
``ksigns_iq2xs``). Every product here is exact in float32 (an 11-bit scale times at most 13
bits of factors), so folding signs and levels into one lookup table and multiplying once per
element gives ggml's bits whatever the order; tables are built on first use and cached.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, TypeVar

from weightstore.base._lazy import import_on_first_use
from weightstore.errors import DescriptorError, DTypeError
from weightstore.quantized._ggml_iq_grids import IQ4_LEVELS, grid
from weightstore.quantized._ggml_types import GGML_TYPES_BY_NAME, GgmlType

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    Floats = NDArray[np.float32]
    Bytes = NDArray[np.uint8]

__all__ = ["IQ_KERNELS"]

if not TYPE_CHECKING:
    np = import_on_first_use("numpy", globals(), "np")

_Table = TypeVar("_Table", bound="NDArray[Any]")

_CHUNK_ELEMENTS: Final = 1 << 18
"""Elements dequantized per step (1 MiB of float32): a whole tensor at once spills every index
and product to memory, one chunk keeps them in cache, about twice as fast on large tensors."""

# Tables, each built once. "Signed" tables hold every (grid row, sign pattern) product, so a
# kernel gathers finished values and only multiplies by the scale.


def _frozen(table: _Table) -> _Table:
    """`table`, read-only: a cached table is shared by every later call."""
    table.flags.writeable = False
    return table


@cache
def _sign_bits() -> NDArray[np.uint8]:
    """ggml's 128 sign bytes: index i in the low 7 bits, bit 7 set when i has odd parity."""
    index = np.arange(128, dtype=np.uint8)
    parity = np.unpackbits(index[:, None], axis=1).sum(axis=1, dtype=np.uint8) & 1
    return _frozen(index | (parity << 7))


@cache
def _minus_ones(bits: int) -> Floats:
    """Row b: the `bits` factors (1 or -1) that the set bits of b negate, lowest bit first."""
    pattern = np.arange(1 << bits, dtype=np.uint32)[:, None] >> np.arange(bits, dtype=np.uint32)
    return _frozen(np.where(pattern & 1, np.float32(-1), np.float32(1)))


@cache
def _signed_grid8(name: str) -> Floats:
    """Row ``s * rows + g``: grid row g of 8 values signed by 7-bit sign index s; for IQ2_XS,
    whose u16 holds s above a 9-bit g, the u16 itself is the row."""
    signs = _minus_ones(8)[_sign_bits()]
    rows = signs[:, None, :] * grid(name)[None, :, :]
    return _frozen(rows.reshape(-1, 8))


@cache
def _signed_grid4(name: str) -> Floats:
    """Row ``g << 4 | nibble``: grid row g of 4 values signed by 4 sign bits (IQ3 types)."""
    rows = grid(name)[:, None, :] * _minus_ones(4)[None, :, :]
    return _frozen(rows.reshape(-1, 4))


@cache
def _signed_half_grid(name: str) -> Floats:
    """Row ``g << 5 | half << 4 | nibble``: the 4 values of half `half` of grid row g signed
    by a nibble (IQ2_S, whose full 8-bit signs would need an 8 MiB table)."""
    halves = grid(name).reshape(-1, 2, 1, 4)
    rows = halves * _minus_ones(4)[None, None, :, :]
    return _frozen(rows.reshape(-1, 4))


@cache
def _shifted_grid1() -> Floats:
    """Row ``delta_sign << 11 | g``: IQ1 grid row g plus 1/8, or minus 1/8 when the sign bit
    is set (ggml's ``IQ1S_DELTA``); exact, as in ggml."""
    rows = grid("IQ1_S")
    delta = np.float32(0.125)
    return _frozen(np.concatenate([rows + delta, rows - delta]))


@cache
def _iq4_pairs() -> NDArray[np.uint64]:
    """Entry ``b << 4 | a``: the IQ4 levels of nibbles a and b as two float32s in one uint64,
    so one gather writes two neighbouring elements."""
    levels = np.asarray(IQ4_LEVELS, dtype=np.float32)
    code = np.arange(256)
    pairs = np.stack([levels[code & 15], levels[code >> 4]], axis=1)
    return _frozen(pairs.view(np.uint64)[:, 0])


@cache
def _half_steps(step: float) -> Floats:
    """``(0.5 + s) * step`` for every 4-bit scale s: the IQ2 and IQ3_XXS scale factors."""
    scales = (np.float32(0.5) + np.arange(16, dtype=np.float32)) * np.float32(step)
    return _frozen(scales)


# Field readers shared by the kernels.


def _f16(field: Bytes) -> Floats:
    """A ``(n, 2)`` slice of little-endian float16 bytes as ``(n, 1)`` float32."""
    return field.view("<f2").astype(np.float32)


def _nibbles(field: Bytes) -> Bytes:
    """Each byte's low nibble then its high nibble, in order: ``(n, k)`` to ``(n, 2k)``."""
    pairs = np.empty((*field.shape, 2), dtype=np.uint8)
    np.bitwise_and(field, 15, out=pairs[..., 0])
    np.right_shift(field, 4, out=pairs[..., 1])
    return pairs.reshape(field.shape[0], -1)


def _rows(table: Floats, index: NDArray[np.integer[Any]], out: Floats) -> Floats:
    """Rows ``index[...]`` of `table`, written into `out` and returned in `index`'s shape.

    `np.take` along axis 0 copies whole rows, several times faster than fancy indexing;
    ``mode="clip"`` writes straight into `out` (``"raise"`` buffers) and clips nothing, since
    every index is made of as many bits as the table has rows.
    """
    rows = out.reshape(*index.shape, table.shape[1])
    np.take(table, index, axis=0, out=rows, mode="clip")
    return rows


def _iq4_levels(codes: Bytes, out: Floats) -> None:
    """Write the IQ4 levels of runs of 16 code bytes, ``(..., 16)`` to ``(..., 32)``: the low
    nibbles in order, then the high ones (IQ4_NL's block, IQ4_XS's sub-block)."""
    word = codes.view("<u2")
    index = np.empty((*word.shape[:-1], 2, 8), dtype=np.uint16)
    np.bitwise_or(word & 0x000F, (word >> 4) & 0x00F0, out=index[..., 0, :])
    np.bitwise_or((word >> 4) & 0x000F, (word >> 8) & 0x00F0, out=index[..., 1, :])
    np.take(_iq4_pairs(), index, out=out.view(np.uint64).reshape(index.shape), mode="clip")


def _scale(out: Floats, scale: Floats) -> None:
    """Multiply `out` in place by one scale per run of equal length (``scale`` is ``(n, k)``)."""
    runs = out.reshape(out.shape[0], scale.shape[1], -1)
    np.multiply(runs, scale[:, :, None], out=runs)


# The kernels: each fills `out`, ``(n, block_size)`` float32, from `blocks`.


def _iq2_xxs(blocks: Bytes, out: Floats) -> None:
    n = blocks.shape[0]
    body = blocks[:, 2:].reshape(n, 8, 8)
    aux = body[:, :, 4:].view("<u4")[:, :, 0]
    signs = (aux[:, :, None] >> np.array([0, 7, 14, 21], dtype=np.uint32)) & np.uint32(0x7F)
    _rows(_signed_grid8("IQ2_XXS"), (signs << 8) | body[:, :, :4], out)
    _scale(out, _f16(blocks[:, :2]) * _half_steps(0.25)[aux >> 28])


def _iq2_xs(blocks: Bytes, out: Floats) -> None:
    _rows(_signed_grid8("IQ2_XS"), blocks[:, 2:66].view("<u2"), out)
    _scale(out, _f16(blocks[:, :2]) * _half_steps(0.25)[_nibbles(blocks[:, 66:74])])


def _iq2_s(blocks: Bytes, out: Floats) -> None:
    n = blocks.shape[0]
    high = blocks[:, 66:74, None] >> np.array([0, 2, 4, 6], dtype=np.uint8)
    row = blocks[:, 2:34].astype(np.uint32) | ((high.reshape(n, 32) & 3).astype(np.uint32) << 8)
    index = np.empty((n, 32, 2), dtype=np.uint32)
    np.bitwise_or(row[:, :, None] << 5, _nibbles(blocks[:, 34:66]).reshape(n, 32, 2), out=index)
    index[:, :, 1] |= 16
    _rows(_signed_half_grid("IQ2_S"), index, out)
    _scale(out, _f16(blocks[:, :2]) * _half_steps(0.25)[_nibbles(blocks[:, 74:82])])


def _iq3_xxs(blocks: Bytes, out: Floats) -> None:
    n = blocks.shape[0]
    aux = blocks[:, 66:98].view("<u4")
    signs = (aux[:, :, None] >> np.array([0, 7, 14, 21], dtype=np.uint32)) & np.uint32(0x7F)
    nibbles = _nibbles(_sign_bits()[signs].reshape(n, 32)).astype(np.uint32)
    _rows(_signed_grid4("IQ3_XXS"), (blocks[:, 2:66].astype(np.uint32) << 4) | nibbles, out)
    _scale(out, _f16(blocks[:, :2]) * _half_steps(0.5)[aux >> 28])


def _iq3_s(blocks: Bytes, out: Floats) -> None:
    high = np.unpackbits(blocks[:, 66:74], axis=1, bitorder="little").astype(np.uint32)
    nibbles = _nibbles(blocks[:, 74:106]).astype(np.uint32)
    index = (blocks[:, 2:66].astype(np.uint32) << 4) | (high << 12) | nibbles
    _rows(_signed_grid4("IQ3_S"), index, out)
    odd = _nibbles(blocks[:, 106:110]).astype(np.float32) * np.float32(2) + np.float32(1)
    _scale(out, _f16(blocks[:, :2]) * odd)


def _iq1_s(blocks: Bytes, out: Floats) -> None:
    n = blocks.shape[0]
    qh = blocks[:, 34:50].view("<u2").astype(np.uint32)
    high = (qh[:, :, None] >> np.array([0, 3, 6, 9], dtype=np.uint32)) & np.uint32(7)
    index = blocks[:, 2:34].astype(np.uint32).reshape(n, 8, 4) | (high << 8)
    index |= (qh[:, :, None] >> 15) << 11
    _rows(_shifted_grid1(), index, out)
    odd = ((qh >> 12) & 7).astype(np.float32) * np.float32(2) + np.float32(1)
    _scale(out, _f16(blocks[:, :2]) * odd)


def _iq1_m(blocks: Bytes, out: Floats) -> None:
    n = blocks.shape[0]
    # A qh nibble is the grid row's bits 8-10 and, in its bit 3, the delta sign: shifted by 8
    # it is the row index of the delta-shifted grid, bit 11 and all.
    index = blocks[:, :32].astype(np.uint32) | (_nibbles(blocks[:, 32:48]).astype(np.uint32) << 8)
    _rows(_shifted_grid1(), index, out)
    packed = blocks[:, 48:56].view("<u2")
    d_bits = (packed & np.uint16(0xF000)) >> np.array([12, 8, 4, 0], dtype=np.uint16)
    d = np.bitwise_or.reduce(d_bits, axis=1, keepdims=True).view(np.float16).astype(np.float32)
    three = (packed[:, :, None] >> np.array([0, 3, 6, 9], dtype=np.uint16)) & np.uint16(7)
    _scale(out, d * (three.reshape(n, 16).astype(np.float32) * np.float32(2) + np.float32(1)))


def _iq4_nl(blocks: Bytes, out: Floats) -> None:
    _iq4_levels(blocks[:, 2:], out)
    _scale(out, _f16(blocks[:, :2]))


def _iq4_xs(blocks: Bytes, out: Floats) -> None:
    n = blocks.shape[0]
    _iq4_levels(blocks[:, 8:].reshape(n, 8, 16), out.reshape(n, 8, 32))
    high_bits = blocks[:, 2:4].view("<u2") >> np.arange(0, 16, 2, dtype=np.uint16)
    six = _nibbles(blocks[:, 4:8]) | ((high_bits & 3).astype(np.uint8) << 4)
    _scale(out, _f16(blocks[:, :2]) * (six.astype(np.float32) - np.float32(32)))


def _checked(name: str, kernel: Callable[[Bytes, Floats], None]) -> Callable[[Bytes], Floats]:
    """`kernel` behind the one check every caller needs (whole blocks of this type's size),
    run a chunk of blocks at a time so that its temporaries stay in cache."""
    gtype: GgmlType = GGML_TYPES_BY_NAME[name]
    chunk = _CHUNK_ELEMENTS // gtype.block_size

    def dequantize(blocks: Bytes) -> Floats:
        if not isinstance(blocks, np.ndarray) or blocks.dtype != np.uint8:
            found = getattr(blocks, "dtype", type(blocks).__name__)
            raise DTypeError(f"{name} blocks must be uint8, got {found}")
        if blocks.ndim != 2 or blocks.shape[1] != gtype.type_size:
            raise DescriptorError(
                f"{name} blocks must have shape (n, {gtype.type_size}), got {blocks.shape}"
            )
        blocks = np.ascontiguousarray(blocks)
        out = np.empty((blocks.shape[0], gtype.block_size), dtype=np.float32)
        with np.errstate(all="ignore"):  # a NaN or inf scale in a file is data, not a fault
            for start in range(0, blocks.shape[0], chunk):
                kernel(blocks[start : start + chunk], out[start : start + chunk])
        return out

    dequantize.__name__ = dequantize.__qualname__ = f"dequantize_{name.lower()}"
    dequantize.__doc__ = (
        f"{name} blocks ``(n, {gtype.type_size})`` to float32 ``(n, {gtype.block_size})``."
    )
    return dequantize


IQ_KERNELS: Final[Mapping[str, Callable[[Bytes], Floats]]] = MappingProxyType(
    {
        name: _checked(name, kernel)
        for name, kernel in {
            "IQ2_XXS": _iq2_xxs,
            "IQ2_XS": _iq2_xs,
            "IQ2_S": _iq2_s,
            "IQ3_XXS": _iq3_xxs,
            "IQ3_S": _iq3_s,
            "IQ1_S": _iq1_s,
            "IQ1_M": _iq1_m,
            "IQ4_NL": _iq4_nl,
            "IQ4_XS": _iq4_xs,
        }.items()
    }
)
"""The dequantizing kernel of each IQ type, by ggml name."""
