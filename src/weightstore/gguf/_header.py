"""Parsing a GGUF header: the fixed fields, the metadata pairs, the tensor infos.

The parser walks the header through a `_Cursor` that reads the source in windows, so a pread or
remote source reads the header's bytes only, and every length is checked against its limit and
against the bytes left in the file before anything is read or allocated. Metadata arrays are
not decoded at open: an array's place is recorded (`LazyArray`) and its elements are walked
only to find where it ends (a string array's lengths), so a 256k-token vocabulary costs its
length fields at open and its strings only when `metadata()` asks.
"""

from __future__ import annotations

import struct
from typing import Final

from weightstore.base._record import ValueRecord
from weightstore.base._render import bounded_repr
from weightstore.errors import (
    DescriptorError,
    HeaderError,
    LimitExceeded,
    MetadataError,
    TruncatedError,
    UnsupportedVersionError,
)
from weightstore.gguf._layout import (
    ALIGNMENT_KEY,
    DEFAULT_ALIGNMENT,
    MAGIC,
    MAX_ALIGNMENT,
    MAX_ARRAY_DEPTH,
    MAX_ARRAY_LENGTH,
    MAX_KV_COUNT,
    MAX_STRING_SIZE,
    MAX_TENSOR_COUNT,
    MAX_TENSOR_DIMS,
    SCALAR_FORMATS,
    VERSIONS,
    GgufValue,
    ValueType,
)
from weightstore.io._source import ByteSource
from weightstore.quantized import GgmlType, ggml_type

__all__ = [
    "ArrayHead",
    "GgufHeader",
    "LazyArray",
    "RawInfo",
    "decode_array",
    "decode_head",
    "decode_text",
    "parse_header",
]

_WINDOW: Final = 2**20  # bytes a non-mapping source reads per header window
_FIXED: Final = 24  # magic, version, tensor_count, kv_count
_MAX_I64: Final = 2**63 - 1  # ggml counts elements and bytes in int64


class LazyArray(ValueRecord):
    """A metadata array not yet decoded: where its elements start, their type and count, and
    (for a string or nested array) where they end."""

    offset: int
    element_type: int
    count: int
    end: int


class ArrayHead(ValueRecord):
    """The first elements of a metadata array and how many it holds: what a listing shows of a
    256k-token vocabulary without decoding it (nested arrays' heads are `ArrayHead` too)."""

    element_type: int
    count: int
    items: list[object]

    @property
    def type_name(self) -> str:
        """``"array[string]"``, as `GgufValue.type_name` spells an array."""
        return GgufValue(ValueType.ARRAY, None, self.element_type).type_name


class RawInfo(ValueRecord):
    """One tensor info as the file gives it: name, dims (ggml order), type, offset."""

    name: str
    dims: tuple[int, ...]
    ggml: GgmlType
    offset: int
    nbytes: int


class GgufHeader(ValueRecord):
    """A parsed header: byte order, version, metadata (scalars decoded, arrays lazy), the tensor
    infos in file order, the alignment, and where the data section starts."""

    byte_order: str
    version: int
    kvs: dict[str, GgufValue | LazyArray]
    infos: list[RawInfo]
    alignment: int
    data_start: int


class _Cursor:
    """Reads forward through a source in windows; every read is checked against the file."""

    def __init__(self, source: ByteSource, byte_order: str) -> None:
        self.source, self.order, self.position = source, byte_order, 0
        self.size = source.size
        mapped = hasattr(source, "array")  # memory and mmap sources view: no windows needed
        self._window = source.read(0, self.size, "the GGUF header") if mapped else memoryview(b"")
        self._window_start = 0
        self._structs: dict[str, struct.Struct] = {}
        self.what = "the GGUF header"

    def take(self, size: int) -> memoryview:
        """The next `size` bytes; `TruncatedError` where the file ends first."""
        start = self.position
        if start + size > self.size:
            raise TruncatedError(self.what, start + size, self.size, path=self.source.name)
        offset = start - self._window_start
        if offset < 0 or offset + size > len(self._window):
            length = min(max(size, _WINDOW), self.size - start)
            self._window = self.source.read(start, length, self.what)
            self._window_start, offset = start, 0
        self.position = start + size
        return self._window[offset : offset + size]

    def skip(self, size: int) -> None:
        """Move past `size` bytes without reading them (still inside the file)."""
        if self.position + size > self.size:
            raise TruncatedError(self.what, self.position + size, self.size, path=self.source.name)
        self.position += size

    def unpack(self, code: str) -> int | float | bool:
        packer = self._structs.get(code)
        if packer is None:
            packer = self._structs[code] = struct.Struct(self.order + code)
        (value,) = packer.unpack(self.take(packer.size))
        return value  # type: ignore[no-any-return]

    def u32(self) -> int:
        return int(self.unpack("I"))

    def u64(self) -> int:
        return int(self.unpack("Q"))

    def string(self, what: str) -> bytes:
        size = self.u64()
        if size > MAX_STRING_SIZE:
            raise LimitExceeded(f"{what} length", size, MAX_STRING_SIZE, path=self.source.name)
        return bytes(self.take(size))


def parse_header(source: ByteSource) -> GgufHeader:
    """Parse the header of the GGUF file in `source`.

    Raises:
        HeaderError: no GGUF magic, or a header too short.
        UnsupportedVersionError: a version other than 2 or 3.
        LimitExceeded: a count, length, depth or alignment past its limit.
        MetadataError: a key that is not UTF-8 or appears twice, an unknown value type.
        DescriptorError: a tensor info that is inconsistent (named).
        DTypeError: a tensor of an unknown ggml type id (named).
        TruncatedError: the file ends inside the header or before a tensor's bytes.
    """
    path = source.name
    if source.size < _FIXED:
        raise HeaderError(
            f"file is {source.size} bytes, shorter than the {_FIXED}-byte GGUF header", path=path
        )
    fixed = bytes(source.read(0, _FIXED, "the GGUF header"))
    if fixed[:4] != MAGIC:
        raise HeaderError(f"magic is {fixed[:4]!r}, expected {MAGIC!r}; not a GGUF file", path=path)
    byte_order = _byte_order(fixed, path)
    version, tensor_count, kv_count = struct.unpack(byte_order + "IQQ", fixed[4:])
    if tensor_count > MAX_TENSOR_COUNT:
        raise LimitExceeded("tensor count", tensor_count, MAX_TENSOR_COUNT, path=path)
    if kv_count > MAX_KV_COUNT:
        raise LimitExceeded("metadata pair count", kv_count, MAX_KV_COUNT, path=path)
    cursor = _Cursor(source, byte_order)
    cursor.position = _FIXED
    cursor.what = "the GGUF metadata"
    kvs = _parse_kvs(cursor, kv_count)
    alignment = _alignment(kvs, path)
    cursor.what = "the GGUF tensor infos"
    infos = [_parse_info(cursor, alignment) for _ in range(tensor_count)]
    data_start = -(-cursor.position // alignment) * alignment
    _check_layout(infos, data_start, source.size, path)
    return GgufHeader(byte_order, version, kvs, infos, alignment, data_start)


def _byte_order(fixed: bytes, path: str | None) -> str:
    """``"<"`` or ``">"``: the version field read both ways; only one gives 2 or 3."""
    little, big = struct.unpack("<I", fixed[4:8])[0], struct.unpack(">I", fixed[4:8])[0]
    if little in VERSIONS:
        return "<"
    if big in VERSIONS:
        return ">"
    found = little if little < big else big
    if found == 1:
        raise HeaderError(
            "GGUF version 1 (2023) is not read; convert it with a current llama.cpp", path=path
        )
    if found < VERSIONS[0]:  # no GGUF version 0: "upgrade weightstore" would mislead
        raise HeaderError(f"GGUF version {found} does not exist; the header is damaged", path=path)
    raise UnsupportedVersionError(found, VERSIONS[-1], path=path)


# -- metadata ------------------------------------------------------------------------------------


def _parse_kvs(cursor: _Cursor, count: int) -> dict[str, GgufValue | LazyArray]:
    kvs: dict[str, GgufValue | LazyArray] = {}
    path = cursor.source.name
    for _ in range(count):
        raw = cursor.string("metadata key")
        try:
            key = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MetadataError(
                f"metadata key {bounded_repr(raw)} is not UTF-8", path=path
            ) from None
        if key in kvs:
            raise MetadataError(f"metadata key {key!r} appears twice", path=path)
        value_type = cursor.u32()
        kvs[key] = _parse_value(cursor, value_type, key, depth=0)
    return kvs


def _parse_value(cursor: _Cursor, value_type: int, key: str, depth: int) -> GgufValue | LazyArray:
    if value_type in SCALAR_FORMATS:
        return GgufValue(value_type, cursor.unpack(SCALAR_FORMATS[value_type]))
    if value_type == ValueType.STRING:
        return GgufValue(value_type, decode_text(cursor.string(f"{key!r} string")))
    if value_type == ValueType.ARRAY:
        return _skip_array(cursor, key, depth + 1)
    raise MetadataError(
        f"metadata {key!r} has value type {value_type}, which GGUF does not define",
        path=cursor.source.name,
    )


def _skip_array(cursor: _Cursor, key: str, depth: int) -> LazyArray:
    """Record where an array lies and move past it, touching only what gives its length."""
    path = cursor.source.name
    if depth > MAX_ARRAY_DEPTH:
        raise LimitExceeded(f"array nesting of {key!r}", depth, MAX_ARRAY_DEPTH, path=path)
    element_type, count = cursor.u32(), cursor.u64()
    if count > MAX_ARRAY_LENGTH:
        raise LimitExceeded(f"array length of {key!r}", count, MAX_ARRAY_LENGTH, path=path)
    start = cursor.position
    if element_type in SCALAR_FORMATS:
        cursor.skip(count * struct.calcsize(SCALAR_FORMATS[element_type]))
    elif element_type == ValueType.STRING:
        if count * 8 > cursor.size - start:  # each string is at least its 8-byte length
            raise TruncatedError(cursor.what, start + count * 8, cursor.size, path=path)
        _skip_strings(cursor, count, key)
    elif element_type == ValueType.ARRAY:
        if count * 12 > cursor.size - start:  # each array is at least its 12-byte head
            raise TruncatedError(cursor.what, start + count * 12, cursor.size, path=path)
        for _ in range(count):
            _skip_array(cursor, key, depth + 1)
    else:
        raise MetadataError(
            f"metadata {key!r} is an array of value type {element_type}, which GGUF does not "
            "define",
            path=path,
        )
    return LazyArray(start, element_type, count, cursor.position)


def _skip_strings(cursor: _Cursor, count: int, key: str) -> None:
    length = struct.Struct(cursor.order + "Q")
    for _ in range(count):
        (size,) = length.unpack(cursor.take(8))
        if size > MAX_STRING_SIZE:
            what = f"{key!r} string length"
            raise LimitExceeded(what, size, MAX_STRING_SIZE, path=cursor.source.name)
        cursor.skip(size)


def decode_text(raw: bytes) -> str:
    """A string value; bytes that are not UTF-8 (a byte-level token) survive as surrogate
    escapes, so writing the value back gives the same bytes."""
    return raw.decode("utf-8", "surrogateescape")


def decode_array(source: ByteSource, array: LazyArray, byte_order: str) -> list[object]:
    """An array's elements as Python values (nested arrays as `GgufValue` lists)."""
    cursor = _Cursor(source, byte_order)
    cursor.position = array.offset
    cursor.what = "a GGUF metadata array"
    return _elements(cursor, array.element_type, array.count)


def decode_head(source: ByteSource, array: LazyArray, byte_order: str, limit: int) -> ArrayHead:
    """An array's first `limit` elements, decoding nothing past them (a nested array's elements
    are heads of their own, each cut at `limit` too)."""
    cursor = _Cursor(source, byte_order)
    cursor.position = array.offset
    cursor.what = "a GGUF metadata array"
    return _head(cursor, array.element_type, array.count, limit, to_end=False)


def _head(cursor: _Cursor, element_type: int, count: int, limit: int, *, to_end: bool) -> ArrayHead:
    """The head of the array at the cursor; with `to_end`, the cursor is left past the whole
    array (where the next element of an enclosing array starts). The header's parse checked
    every length and limit of these bytes already."""
    shown = min(count, limit)
    items: list[object]
    if element_type != ValueType.ARRAY:
        items = _elements(cursor, element_type, shown)
        if to_end and element_type in SCALAR_FORMATS:
            cursor.skip((count - shown) * struct.calcsize(SCALAR_FORMATS[element_type]))
        elif to_end:
            _skip_strings(cursor, count - shown, "array")
        return ArrayHead(element_type, count, items)
    items = []
    for index in range(count if to_end else shown):
        inner_type, inner_count = cursor.u32(), cursor.u64()
        inner = _head(cursor, inner_type, inner_count, limit, to_end=to_end or index < shown - 1)
        if index < shown:
            items.append(inner)
    return ArrayHead(element_type, count, items)


def _elements(cursor: _Cursor, element_type: int, count: int) -> list[object]:
    if element_type in SCALAR_FORMATS:
        code = SCALAR_FORMATS[element_type]
        packer = struct.Struct(f"{cursor.order}{count}{code}")
        return list(packer.unpack(cursor.take(packer.size)))
    if element_type == ValueType.STRING:
        take, length = cursor.take, struct.Struct(cursor.order + "Q").unpack
        return [decode_text(bytes(take(length(take(8))[0]))) for _ in range(count)]
    nested: list[object] = []
    for _ in range(count):
        inner_type, inner_count = cursor.u32(), cursor.u64()
        items = _elements(cursor, inner_type, inner_count)
        nested.append(GgufValue(ValueType.ARRAY, items, inner_type))
    return nested


def _alignment(kvs: dict[str, GgufValue | LazyArray], path: str | None) -> int:
    value = kvs.get(ALIGNMENT_KEY)
    if value is None:
        return DEFAULT_ALIGNMENT
    if (
        not isinstance(value, GgufValue)
        or value.type not in SCALAR_FORMATS
        or type(value.value) is not int
    ):
        raise MetadataError(f"{ALIGNMENT_KEY} is not an integer", path=path)
    alignment = value.value
    if alignment > MAX_ALIGNMENT:
        raise LimitExceeded("alignment", alignment, MAX_ALIGNMENT, path=path)
    if alignment <= 0 or alignment & (alignment - 1):
        raise MetadataError(f"{ALIGNMENT_KEY} is {alignment}, not a power of two", path=path)
    return alignment


# -- tensor infos --------------------------------------------------------------------------------


def _parse_info(cursor: _Cursor, alignment: int) -> RawInfo:
    path = cursor.source.name
    raw = cursor.string("tensor name")
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DescriptorError(f"tensor name {bounded_repr(raw)} is not UTF-8", path=path) from None
    n_dims = cursor.u32()
    if n_dims > MAX_TENSOR_DIMS:
        raise LimitExceeded("dimension count", n_dims, MAX_TENSOR_DIMS, path=path, tensor=name)
    dims = tuple(cursor.u64() for _ in range(n_dims))
    ggml = ggml_type(cursor.u32(), path=path, tensor=name)
    offset = cursor.u64()
    return RawInfo(name, dims, ggml, offset, _nbytes(dims, ggml, offset, alignment, path, name))


def _nbytes(
    dims: tuple[int, ...], ggml: GgmlType, offset: int, alignment: int, path: str | None, name: str
) -> int:
    """The tensor's byte size, after the checks llama.cpp makes: counts fit int64, the row is
    whole blocks, the offset is aligned."""
    elements = 1
    for dim in dims:
        if dim > _MAX_I64:
            raise DescriptorError(
                f"dimension {dim:,} does not fit ggml's int64", path=path, tensor=name
            )
        elements *= dim
    if elements > _MAX_I64:
        raise LimitExceeded("element count", elements, _MAX_I64, path=path, tensor=name)
    row = dims[0] if dims else 1
    if row % ggml.block_size:
        raise DescriptorError(
            f"{ggml.name} packs {ggml.block_size} elements per block, and the innermost "
            f"dimension {row:,} is not a multiple of it",
            path=path,
            tensor=name,
        )
    if offset % alignment:
        raise DescriptorError(
            f"data offset {offset:,} is not a multiple of the alignment {alignment}",
            path=path,
            tensor=name,
        )
    nbytes = elements // ggml.block_size * ggml.type_size
    if nbytes > _MAX_I64:
        raise LimitExceeded("tensor size in bytes", nbytes, _MAX_I64, path=path, tensor=name)
    return nbytes


def _check_layout(infos: list[RawInfo], data_start: int, size: int, path: str | None) -> None:
    """Names unique; every tensor's bytes inside the file; no two overlap (one sort)."""
    seen: set[str] = set()
    for info in infos:
        if info.name in seen:
            raise DescriptorError("tensor name appears twice", path=path, tensor=info.name)
        seen.add(info.name)
    ordered = sorted((info.offset, info.offset + info.nbytes, info.name) for info in infos)
    previous_end, previous = 0, ""
    for start, end, name in ordered:
        if start < previous_end and end > start:
            raise DescriptorError(
                f"bytes [{start:,}, {end:,}) overlap those of {previous!r}", path=path, tensor=name
            )
        if end > start:
            previous_end, previous = end, name
    last = max(ordered, key=lambda item: item[1], default=None)
    if last is not None and data_start + last[1] > size:
        raise TruncatedError(
            "the GGUF tensor data", data_start + last[1], size, path=path, tensor=last[2]
        )
