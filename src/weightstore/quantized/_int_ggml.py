"""compressed-tensors int8 and int4 groups to ggml's Q8_0 and Q4_0 blocks, byte for byte.

ggml's two oldest block types are symmetric integer groups of 32 with one float16 scale:

    Q8_0  34 bytes: float16 d, then 32 int8 codes q;    x = d * q
    Q4_0  18 bytes: float16 d, then 16 bytes, byte j = u[j] | u[j + 16] << 4 (u in 0..15);
          x = d * (u - 8)

compressed-tensors writes the same numbers when a group is symmetric with groups of 32 along
the columns: ``int-quantized`` int8 codes with ``weight_scale`` ``[..., cols / 32]``, and
``pack-quantized`` codes stored ``code + 2**(bits - 1)`` in int32 words (4 bits: byte k holds
elements 2k and 2k + 1 in its low and high nibble; 8 bits: one byte each), with
``x = code * scale``. So such a group moves into GGUF by reordering bytes, never through its
values: the codes are identical and the scale is the same float16, provided the scale is
float16 already or converts to it exactly (a float32 or bfloat16 scale is checked value by
value). `ggml_type_for` says whether a group qualifies and, when not, why; the repacking
functions produce the blocks row by row, ``(..., cols / 32 * type_size)`` bytes.

Float values differ by one rounding between the two worlds, not by the blocks:
compressed-tensors rounds ``code * scale`` to the scale's dtype, ggml keeps the float32
product (exact here); weightstore's float32 dequantization of the group is that product.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np

from weightstore.quantized._ggml_types import GGML_TYPES_BY_NAME
from weightstore.quantized._group import QuantizedGroup
from weightstore.quantized._hf_pack import row_chunks

__all__ = ["GGML_GROUP", "ggml_type_for", "int_group_to_ggml", "scale_as_float16"]

GGML_GROUP: Final = 32
"""Codes per Q8_0 / Q4_0 block, and so the group size a repackable group has."""
_TYPE_SIZES: Final = {name: GGML_TYPES_BY_NAME[name].type_size for name in ("Q8_0", "Q4_0")}
_CODE_COMPANIONS: Final = {"int8": frozenset({"scale"}), "int-pack": frozenset({"scale", "shape"})}


def ggml_type_for(group: QuantizedGroup, scale_dtype: str) -> tuple[str | None, str]:
    """The ggml type `group` repacks to (``"Q8_0"`` or ``"Q4_0"``), or None and why not.

    `scale_dtype` is the stored scale's weightstore dtype name; a float32 or bfloat16 scale
    qualifies here and is checked value by value by `scale_as_float16`.
    """
    if group.layout not in _CODE_COMPANIONS:
        return None, f"ggml has no block type for {group.layout}"
    if "zero_point" in group.companions:
        return None, "it is asymmetric (zero points), and Q8_0 and Q4_0 are symmetric"
    extra = sorted(set(group.companions) - _CODE_COMPANIONS[group.layout])
    if extra:
        verb = "has" if len(extra) == 1 else "have"
        return None, f"its {', '.join(extra)} {verb} no place in GGUF"
    bits = 8 if group.layout == "int8" else getattr(group, "num_bits", 0)
    if bits not in (4, 8):
        return None, f"ggml has no block type for {bits}-bit codes"
    if len(group.block) < 1 or group.block[-1] != GGML_GROUP or len(group.logical_shape) < 2:
        return None, (
            f"Q8_0 and Q4_0 hold groups of {GGML_GROUP} along a row, and its scales cover "
            f"{'one tensor' if not group.block else f'{group.block[-1]} columns'}"
        )
    if scale_dtype not in ("F16", "F32", "BF16"):
        return None, f"its scale is {scale_dtype}, and ggml's is float16"
    return ("Q8_0" if bits == 8 else "Q4_0"), ""


def scale_as_float16(scale: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
    """`scale` as float16 when every value converts exactly (NaN and infinities included),
    else None."""
    if scale.dtype == np.float16:
        return scale
    half = scale.astype(np.float16)
    back = half.astype(np.float32)
    same = (back == scale.astype(np.float32)) | (np.isnan(back) & np.isnan(scale))
    return half if bool(same.all()) else None


def int_group_to_ggml(
    group: QuantizedGroup,
    ggml_type: str,
    parts: Mapping[str, np.ndarray[Any, Any]],
    scale16: np.ndarray[Any, Any],
) -> np.ndarray[Any, Any]:
    """The ``ggml_type`` blocks of `group` (from `ggml_type_for`), shaped ``(*lead,
    cols / 32 * type_size)`` uint8, from its codes in `parts` and its scale as float16."""
    shape = group.logical_shape
    rows, cols = int(np.prod(shape[:-1])), shape[-1]
    count, size = cols // GGML_GROUP, _TYPE_SIZES[ggml_type]
    codes = np.asarray(parts[group.codes]).reshape(rows, -1)
    scales = np.ascontiguousarray(scale16.reshape(rows, count)).view(np.uint8)
    out = np.empty((rows, count, size), np.uint8)
    for chunk in row_chunks(rows, cols):
        out[chunk, :, :2] = scales[chunk].reshape(-1, count, 2)
        out[chunk, :, 2:] = _code_bytes(group, codes[chunk], ggml_type, cols)
    return out.reshape(*shape[:-1], count * size)


def _code_bytes(
    group: QuantizedGroup, codes: np.ndarray[Any, Any], ggml_type: str, cols: int
) -> np.ndarray[Any, Any]:
    """Rows of codes as the bytes after each block's scale: ``(rows, cols / 32, 32 or 16)``."""
    rows = codes.shape[0]
    if group.layout == "int8":
        return np.ascontiguousarray(codes).view(np.uint8).reshape(rows, -1, GGML_GROUP)
    data = np.ascontiguousarray(codes, dtype="<i4").view(np.uint8)
    if ggml_type == "Q8_0":  # stored code + 128: flipping the top bit gives the int8 code
        flipped: np.ndarray[Any, Any] = data[:, :cols] ^ np.uint8(0x80)
        return flipped.reshape(rows, -1, GGML_GROUP)
    pairs = data[:, : cols // 2].reshape(rows, -1, GGML_GROUP // 2)  # 16 bytes a block
    nibbles = np.empty((*pairs.shape[:2], GGML_GROUP), np.uint8)  # u[0..31], in order
    np.bitwise_and(pairs, np.uint8(0x0F), out=nibbles[..., 0::2])
    np.right_shift(pairs, np.uint8(4), out=nibbles[..., 1::2])
    half = GGML_GROUP // 2
    result: np.ndarray[Any, Any] = nibbles[..., :half] | (nibbles[..., half:] << np.uint8(4))
    return result
