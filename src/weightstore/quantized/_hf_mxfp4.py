"""gpt-oss's MXFP4 experts, dequantized in chunks.

``*_blocks`` U8 ``[..., G, 16]`` holds two E2M1 codes a byte, the low nibble first (element
``2i`` is the low nibble of byte ``i``); ``*_scales`` U8 ``[..., G]`` holds one E8M0 exponent
per 32 values. Value ``j`` of block ``g`` is ``fp4(code) * 2**(scale - 127)``, and the logical
tensor is ``[..., G * 32]``: the stored ``[experts, rows, columns]`` orientation. (transformers
transposes the last two dims for its experts' parameters; torch's DCP reader does not.)

The arithmetic is the references' (transformers' ``convert_moe_packed_tensors``, torch's
``QuantizedHuggingFaceStorageReader``): the E2M1 value times ``2**(scale - 127)`` computed in
float32 as ``ldexp``: exact, overflowing to infinity under scale byte 255 (the E8M0 NaN,
which neither reference treats as one), rounded once to a 16-bit output.

A byte's two values come from one 256-entry table of float32 pairs, gathered as 64-bit words
straight into the output, then scaled in place, chunk by chunk.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from weightstore.errors import QuantizedLayoutError
from weightstore.quantized._ggml_kernels import CHUNK_ELEMENTS
from weightstore.quantized._group import QuantizedGroup
from weightstore.quantized._hf_fp8 import group_part, output_dtype
from weightstore.quantized._hf_pack import dtype_name
from weightstore.quantized._hf_shapes import (
    MXFP4_BLOCK,
    MXFP4_BYTES_PER_BLOCK,
    check_addressable,
    check_mxfp4,
    mxfp4_logical_shape,
)

__all__ = ["dequantize_mxfp4", "dequantize_mxfp4_group"]

Floats = NDArray[np.float32]

_E2M1_DOUBLED: Final = np.array(
    [0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, -0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0],
    dtype=np.float32,
)
"""The 16 E2M1 values doubled, so that the scale table below can be halved."""

_E8M0_HALF: Final[Floats] = np.array([2.0 ** (e - 128) for e in range(256)], dtype=np.float32)
"""Scale byte e to ``2**(e - 128)``, half the scale: finite for every byte (255 gives
``2**127``), so that ``doubled * half`` is the references' ``ldexp(value, e - 127)`` bit for
bit, a zero code under scale 255 included (zero, where a full ``2**128`` scale would be
infinite and make it NaN); 0 gives ``2**-128``, a float32 subnormal, exact."""


def _pair_table() -> NDArray[np.uint64]:
    """Byte b to its two values (low nibble's first) as one little-endian 64-bit word."""
    codes = np.arange(256)
    pairs = np.stack([_E2M1_DOUBLED[codes & 0x0F], _E2M1_DOUBLED[codes >> 4]], axis=1).astype("<f4")
    words: NDArray[np.uint64] = np.ascontiguousarray(pairs).view("<u8").reshape(256)
    return words


_PAIRS: Final = _pair_table()
_ROWS_PER_CHUNK: Final = max(1, CHUNK_ELEMENTS // MXFP4_BLOCK)


def dequantize_mxfp4(
    blocks: np.ndarray[Any, Any],
    scales: np.ndarray[Any, Any],
    dtype: Any = np.float32,
    *,
    group: str = "weight",
    blocks_name: str = "weight_blocks",
    scales_name: str = "weight_scales",
) -> np.ndarray[Any, Any]:
    """MXFP4 `blocks` (uint8 ``[..., G, 16]``) scaled by `scales` (uint8 ``[..., G]``), as
    ``[..., G * 32]`` values of `dtype`.

    Raises:
        QuantizedLayoutError: a dtype or shape outside the layout, or scales that do not match
            the blocks (checked before any allocation).
        DTypeError: an output dtype other than float32, bfloat16 or float16.
    """
    target = output_dtype(dtype)
    check_mxfp4(
        group, blocks_name, dtype_name(blocks), blocks.shape, scales_name, dtype_name(scales),
        scales.shape,
    )  # fmt: skip
    check_addressable(group, blocks_name, mxfp4_logical_shape(blocks.shape))
    out = np.empty(mxfp4_logical_shape(blocks.shape), dtype=target)
    rows = out.size // MXFP4_BLOCK
    if rows == 0:
        return out
    packed = np.ascontiguousarray(blocks).reshape(rows, MXFP4_BYTES_PER_BLOCK)
    exponents = np.ascontiguousarray(scales).reshape(rows)
    flat_out = out.reshape(rows, MXFP4_BLOCK)
    step = _ROWS_PER_CHUNK
    scratch = None if target == np.float32 else np.empty((min(step, rows), MXFP4_BLOCK), "<f4")
    with np.errstate(over="ignore", invalid="ignore"):  # infinities are values here
        for start in range(0, rows, step):
            stop = min(rows, start + step)
            chunk: Floats = flat_out[start:stop] if scratch is None else scratch[: stop - start]
            np.take(_PAIRS, packed[start:stop], out=chunk.view(np.uint64), mode="clip")
            np.multiply(chunk, _E8M0_HALF[exponents[start:stop]][:, None], out=chunk)
            if scratch is not None:
                flat_out[start:stop] = chunk
    return out


def dequantize_mxfp4_group(
    group: QuantizedGroup, parts: Mapping[str, np.ndarray[Any, Any]], dtype: Any = np.float32
) -> np.ndarray[Any, Any]:
    """A recognised ``mxfp4`` group dequantized."""
    scales_name = group.companions.get("scale")
    if scales_name is None:
        raise QuantizedLayoutError(
            "mxfp4 group has no scale companion", group=group.name, codes=group.codes
        )
    blocks, scales = group_part(group, parts, group.codes), group_part(group, parts, scales_name)
    check_mxfp4(
        group.name, group.codes, dtype_name(blocks), blocks.shape, scales_name,
        dtype_name(scales), scales.shape,
    )  # fmt: skip
    if mxfp4_logical_shape(blocks.shape) != group.logical_shape:
        raise QuantizedLayoutError(
            f"blocks of shape {list(blocks.shape)} hold {list(mxfp4_logical_shape(blocks.shape))}"
            f" values; the group's shape is {list(group.logical_shape)}",
            group=group.name,
            codes=group.codes,
        )
    return dequantize_mxfp4(
        blocks, scales, dtype, group=group.name, blocks_name=group.codes, scales_name=scales_name
    )
