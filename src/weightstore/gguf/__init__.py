"""The GGUF container (``.gguf``, llama.cpp's format): typed metadata, tensor infos, ggml blocks.

This package knows byte layouts only, nothing of models or torch. `GgufReader` opens a file by
its header and hands out tensors as NumPy arrays (plain types zero-copy, quantized types
dequantized by `weightstore.quantized`, or as raw blocks by `get_raw`); `GgufWriter` streams
`TensorEntry` objects into a file atomically, quantizing to Q8_0 or Q4_0 on request and copying
quantized blocks from another GGUF file byte for byte. `open_gguf` opens a file, or any part
of a split model as one `GgufSplitReader` over all its parts. docs/gguf.md has the API and the
shape convention (row-major: the file's dims reversed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from weightstore.base._lazy import lazy_exports
from weightstore.gguf._format import FORMAT as FORMAT
from weightstore.gguf._layout import EXTENSION as EXTENSION
from weightstore.gguf._layout import GgufValue as GgufValue
from weightstore.gguf._layout import ValueType as ValueType

if TYPE_CHECKING:
    from weightstore.gguf._reader import BlockSlice as BlockSlice
    from weightstore.gguf._reader import GgufReader as GgufReader
    from weightstore.gguf._reader import GgufTensorInfo as GgufTensorInfo
    from weightstore.gguf._split import GgufSplitReader as GgufSplitReader
    from weightstore.gguf._split import open_gguf as open_gguf
    from weightstore.gguf._writer import GgufWriter as GgufWriter

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "FORMAT": "weightstore.gguf._format",
        "EXTENSION": "weightstore.gguf._layout",
        "GgufValue": "weightstore.gguf._layout",
        "ValueType": "weightstore.gguf._layout",
        "BlockSlice": "weightstore.gguf._reader",
        "GgufReader": "weightstore.gguf._reader",
        "GgufTensorInfo": "weightstore.gguf._reader",
        "GgufWriter": "weightstore.gguf._writer",
        "GgufSplitReader": "weightstore.gguf._split",
        "open_gguf": "weightstore.gguf._split",
    },
)
