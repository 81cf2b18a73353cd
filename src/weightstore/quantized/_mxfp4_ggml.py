"""gpt-oss's MXFP4 pair (``*_blocks`` + ``*_scales``) to ggml's MXFP4 blocks and back, byte
for byte.

Both layouts hold the same 32-element block, one E8M0 scale byte and 32 E2M1 codes, so a
checkpoint converts between SafeTensors and GGUF by moving bytes, never through values. Only
the order of the codes differs (offsets in a block; ``c[i]`` is element i's 4-bit code):

    gpt-oss  blocks ``[..., G, 16]``: byte k = c[2k]  | c[2k + 1] << 4    (k = 0..15)
             scales ``[..., G]``:     the E8M0 byte, value ``2**(e - 127)``
    ggml     one 17-byte block:       byte 0 = the same E8M0 byte
                                      byte 1 + j = c[j] | c[j + 16] << 4  (j = 0..15)

The scale byte is copied as it is: ggml multiplies its doubled E2M1 table by
``2**(e - 128)``, the half scale, which is the same number, so both decoders give the same
float32 bits under every scale byte (255, E8M0's NaN, included: neither reads it as NaN) but
one: ggml's value table is int8, so code 8, E2M1's -0.0, decodes to +0.0 in ggml and to -0.0
on the SafeTensors side. The bytes keep the sign either way. The two code orders mix in one
shape both ways: with ``a``, ``b`` two strings of 8 bytes, byte by byte,

    low  = (a & 0x0F) | (b << 4)        high = (a >> 4) | (b & 0xF0)

gpt-oss to ggml takes ``a, b`` = bytes 0-7 and 8-15 and writes ``low, high`` to the even and
odd qs bytes; ggml to gpt-oss takes the even and odd qs bytes and writes bytes 0-7 and 8-15.
Each string of 8 is one 64-bit word, masked per byte lane, so the arithmetic is 8 operations
on one word a string (whatever the machine's byte order) and the only byte-wise work is the
strided copy between words and the 17-byte ggml rows.

Work goes in chunks of `ROWS_PER_CHUNK` blocks written into the output, so the peak memory is
the output plus one chunk's three scratch arrays of words. Inputs are read in place (a mapped
file's arrays) unless NumPy cannot view them as rows of blocks, when its reshape copies them
once; codes whose bytes are not adjacent are copied a chunk at a time.
"""

from __future__ import annotations

import math
from typing import Any, Final

import numpy as np

from weightstore.errors import DescriptorError, DTypeError
from weightstore.quantized._ggml_types import GGML_TYPES_BY_NAME
from weightstore.quantized._hf_pack import dtype_name
from weightstore.quantized._hf_shapes import (
    MXFP4_BLOCK,
    MXFP4_BYTES_PER_BLOCK,
    check_mxfp4,
    mxfp4_logical_shape,
)

__all__ = ["GGML_BLOCK_SIZE", "ROWS_PER_CHUNK", "ggml_to_mxfp4", "mxfp4_to_ggml"]

_MXFP4: Final = GGML_TYPES_BY_NAME["MXFP4"]
GGML_BLOCK_SIZE: Final = _MXFP4.type_size
"""17 bytes a ggml MXFP4 block: the scale byte, then the 16 code bytes."""
assert _MXFP4.block_size == MXFP4_BLOCK and GGML_BLOCK_SIZE == 1 + MXFP4_BYTES_PER_BLOCK

ROWS_PER_CHUNK: Final = 1 << 16
"""Blocks per chunk: 1 MiB of codes, 1.5 MiB of scratch words. Byte shuffles are cheap per
element, so chunks are larger than the dequantizers' to keep NumPy's per-call cost small
(on one core, 4,096 blocks a chunk run about half as fast; 262,144 no faster)."""

_WORD: Final = 8  # bytes in the uint64 each half of a block is handled as
_LOW: Final = np.uint64(0x0F0F_0F0F_0F0F_0F0F)  # the low nibble of every byte lane
_HIGH: Final = np.uint64(0xF0F0_F0F0_F0F0_F0F0)
_FOUR: Final = np.uint64(4)


def _scratch(rows: int) -> list[np.ndarray[Any, Any]]:
    """Three reused word arrays of one chunk: the words a step cannot take in place, and a
    temporary."""
    return [np.empty(min(rows, ROWS_PER_CHUNK), np.uint64) for _ in range(3)]


def _mix(
    a: np.ndarray[Any, Any],
    b: np.ndarray[Any, Any],
    low: np.ndarray[Any, Any],
    high: np.ndarray[Any, Any],
    temp: np.ndarray[Any, Any],
) -> None:
    """``low = (a & 0x0F) | (b << 4)`` and ``high = (a >> 4) | (b & 0xF0)`` in every byte
    lane of uint64 words: the one step both directions share (module docstring). `a` and `b`
    are only read; `temp` is scratch of the same length."""
    np.left_shift(b, _FOUR, out=temp)
    np.bitwise_and(temp, _HIGH, out=temp)  # a lane's low nibble, moved up; the spill is cut
    np.bitwise_and(a, _LOW, out=low)
    np.bitwise_or(low, temp, out=low)
    np.right_shift(a, _FOUR, out=temp)
    np.bitwise_and(temp, _LOW, out=temp)
    np.bitwise_and(b, _HIGH, out=high)
    np.bitwise_or(high, temp, out=high)


def mxfp4_to_ggml(
    blocks: np.ndarray[Any, Any],
    scales: np.ndarray[Any, Any],
    *,
    group: str = "weight",
    blocks_name: str = "weight_blocks",
    scales_name: str = "weight_scales",
    path: str | None = None,
) -> np.ndarray[Any, Any]:
    """gpt-oss's MXFP4 `blocks` (uint8 ``[..., G, 16]``) and `scales` (uint8 ``[..., G]``) as
    ggml MXFP4 blocks: uint8 ``[..., G * 17]``, gguf-py's raw shape for a tensor of logical
    shape ``[..., G * 32]`` (what ``GgufReader.get_raw`` returns and a `TensorEntry`'s
    ``blocks`` hands the GGUF writer). Lossless: `ggml_to_mxfp4` gives the bytes back.

    `group`, `blocks_name`, `scales_name` and `path` only name the tensors in errors.

    Raises:
        DTypeError: `blocks` or `scales` is not a NumPy array (bytes, a memoryview).
        QuantizedLayoutError: a dtype other than uint8, blocks whose last dim is not 16, or
            scales whose shape is not the blocks' without it; before anything is allocated.

    Example:
        >>> codes = np.arange(32) % 16  # element i has code i % 16
        >>> blocks = (codes[0::2] | codes[1::2] << 4).astype(np.uint8).reshape(1, 1, 16)
        >>> raw = mxfp4_to_ggml(blocks, np.array([[127]], np.uint8))
        >>> raw.shape, [f"{byte:02x}" for byte in raw[0, :5]]  # byte 1 + j: c[j] | c[j + 16] << 4
        ((1, 17), ['7f', '00', '11', '22', '33'])
    """
    for name, part in ((blocks_name, blocks), (scales_name, scales)):
        if not isinstance(part, np.ndarray):
            raise DTypeError(
                f"MXFP4 {name!r} must be a uint8 array, not {type(part).__name__}",
                path=path,
                tensor=group,
            )
    check_mxfp4(
        group, blocks_name, dtype_name(blocks), tuple(blocks.shape), scales_name,
        dtype_name(scales), tuple(scales.shape), path=path,
    )  # fmt: skip
    logical = mxfp4_logical_shape(tuple(blocks.shape))
    out = np.empty((*logical[:-1], logical[-1] // MXFP4_BLOCK * GGML_BLOCK_SIZE), np.uint8)
    rows = math.prod(scales.shape)
    if rows == 0:
        return out
    source = blocks.reshape(rows, MXFP4_BYTES_PER_BLOCK)
    exponents = scales.reshape(rows)
    target = out.reshape(rows, GGML_BLOCK_SIZE)
    scratch = _scratch(rows)
    for start in range(0, rows, ROWS_PER_CHUNK):
        stop = min(rows, start + ROWS_PER_CHUNK)
        low, high, temp = (array[: stop - start] for array in scratch)
        words = _words(source[start:stop])
        _mix(words[:, 0], words[:, 1], low, high, temp)
        dest = target[start:stop]
        dest[:, 0] = exponents[start:stop]
        dest[:, 1::2] = _bytes(low)  # the only byte-wise work: into 17-byte rows
        dest[:, 2::2] = _bytes(high)
    return out


def ggml_to_mxfp4(
    raw: np.ndarray[Any, Any],
    logical_shape: tuple[int, ...],
    *,
    tensor: str = "weight",
    path: str | None = None,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """ggml MXFP4 blocks of a tensor of `logical_shape` ``[..., G * 32]`` as gpt-oss's pair:
    ``(blocks, scales)``, uint8 ``[..., G, 16]`` and ``[..., G]``; the inverse of
    `mxfp4_to_ggml`, byte for byte.

    `raw` is uint8 in gguf-py's raw shape ``[..., G * 17]`` or flat (a file's bytes).
    `tensor` and `path` only name the tensor in errors.

    Raises:
        DTypeError: `raw` is not a uint8 array.
        DescriptorError: `logical_shape` has no dims, a negative one, or an innermost dim that
            is not whole 32-element blocks; `raw` holds another byte count or has a shape of
            neither kind; before anything is allocated.
    """
    if not isinstance(raw, np.ndarray) or raw.dtype != np.uint8:
        kind = raw.dtype if isinstance(raw, np.ndarray) else type(raw).__name__
        raise DTypeError(
            f"MXFP4 blocks must be a uint8 array, not {kind}", path=path, tensor=tensor
        )
    shape = _checked_logical(logical_shape, path, tensor)
    groups = shape[-1] // MXFP4_BLOCK
    rows = math.prod(shape[:-1]) * groups
    gguf_shape = (*shape[:-1], groups * GGML_BLOCK_SIZE)
    if raw.size != rows * GGML_BLOCK_SIZE or (raw.ndim != 1 and raw.shape != gguf_shape):
        raise DescriptorError(
            f"MXFP4 blocks are {raw.size:,} bytes of shape {list(raw.shape)}; logical shape "
            f"{list(shape)} needs {rows * GGML_BLOCK_SIZE:,} bytes, flat or {list(gguf_shape)}",
            path=path,
            tensor=tensor,
        )
    blocks = np.empty((*shape[:-1], groups, MXFP4_BYTES_PER_BLOCK), np.uint8)
    scales = np.empty((*shape[:-1], groups), np.uint8)
    if rows == 0:
        return blocks, scales
    source = raw.reshape(rows, GGML_BLOCK_SIZE)
    exponents = scales.reshape(rows)
    target = blocks.reshape(rows, MXFP4_BYTES_PER_BLOCK).view(np.uint64)  # [rows, 2], written
    scratch = _scratch(rows)
    for start in range(0, rows, ROWS_PER_CHUNK):
        stop = min(rows, start + ROWS_PER_CHUNK)
        even, odd, temp = (array[: stop - start] for array in scratch)
        chunk = source[start:stop]
        exponents[start:stop] = chunk[:, 0]
        _bytes(even)[...] = chunk[:, 1::2]  # the only byte-wise work: out of 17-byte rows
        _bytes(odd)[...] = chunk[:, 2::2]
        _mix(even, odd, target[start:stop, 0], target[start:stop, 1], temp)
    return blocks, scales


def _words(codes: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``[n, 16]`` code bytes as ``[n, 2]`` uint64 words: bytes 0-7 and 8-15, in place where
    each row's bytes are adjacent (any row stride), else copied (one chunk)."""
    if codes.strides[1] != 1:
        codes = np.ascontiguousarray(codes)
    return codes.view(np.uint64)


def _bytes(words: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Contiguous uint64 `words` as their bytes, one row of 8 each (a view)."""
    return words.view(np.uint8).reshape(words.shape[0], _WORD)


def _checked_logical(
    logical_shape: tuple[int, ...], path: str | None, tensor: str
) -> tuple[int, ...]:
    """`logical_shape` as a tuple of ints, or the `DescriptorError` saying what is wrong."""
    shape = tuple(logical_shape)
    bad = not shape or any(not isinstance(dim, int | np.integer) or dim < 0 for dim in shape)
    if bad or shape[-1] % MXFP4_BLOCK:
        raise DescriptorError(
            f"MXFP4 logical shape {list(shape)} is not one or more dims, none negative, the "
            f"innermost whole {MXFP4_BLOCK}-element blocks",
            path=path,
            tensor=tensor,
        )
    return tuple(int(dim) for dim in shape)
