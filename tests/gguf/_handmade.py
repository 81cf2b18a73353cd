"""GGUF bytes built by hand with `struct`, field by field, so a test can break any one of them.

Every helper takes the byte order (``"<"`` or ``">"``); `gguf` puts the pieces together with
counts that may lie, and pads the header to the alignment as a writer would.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

__all__ = [
    "ARRAY", "BOOL", "F32", "F64", "I8", "I16", "I32", "I64", "STRING", "U8", "U16", "U32", "U64",
    "array", "gguf", "info", "kv", "scalar", "string", "strings",
]  # fmt: skip

# GGUF value type ids (the spec's), spelled out here so the tests do not borrow the parser's.
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
CODES = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "?",
         U64: "Q", I64: "q", F64: "d"}  # fmt: skip


def string(text: str | bytes, order: str = "<") -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack(order + "Q", len(raw)) + raw


def scalar(value_type: int, value: object, order: str = "<") -> bytes:
    """A value's bytes after its type id."""
    if value_type == STRING:
        return string(value, order)  # type: ignore[arg-type]
    return struct.pack(order + CODES[value_type], value)


def array(
    element_type: int, items: Sequence[object], order: str = "<", count: int | None = None
) -> bytes:
    """An array value (after the ARRAY type id); `items` are values, or encoded inner arrays
    (bytes) for an array of arrays. `count` may lie."""
    head = struct.pack(order + "IQ", element_type, len(items) if count is None else count)
    if element_type == ARRAY:
        return head + b"".join(items)  # type: ignore[arg-type]
    return head + b"".join(scalar(element_type, item, order) for item in items)


def strings(items: Sequence[str | bytes], order: str = "<") -> bytes:
    return array(STRING, items, order)


def kv(key: str | bytes, value_type: int, payload: bytes, order: str = "<") -> bytes:
    """One metadata pair: key, type id, the value's bytes (`scalar`, `array`)."""
    return string(key, order) + struct.pack(order + "I", value_type) + payload


def info(
    name: str | bytes, dims: Sequence[int], ggml: int = 0, offset: int = 0, order: str = "<"
) -> bytes:
    """One tensor info: name, dim count, dims (ggml order, innermost first), type id, offset."""
    return (
        string(name, order)
        + struct.pack(order + "I", len(dims))
        + struct.pack(order + f"{len(dims)}Q", *dims)
        + struct.pack(order + "IQ", ggml, offset)
    )


def gguf(
    kvs: Sequence[bytes] = (),
    infos: Sequence[bytes] = (),
    data: bytes = b"",
    *,
    version: int = 3,
    order: str = "<",
    magic: bytes = b"GGUF",
    tensor_count: int | None = None,
    kv_count: int | None = None,
    alignment: int = 32,
) -> bytes:
    """A whole file: the fixed fields, the pairs, the infos, zeros up to `alignment`, `data`."""
    tensors = len(infos) if tensor_count is None else tensor_count
    pairs = len(kvs) if kv_count is None else kv_count
    header = magic + struct.pack(order + "IQQ", version, tensors, pairs)
    header += b"".join(kvs) + b"".join(infos)
    return header + bytes(-len(header) % alignment) + data
