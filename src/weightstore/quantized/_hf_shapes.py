"""The shape and dtype rules of the FP8 and MXFP4 layouts (and the output size all share),
without NumPy.

Recognition (from a header's names, dtypes and shapes) and the kernels (from the arrays they are
handed) check the same rules, so both live here: a scale tensor must have exactly the shape the
codes' blocks imply, and a dtype the scheme allows. Each check raises `QuantizedLayoutError`
naming the group and both tensors, before anything the sizes imply is allocated.
"""

from __future__ import annotations

import math
from typing import Final

from weightstore.errors import QuantizedLayoutError

__all__ = [
    "FP8_CODE_DTYPES",
    "FP8_SCALE_DTYPES",
    "MXFP4_BLOCK",
    "MXFP4_BYTES_PER_BLOCK",
    "check_addressable",
    "check_fp8",
    "check_fp8_dtypes",
    "check_mxfp4",
    "fp8_accepts_scale",
    "fp8_row_block",
    "fp8_scale_grid",
    "fp8_scale_mismatch",
    "mxfp4_logical_shape",
]

FP8_CODE_DTYPES: Final = frozenset({"F8_E4M3", "F8_E5M2"})
"""Dtypes FP8 codes are stored in (DeepSeek, Qwen3, compressed-tensors and ModelOpt use E4M3)."""

FP8_SCALE_DTYPES: Final = frozenset({"F32", "BF16", "F16", "F8_E8M0", "U8"})
"""Dtypes an FP8 scale may have: floats, ``float8_e8m0fnu`` (``scale_fmt: ue8m0``), and E8M0
exponents stored as ``uint8`` (MXFP8: the scale is ``2**(byte - 127)``)."""

MXFP4_BLOCK: Final = 32
"""Elements per MXFP4 scale (the OCP MX block)."""

MXFP4_BYTES_PER_BLOCK: Final = MXFP4_BLOCK // 2
"""Bytes holding one block's E2M1 codes, two per byte."""


MAX_ARRAY_SIZE: Final = 2**63 - 1
"""Bytes NumPy can address in one array, counted over its non-zero dims (`np.empty` refuses
more with a `ValueError`, even when another dim is zero)."""

OUTPUT_ITEMSIZE: Final = 4
"""Bytes per element of the widest output (float32), in which every layout computes."""


def check_addressable(
    group: str, codes: str, shape: tuple[int, ...], *, path: str | None = None
) -> None:
    """Raise `QuantizedLayoutError` when a float32 tensor of `shape` is more than NumPy can
    address: a tensor with no elements may claim any other dim (``[0, 2**62]`` holds no
    bytes and passes every size check) and its output still could not be made."""
    size = OUTPUT_ITEMSIZE
    for dim in shape:
        size *= dim or 1
    if size > MAX_ARRAY_SIZE:
        raise QuantizedLayoutError(
            f"logical shape {list(shape)} is past what one array can address "
            f"({MAX_ARRAY_SIZE:,} bytes over its non-zero dims, at {OUTPUT_ITEMSIZE} bytes each)",
            group=group,
            codes=codes,
            path=path,
        )


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def fp8_scale_grid(codes_shape: tuple[int, ...], block: tuple[int, ...]) -> tuple[int, ...]:
    """The scale shape FP8 codes of `codes_shape` imply in blocks of `block` rows x columns:
    ``[..., ceil(rows / block[0]), ceil(columns / block[1])]``; ``()`` (one scale) for
    ``block == ()``. Partial edge blocks get a scale of their own, as in DeepSeek's files."""
    if not block:
        return ()
    *leading, rows, columns = _as_matrix(codes_shape)
    return (*leading, _ceil_div(rows, block[0]), _ceil_div(columns, block[1]))


def _as_matrix(shape: tuple[int, ...]) -> tuple[int, ...]:
    """`shape` with at least two dims: a vector is one row, a scalar one element."""
    return (1,) * max(0, 2 - len(shape)) + shape


def fp8_accepts_scale(
    codes_shape: tuple[int, ...], block: tuple[int, ...], scale_shape: tuple[int, ...]
) -> bool:
    """Whether `scale_shape` holds the scales of `block`-sized blocks of `codes_shape`: the grid
    exactly, or the same number of scales in the spellings producers use for one scale
    (``()``, ``[1]``) and for one per row (``[rows]`` beside ``[rows, 1]``)."""
    if any(size <= 0 for size in block):
        return False  # no block of no elements (`check_fp8` says so)
    grid = fp8_scale_grid(codes_shape, block)
    if scale_shape == grid:
        return True
    if not block:
        return math.prod(scale_shape) == 1 and len(scale_shape) <= 2
    rows, columns = _as_matrix(codes_shape)[-2:]
    per_row = len(codes_shape) == 2 and block == (1, fp8_row_block(columns))
    # [rows, 1] is the grid unless the rows are empty: a producer still writes one per row
    return per_row and scale_shape in ((rows,), (rows, 1))


def fp8_row_block(columns: int) -> int:
    """Columns of a one-scale-per-row block: the row, or 1 for rows of no columns (a block
    size is positive, and an empty row still has its scale)."""
    return max(columns, 1)


def check_fp8_dtypes(
    group: str,
    codes: str,
    codes_dtype: str,
    scale: str,
    scale_dtype: str,
    *,
    path: str | None = None,
) -> None:
    """Raise `QuantizedLayoutError` unless FP8 codes and their scale have the scheme's dtypes."""
    if codes_dtype not in FP8_CODE_DTYPES:
        raise QuantizedLayoutError(
            f"codes are {codes_dtype}; FP8 codes are {' or '.join(sorted(FP8_CODE_DTYPES))}",
            group=group,
            codes=codes,
            companion=scale,
            path=path,
        )
    if scale_dtype not in FP8_SCALE_DTYPES:
        raise QuantizedLayoutError(
            f"scale is {scale_dtype}; an FP8 scale is one of {', '.join(sorted(FP8_SCALE_DTYPES))}",
            group=group,
            codes=codes,
            companion=scale,
            path=path,
        )


def _blocks_text(block: tuple[int, ...]) -> str:
    return "one scale" if not block else f"{block[0]}x{block[1]} blocks"


def check_fp8(
    group: str,
    codes: str,
    codes_dtype: str,
    codes_shape: tuple[int, ...],
    scale: str,
    scale_dtype: str,
    scale_shape: tuple[int, ...],
    block: tuple[int, ...],
    *,
    path: str | None = None,
) -> None:
    """Raise `QuantizedLayoutError` unless FP8 codes and their scale agree with `block`."""
    check_fp8_dtypes(group, codes, codes_dtype, scale, scale_dtype, path=path)
    if any(size <= 0 for size in block) or len(block) not in (0, 2):
        raise QuantizedLayoutError(
            f"block {block} is not two positive sizes", group=group, codes=codes, path=path
        )
    if not fp8_accepts_scale(codes_shape, block, scale_shape):
        raise QuantizedLayoutError(
            f"scale has shape {list(scale_shape)}; codes of shape {list(codes_shape)} in "
            f"{_blocks_text(block)} need {list(fp8_scale_grid(codes_shape, block))}",
            group=group,
            codes=codes,
            companion=scale,
            path=path,
        )


def fp8_scale_mismatch(
    group: str,
    codes: str,
    codes_shape: tuple[int, ...],
    scale: str,
    scale_shape: tuple[int, ...],
    blocks: list[tuple[int, ...]],
    *,
    path: str | None = None,
) -> QuantizedLayoutError:
    """The error for a scale that fits none of the blocks a config allows, naming each grid."""
    needs = "; ".join(
        f"{list(fp8_scale_grid(codes_shape, block))} in {_blocks_text(block)}" for block in blocks
    )
    return QuantizedLayoutError(
        f"scale has shape {list(scale_shape)}; codes of shape {list(codes_shape)} need {needs}",
        group=group,
        codes=codes,
        companion=scale,
        path=path,
    )


def mxfp4_logical_shape(blocks_shape: tuple[int, ...]) -> tuple[int, ...]:
    """``[..., G, 16]`` packed bytes hold ``[..., G * 32]`` values."""
    if len(blocks_shape) < 2:
        return blocks_shape
    return (*blocks_shape[:-2], blocks_shape[-2] * MXFP4_BLOCK)


def check_mxfp4(
    group: str,
    blocks: str,
    blocks_dtype: str,
    blocks_shape: tuple[int, ...],
    scales: str,
    scales_dtype: str,
    scales_shape: tuple[int, ...],
    *,
    path: str | None = None,
) -> None:
    """Raise `QuantizedLayoutError` unless MXFP4 blocks ``U8 [..., G, 16]`` and their E8M0
    scales ``U8 [..., G]`` agree."""
    if blocks_dtype != "U8" or len(blocks_shape) < 2 or blocks_shape[-1] != MXFP4_BYTES_PER_BLOCK:
        raise QuantizedLayoutError(
            f"blocks are {blocks_dtype} {list(blocks_shape)}; MXFP4 blocks are U8 "
            f"[..., G, {MXFP4_BYTES_PER_BLOCK}] (two E2M1 codes a byte)",
            group=group,
            codes=blocks,
            companion=scales,
            path=path,
        )
    if scales_dtype != "U8":
        raise QuantizedLayoutError(
            f"scales are {scales_dtype}; MXFP4 scales are U8 (E8M0 exponents)",
            group=group,
            codes=blocks,
            companion=scales,
            path=path,
        )
    if scales_shape != blocks_shape[:-1]:
        raise QuantizedLayoutError(
            f"scales have shape {list(scales_shape)}; blocks of shape {list(blocks_shape)} "
            f"need {list(blocks_shape[:-1])}, one per block",
            group=group,
            codes=blocks,
            companion=scales,
            path=path,
        )
