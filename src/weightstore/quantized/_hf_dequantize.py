"""One entry point for dequantizing a recognised group, whichever module holds its layout."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import numpy as np

from weightstore.errors import QuantizedLayoutError
from weightstore.quantized._group import QuantizedGroup
from weightstore.quantized._hf_fp8 import dequantize_fp8_group
from weightstore.quantized._hf_int import LAYOUT as INT_PACK
from weightstore.quantized._hf_int import dequantize_int_pack
from weightstore.quantized._hf_int8 import LAYOUT as INT8
from weightstore.quantized._hf_int8 import dequantize_int8
from weightstore.quantized._hf_mxfp4 import dequantize_mxfp4_group
from weightstore.quantized._hf_nvfp4 import LAYOUT as NVFP4
from weightstore.quantized._hf_nvfp4 import dequantize_nvfp4

__all__ = ["DEQUANTIZERS", "Dequantizer", "dequantize_group"]

Dequantizer = Callable[
    [QuantizedGroup, Mapping[str, np.ndarray[Any, Any]], Any], np.ndarray[Any, Any]
]
"""Dequantize a group from its parts (stored name -> array) into an output dtype; check every
part's dtype and shape before allocating."""

DEQUANTIZERS: Final[Mapping[str, Dequantizer]] = {
    "fp8-block": dequantize_fp8_group,
    "fp8-channel": dequantize_fp8_group,
    "fp8-tensor": dequantize_fp8_group,
    "mxfp4": dequantize_mxfp4_group,
    NVFP4: dequantize_nvfp4,
    INT_PACK: dequantize_int_pack,
    INT8: dequantize_int8,
}
"""Layout name -> its dequantizer; each layout module adds its own row here."""


def dequantize_group(
    group: QuantizedGroup,
    parts: Mapping[str, np.ndarray[Any, Any]],
    dtype: Any = np.float32,
) -> np.ndarray[Any, Any]:
    """`group`'s logical tensor from `parts` (stored tensor name -> array), in `dtype`
    (float32, or bfloat16 and float16 rounded once from the float32 product).

    Raises:
        QuantizedLayoutError: a layout no kernel reads, a missing part, or parts whose dtypes
            or shapes disagree with the layout (before any allocation).
        DTypeError: an output dtype other than float32, bfloat16 or float16.
    """
    dequantizer = DEQUANTIZERS.get(group.layout)
    if dequantizer is None:
        raise QuantizedLayoutError(
            f"layout {group.layout!r} has no dequantization kernel "
            f"(known: {', '.join(sorted(DEQUANTIZERS))})",
            group=group.name,
            codes=group.codes,
        )
    return dequantizer(group, parts, dtype)
