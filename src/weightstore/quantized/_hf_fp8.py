"""FP8 weights scaled per block, per row or per tensor, dequantized in chunks.

The layouts (value = ``float(code) * scale`` of the code's block, in float32):

- block-scaled (DeepSeek V3/R1, Qwen3-FP8, GLM): ``weight`` F8_E4M3 ``[..., rows, columns]`` and
  ``weight_scale_inv`` F32 ``[..., ceil(rows / 128), ceil(columns / 128)]``; edge blocks may be
  partial. compressed-tensors' ``block`` and ``group`` strategies are the same with other block
  sizes, and MXFP8 the same with ``(1, 32)`` blocks and E8M0 scales.
- per row (compressed-tensors ``channel``): ``weight_scale`` ``[rows, 1]``; block ``(1, columns)``.
- per tensor (compressed-tensors ``tensor``, ModelOpt FP8): one scale, ``[]`` or ``[1]``;
  block ``()``. ``input_scale`` scales activations: it travels with the group, unused here.

The arithmetic is the references': the code widened to float32 (exact), times the scale widened
to float32 (exact for F32, BF16, F16 and E8M0), rounded once; bfloat16 and float16 outputs are
that float32 product rounded, as transformers' ``Fp8Dequantize`` and torch's
``QuantizedHuggingFaceStorageReader`` compute them. Codes are widened through a 256-entry table,
chunk by chunk into the output (or, for a 16-bit output, into one reused float32 chunk), so the
peak memory is the output plus one chunk.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import ml_dtypes
import numpy as np
from numpy.typing import NDArray

from weightstore.errors import DTypeError, QuantizedLayoutError
from weightstore.quantized._ggml_kernels import CHUNK_ELEMENTS
from weightstore.quantized._group import QuantizedGroup
from weightstore.quantized._hf_pack import dtype_name
from weightstore.quantized._hf_shapes import check_addressable, check_fp8, fp8_scale_grid

__all__ = [
    "OUTPUT_DTYPES",
    "dequantize_fp8",
    "dequantize_fp8_group",
    "group_part",
    "output_dtype",
    "scale_as_f32",
]

Floats = NDArray[np.float32]

OUTPUT_DTYPES: Final = (np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16))
"""What a dequantization writes: float32, or a 16-bit float rounded from it."""


def _code_table(dtype: type) -> Floats:
    """Every byte of an FP8 dtype widened to float32: exact, NaN codes to NaN. E4M3's two NaN
    codes keep their sign and payload bits (``0x7FF00000``), as torch widens them, so that even
    NaN outputs match the references bit for bit."""
    table: Floats = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32)
    if dtype is ml_dtypes.float8_e4m3fn:
        table.view(np.uint32)[[0x7F, 0xFF]] = (0x7FF00000, 0xFFF00000)
    return table


_CODE_TABLES: Final[Mapping[str, Floats]] = {
    "F8_E4M3": _code_table(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": _code_table(ml_dtypes.float8_e5m2),
}

_E8M0_BYTES: Final[Floats] = np.array(
    [2.0 ** (e - 127) for e in range(255)] + [np.inf], dtype=np.float32
)
"""E8M0 exponent bytes stored as uint8, as transformers reads them (``exp2(byte - 127)`` in
float32): 255 is infinity, not the NaN of ``float8_e8m0fnu``."""


def output_dtype(dtype: Any) -> np.dtype[Any]:
    """`dtype` as a NumPy dtype, if it is one a dequantization writes.

    Raises:
        DTypeError: any other dtype."""
    try:
        resolved: np.dtype[Any] | None = np.dtype(dtype)
    except TypeError:
        resolved = None
    if resolved is None or resolved not in OUTPUT_DTYPES:
        raise DTypeError(f"dequantize to {dtype!r}: the outputs are float32, bfloat16 and float16")
    return resolved


def scale_as_f32(scale: np.ndarray[Any, Any]) -> Floats:
    """A scale array of any allowed dtype widened, exactly, to float32."""
    if scale.dtype == np.uint8:
        widened: Floats = _E8M0_BYTES[scale]
        return widened
    return np.asarray(scale, dtype=np.float32)


def dequantize_fp8(
    codes: np.ndarray[Any, Any],
    scale: np.ndarray[Any, Any],
    block: tuple[int, ...],
    dtype: Any = np.float32,
    *,
    group: str = "weight",
    codes_name: str = "weight",
    scale_name: str = "weight_scale_inv",
) -> np.ndarray[Any, Any]:
    """FP8 `codes` (``float8_e4m3fn`` or ``float8_e5m2``) times the `scale` of each code's
    `block` (rows, columns; ``()`` for one scale per tensor), in `dtype`.

    Raises:
        QuantizedLayoutError: codes or scale of a dtype outside the scheme, or a scale whose
            shape is not the one the codes' blocks imply (checked before any allocation).
        DTypeError: an output dtype other than float32, bfloat16 or float16.
    """
    target = output_dtype(dtype)
    codes_dtype = dtype_name(codes)
    check_fp8(
        group, codes_name, codes_dtype, codes.shape, scale_name, dtype_name(scale),
        scale.shape, block,
    )  # fmt: skip
    check_addressable(group, codes_name, codes.shape)
    out = np.empty(codes.shape, dtype=target)
    if out.size == 0:
        return out
    matrix = (1,) * max(0, 2 - codes.ndim) + codes.shape
    rows, columns = matrix[-2:]
    blocks = (rows, columns) if not block else (block[0], block[1])
    grid = fp8_scale_grid(matrix, blocks)
    table = _CODE_TABLES[codes_dtype]
    bytes_ = np.ascontiguousarray(codes).view(np.uint8).reshape(-1, rows, columns)
    scales = scale_as_f32(scale).reshape(-1, *grid[-2:])
    flat_out = out.reshape(-1, rows, columns)
    step = max(1, CHUNK_ELEMENTS // columns)
    if step >= blocks[0]:
        step -= step % blocks[0]  # chunks of whole block rows
    scratch = None if target == np.float32 else np.empty((min(step, rows), columns), np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # infinities are values here
        for index in range(bytes_.shape[0]):
            for start in range(0, rows, step):
                stop = min(rows, start + step)
                chunk: Floats = (
                    flat_out[index, start:stop] if scratch is None else scratch[: stop - start]
                )
                np.take(table, bytes_[index, start:stop], out=chunk, mode="clip")
                _apply_scales(chunk, start, stop, scales[min(index, len(scales) - 1)], blocks)
                if scratch is not None:
                    flat_out[index, start:stop] = chunk
    return out


def _apply_scales(
    chunk: Floats, start: int, stop: int, scales: Floats, block: tuple[int, int]
) -> None:
    """Multiply rows `start` to `stop` (held in `chunk`) by their blocks' scales: whole block
    rows in one broadcast, a partial one (a chunk edge or the matrix's last) on its own."""
    block_rows, block_columns = block
    columns = chunk.shape[1]
    row = start
    while row < stop:
        first = row // block_rows
        at = row - start
        if row % block_rows == 0 and stop - row >= block_rows:
            count = (stop - row) // block_rows
            view = chunk[at : at + count * block_rows].reshape(count, block_rows, columns)
            factors = _expanded(scales[first : first + count], block_columns, columns)
            np.multiply(view, factors[:, None, :], out=view)
            row += count * block_rows
        else:
            end = min(stop, (first + 1) * block_rows)
            view = chunk[at : end - start]
            np.multiply(
                view, _expanded(scales[first : first + 1], block_columns, columns), out=view
            )
            row = end


def _expanded(scales: Floats, block_columns: int, columns: int) -> Floats:
    """Scale rows ``(n, C)`` spread over their blocks' columns, ``(n, columns)``; ``(n, 1)``
    broadcasts as it is."""
    if scales.shape[1] == 1:
        return scales
    spread: Floats = np.repeat(scales, block_columns, axis=1)[:, :columns]
    return spread


def dequantize_fp8_group(
    group: QuantizedGroup, parts: Mapping[str, np.ndarray[Any, Any]], dtype: Any = np.float32
) -> np.ndarray[Any, Any]:
    """A recognised FP8 group (``fp8-block``, ``fp8-channel``, ``fp8-tensor``) dequantized."""
    scale_name = group.companions.get("scale")
    if scale_name is None:
        raise QuantizedLayoutError(
            f"{group.layout} group has no scale companion", group=group.name, codes=group.codes
        )
    codes, scale = group_part(group, parts, group.codes), group_part(group, parts, scale_name)
    if codes.shape != group.logical_shape:
        raise QuantizedLayoutError(
            f"codes have shape {list(codes.shape)}; the group's is {list(group.logical_shape)}",
            group=group.name,
            codes=group.codes,
        )
    return dequantize_fp8(
        codes, scale, group.block, dtype, group=group.name, codes_name=group.codes,
        scale_name=scale_name,
    )  # fmt: skip


def group_part(
    group: QuantizedGroup, parts: Mapping[str, np.ndarray[Any, Any]], name: str
) -> np.ndarray[Any, Any]:
    """The array of stored tensor `name`, or an error naming the group and the missing part."""
    array = parts.get(name)
    if array is None:
        raise QuantizedLayoutError(
            "a part of the group was not handed to the dequantization",
            group=group.name,
            codes=group.codes,
            companion=None if name == group.codes else name,
        )
    return array
