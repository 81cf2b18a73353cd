"""GGUF byte layout, shared by reader and writer (versions 2 and 3; little- or big-endian).

    0     magic          4 bytes  "GGUF"
    4     version        u32      2 or 3 (a byte-swapped 2 or 3: the file is big-endian)
    8     tensor_count   u64
    16    kv_count       u64
    24    kv_count pairs:   key (string), value type (u32), value
          tensor_count infos: name (string), n_dims (u32), dims (n_dims x u64, innermost
          first), ggml type (u32), offset (u64, from the data start, a multiple of the alignment)
          zero padding to the alignment (``general.alignment``, default 32)
    data  tensor bytes

A string is a u64 byte length and UTF-8 bytes; an array a u32 element type, a u64 count and the
elements (arrays nest). Dims are ggml's order, innermost first; weightstore's shapes are
row-major, outermost first: the dims reversed (as gguf-py's arrays present them).

Limits, checked before anything is allocated or looped over (docs/security.md): the counts,
string and array sizes and nesting below, at most GGML's 4 dims, an alignment that is a power of
two up to MAX_ALIGNMENT, and offsets that lie in the file without overlapping.
"""

from __future__ import annotations

import struct
from typing import Final

from weightstore.base._record import ValueRecord

__all__ = [
    "ALIGNMENT_KEY",
    "DEFAULT_ALIGNMENT",
    "EXTENSION",
    "MAGIC",
    "MAX_ALIGNMENT",
    "MAX_ARRAY_DEPTH",
    "MAX_ARRAY_LENGTH",
    "MAX_KV_COUNT",
    "MAX_STRING_SIZE",
    "MAX_TENSOR_COUNT",
    "MAX_TENSOR_DIMS",
    "SCALAR_FORMATS",
    "SPLIT_COUNT_KEY",
    "SPLIT_NO_KEY",
    "SPLIT_TENSORS_KEY",
    "VERSIONS",
    "GgufValue",
    "ValueType",
]

MAGIC: Final = b"GGUF"  # the first four bytes of every GGUF file, in either byte order
EXTENSION: Final = "gguf"  # the usual suffix; never appended to a path
VERSIONS: Final = (2, 3)  # version 1 (2023, u32 counts) is long gone from every runtime
DEFAULT_ALIGNMENT: Final = 32  # bytes; tensor data alignment when the file names none
ALIGNMENT_KEY: Final = "general.alignment"  # the metadata key that changes the alignment

SPLIT_NO_KEY: Final = "split.no"
"""A split model's part's place, 0-based (uint16). A split model (llama.cpp's gguf-split,
gguf-py's writer with split_max_tensors or split_max_size) is whole GGUF files, each holding its
own tensors and the three split pairs; part 1 also holds the model's metadata. Parts are named
``<prefix>-00001-of-00003.gguf`` (`weightstore.gguf._names`)."""
SPLIT_COUNT_KEY: Final = "split.count"
"""How many parts a split model has (uint16); 0 (what gguf-split --merge writes) or 1 is a file
that is not split."""
SPLIT_TENSORS_KEY: Final = "split.tensors.count"
"""Tensors in all of a split model's parts together (int32)."""
# What llama.cpp wrote before GGUF, by its first bytes: a clear "legacy GGML" refusal.

MAX_TENSOR_COUNT: Final = 2**20
"""Tensor infos in one file. The largest GGUF models (DeepSeek V3 at 671B, experts fused as
llama.cpp writes them) hold under 2,000; a million keeps a hostile count from being looped
over."""
MAX_KV_COUNT: Final = 2**16
"""Metadata pairs in one file. Real files hold a few dozen (a tokenizer is a handful of
arrays, not one pair per token)."""
MAX_STRING_SIZE: Final = 2**26
"""Bytes in one string (64 MiB). The longest real ones are chat templates of tens of KB; a
length is checked against this and against the bytes left in the file before any read."""
MAX_ARRAY_LENGTH: Final = 2**26
"""Elements in one metadata array (67M). A 256k-token vocabulary and its 500k merges are far
inside; the elements must also fit the file."""
MAX_ARRAY_DEPTH: Final = 8
"""Nesting of arrays in arrays. GGUF writers nest one level at most."""
MAX_TENSOR_DIMS: Final = 4
"""ggml's GGML_MAX_DIMS: llama.cpp refuses a tensor with more."""
MAX_ALIGNMENT: Final = 2**24
"""Largest ``general.alignment`` (16 MiB; it must also be a power of two). Writers use 32 to
4,096 (a page, for direct I/O); a bigger value would only pad the file with zeros."""


class ValueType:
    """GGUF's metadata value type ids."""

    UINT8: Final = 0
    INT8: Final = 1
    UINT16: Final = 2
    INT16: Final = 3
    UINT32: Final = 4
    INT32: Final = 5
    FLOAT32: Final = 6
    BOOL: Final = 7
    STRING: Final = 8
    ARRAY: Final = 9
    UINT64: Final = 10
    INT64: Final = 11
    FLOAT64: Final = 12

    NAMES: Final = {
        0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32", 5: "int32",
        6: "float32", 7: "bool", 8: "string", 9: "array", 10: "uint64", 11: "int64",
        12: "float64",
    }  # fmt: skip
    BY_NAME: Final = {name: id for id, name in NAMES.items()}


SCALAR_FORMATS: Final = {
    ValueType.UINT8: "B", ValueType.INT8: "b", ValueType.UINT16: "H", ValueType.INT16: "h",
    ValueType.UINT32: "I", ValueType.INT32: "i", ValueType.FLOAT32: "f", ValueType.BOOL: "?",
    ValueType.UINT64: "Q", ValueType.INT64: "q", ValueType.FLOAT64: "d",
}  # fmt: skip
"""`struct` codes of the fixed-size value types (strings and arrays have lengths)."""

INTEGER_RANGES: Final = {
    ValueType.UINT8: (0, 2**8 - 1), ValueType.INT8: (-(2**7), 2**7 - 1),
    ValueType.UINT16: (0, 2**16 - 1), ValueType.INT16: (-(2**15), 2**15 - 1),
    ValueType.UINT32: (0, 2**32 - 1), ValueType.INT32: (-(2**31), 2**31 - 1),
    ValueType.UINT64: (0, 2**64 - 1), ValueType.INT64: (-(2**63), 2**63 - 1),
}  # fmt: skip


def scalar_struct(value_type: int, byte_order: str) -> struct.Struct:
    """The `struct.Struct` of one fixed-size value in the file's byte order (``"<"``/``">"``)."""
    return struct.Struct(byte_order + SCALAR_FORMATS[value_type])


class GgufValue(ValueRecord):
    """A metadata value with its GGUF type, so a rewrite keeps ``uint32`` a ``uint32``.

    Attributes:
        type: the value type id (`ValueType`).
        value: the Python value: int, float, bool, str, or a list of them for an array.
        element_type: an array's element type id; None for a scalar.
    """

    type: int
    value: object
    element_type: int | None = None

    @property
    def type_name(self) -> str:
        """``"uint32"``, or ``"array[string]"`` for an array."""
        name = ValueType.NAMES[self.type]
        if self.element_type is None:
            return name
        return f"{name}[{ValueType.NAMES[self.element_type]}]"
