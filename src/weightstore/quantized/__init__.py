"""Quantized blocks: ggml's block types and the NumPy kernels that dequantize and quantize them,
Burn's QFloat schemes (`parse_burn_scheme`, `dequantize_burn_qfloat`), and the quantized
layouts of SafeTensors-style checkpoints (FP8, MXFP4): which stored tensors form a group
(`recognise`) and their dequantization (`dequantize_group`), and the byte-for-byte repacking
of gpt-oss's MXFP4 pair into ggml's MXFP4 blocks and back (`mxfp4_to_ggml`, `ggml_to_mxfp4`),
so a conversion between SafeTensors and GGUF keeps the blocks instead of their values.

Format-free and model-free: GGUF stores whole tensors in these blocks, and other containers'
quantized layouts reuse the kernels. Nothing here reads a file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from weightstore.base._lazy import lazy_exports
from weightstore.quantized._ggml_types import GGML_TYPES as GGML_TYPES
from weightstore.quantized._ggml_types import GGML_TYPES_BY_NAME as GGML_TYPES_BY_NAME
from weightstore.quantized._ggml_types import QK_K as QK_K
from weightstore.quantized._ggml_types import GgmlType as GgmlType
from weightstore.quantized._ggml_types import ggml_type as ggml_type
from weightstore.quantized._ggml_types import ggml_type_named as ggml_type_named
from weightstore.quantized._group import QuantizedGroup as QuantizedGroup

if TYPE_CHECKING:  # the lazy part of the table below, as type checkers see it
    from weightstore.quantized._burn_qfloat import BurnQuantScheme as BurnQuantScheme
    from weightstore.quantized._burn_qfloat import burn_qfloat_nbytes as burn_qfloat_nbytes
    from weightstore.quantized._burn_qfloat import check_burn_qfloat as check_burn_qfloat
    from weightstore.quantized._burn_qfloat import (
        dequantize_burn_qfloat as dequantize_burn_qfloat,
    )
    from weightstore.quantized._burn_qfloat import parse_burn_scheme as parse_burn_scheme
    from weightstore.quantized._dequantize import dequantizable as dequantizable
    from weightstore.quantized._dequantize import dequantize as dequantize
    from weightstore.quantized._ggml_kernels import KERNELS as KERNELS
    from weightstore.quantized._ggml_kernels import Kernel as Kernel
    from weightstore.quantized._ggml_kernels import dequantize_blocks as dequantize_blocks
    from weightstore.quantized._ggml_kernels import dequantize_into as dequantize_into
    from weightstore.quantized._ggml_quantize import QUANTIZABLE as QUANTIZABLE
    from weightstore.quantized._ggml_quantize import quantize_blocks as quantize_blocks
    from weightstore.quantized._hf_dequantize import dequantize_group as dequantize_group
    from weightstore.quantized._hf_recognise import recognise as recognise
    from weightstore.quantized._mxfp4_ggml import ggml_to_mxfp4 as ggml_to_mxfp4
    from weightstore.quantized._mxfp4_ggml import mxfp4_to_ggml as mxfp4_to_ggml

# The kernels (and NumPy) load on first use: the type table is all a GGUF header needs.
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(
            (
                "GGML_TYPES", "GGML_TYPES_BY_NAME", "QK_K", "GgmlType", "ggml_type",
                "ggml_type_named",
            ),
            "weightstore.quantized._ggml_types",
        ),
        "QuantizedGroup": "weightstore.quantized._group",
        **dict.fromkeys(
            ("KERNELS", "Kernel", "dequantize_blocks", "dequantize_into"),
            "weightstore.quantized._ggml_kernels",
        ),
        **dict.fromkeys(("QUANTIZABLE", "quantize_blocks"), "weightstore.quantized._ggml_quantize"),
        **dict.fromkeys(("dequantizable", "dequantize"), "weightstore.quantized._dequantize"),
        **dict.fromkeys(
            (
                "BurnQuantScheme", "burn_qfloat_nbytes", "check_burn_qfloat",
                "dequantize_burn_qfloat", "parse_burn_scheme",
            ),
            "weightstore.quantized._burn_qfloat",
        ),
        "recognise": "weightstore.quantized._hf_recognise",
        "dequantize_group": "weightstore.quantized._hf_dequantize",
        **dict.fromkeys(("ggml_to_mxfp4", "mxfp4_to_ggml"), "weightstore.quantized._mxfp4_ggml"),
    },
)  # fmt: skip
