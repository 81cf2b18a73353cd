"""One entry point for dequantizing ggml blocks, whichever module holds the type's kernel."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from weightstore.errors import DTypeError
from weightstore.quantized._ggml_kernels import KERNELS, Kernel, dequantize_blocks
from weightstore.quantized._ggml_types import GgmlType

__all__ = ["dequantizable", "dequantize"]


@functools.cache
def _iq_kernels() -> Mapping[str, Kernel]:
    from weightstore.quantized._ggml_iq import IQ_KERNELS

    return IQ_KERNELS


def dequantizable(ggml: GgmlType) -> bool:
    """Whether a kernel reads `ggml`'s blocks (every quantized type but Q8_1 and Q1_0)."""
    return ggml.name in KERNELS or ggml.name in _iq_kernels()


def dequantize(
    blocks: np.ndarray[Any, Any],
    ggml: GgmlType,
    dtype: np.dtype[Any] | None = None,
    *,
    path: str | None = None,
    tensor: str | None = None,
) -> np.ndarray[Any, Any]:
    """`blocks` (``uint8``, whole blocks of `ggml`) as a flat array of values in `dtype`
    (float32 by default; float16 or bfloat16 are rounded from float32).

    Raises:
        DTypeError: no kernel reads this type (named, with the file and tensor).
    """
    if not dequantizable(ggml):
        raise DTypeError(
            f"{ggml.name} blocks have no dequantization kernel (gguf-py has none either); "
            "get_raw() gives the blocks",
            path=path,
            tensor=tensor,
        )
    output = np.dtype(np.float32) if dtype is None else dtype
    return dequantize_blocks(blocks, ggml, output, extra=_iq_kernels())
