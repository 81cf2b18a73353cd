"""Writing GGUF files in one pass: plain types, Q8_0/Q4_0 on request, quantized blocks kept.

The header (metadata pairs and tensor infos) is planned from the entries' declared shapes when
the writer is built, so everything that can be refused is refused before a byte is written;
then each tensor's bytes are produced, written and dropped in turn (peak memory: one tensor,
plus its quantized form). Tensors are laid out in the order given, each on the alignment, as
gguf-py's writer lays them out, so a file gguf-py wrote is rewritten byte for byte.

A tensor reaches the writer one of three ways: values in a plain dtype (written as they are),
values to quantize (`quantize`: float tensors of two or more dims whose rows are whole
blocks; the rest, like llama.cpp's norms and biases, stay as they are), or the blocks of a
quantized tensor read from another GGUF file (`TensorEntry.blocks`), copied byte for byte.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from weightstore.container._writer import ContainerWriter
from weightstore.entry import TensorEntry, as_byte_view
from weightstore.errors import DTypeError, EntryError, InvalidOptionError
from weightstore.gguf._layout import (
    ALIGNMENT_KEY,
    DEFAULT_ALIGNMENT,
    INTEGER_RANGES,
    MAGIC,
    MAX_ALIGNMENT,
    MAX_TENSOR_DIMS,
    SCALAR_FORMATS,
    GgufValue,
    ValueType,
)
from weightstore.quantized import GGML_TYPES_BY_NAME, GgmlType, ggml_type_named

if TYPE_CHECKING:
    import numpy as np

__all__ = ["QUANTIZE_TYPES", "GgufWriter", "encode_value"]

VERSION: Final = 3
QUANTIZE_TYPES: Final = frozenset({"Q8_0", "Q4_0"})  # what `quantize` can produce
_PLAIN_TYPES: Final = {"F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64"}
_FLOAT_SOURCES: Final = {"F32", "F16", "BF16", "F64"}


def infer_value(value: object, key: str) -> GgufValue:
    """A Python value as a GGUF one, typed as gguf-py types it: str, bool, int as int32 (int64
    or uint64 when it does not fit), float as float32, and lists of one of these. A
    `GgufValue` is kept as given."""
    if isinstance(value, GgufValue):
        return value
    if isinstance(value, str):
        return GgufValue(ValueType.STRING, value)
    if isinstance(value, bool):
        return GgufValue(ValueType.BOOL, value)
    if isinstance(value, int):
        for kind in (ValueType.INT32, ValueType.INT64, ValueType.UINT64):
            low, high = INTEGER_RANGES[kind]
            if low <= value <= high:
                return GgufValue(kind, value)
        raise EntryError(f"metadata {key!r}: {value.bit_length()}-bit integer fits no GGUF type")
    if isinstance(value, float):
        return GgufValue(ValueType.FLOAT32, value)
    if isinstance(value, (list, tuple)):
        items = [infer_value(item, key) for item in value]
        kinds = {item.type for item in items}
        if len(kinds) > 1 and kinds <= {ValueType.INT32, ValueType.INT64, ValueType.UINT64}:
            widest = max(kinds, key=[ValueType.INT32, ValueType.INT64, ValueType.UINT64].index)
            kinds = {widest}
        if len(kinds) > 1:
            raise EntryError(f"metadata {key!r}: an array mixes value types")
        element = kinds.pop() if kinds else ValueType.STRING
        plain = [item if element == ValueType.ARRAY else item.value for item in items]
        return GgufValue(ValueType.ARRAY, plain, element)
    raise EntryError(f"metadata {key!r}: a {type(value).__name__} has no GGUF type")


def encode_value(value: GgufValue, key: str) -> bytes:
    """The bytes of a value after its type id (little-endian)."""
    if value.type == ValueType.STRING:
        return _string(_text(value.value, key))
    if value.type == ValueType.ARRAY:
        element = value.element_type
        items = value.value
        if element is None or not isinstance(items, list):
            raise EntryError(f"metadata {key!r}: an array needs an element type and a list")
        head = struct.pack("<IQ", element, len(items))
        if element in SCALAR_FORMATS:
            _check_scalars(element, items, key)
            return head + struct.pack(f"<{len(items)}{SCALAR_FORMATS[element]}", *items)
        if element == ValueType.STRING:
            return head + b"".join(_string(_text(item, key)) for item in items)
        if element == ValueType.ARRAY:
            parts = [head]
            for item in items:
                inner = item if isinstance(item, GgufValue) else infer_value(item, key)
                parts.append(encode_value(inner, key))  # its own element type, count, items
            return b"".join(parts)
        raise EntryError(f"metadata {key!r}: value type {element} is not GGUF's")
    if value.type in SCALAR_FORMATS:
        _check_scalars(value.type, [value.value], key)
        return struct.pack("<" + SCALAR_FORMATS[value.type], value.value)
    raise EntryError(f"metadata {key!r}: value type {value.type} is not GGUF's")


def _check_scalars(kind: int, items: list[Any], key: str) -> None:
    bounds = INTEGER_RANGES.get(kind)
    for item in items:
        if kind == ValueType.BOOL:
            ok = isinstance(item, bool)
        elif bounds is not None:
            ok = type(item) is int and bounds[0] <= item <= bounds[1]
        else:
            ok = isinstance(item, (int, float)) and not isinstance(item, bool)
        if not ok:
            name = ValueType.NAMES[kind]
            raise EntryError(f"metadata {key!r}: {item!r} is not a GGUF {name}")


def _text(value: object, key: str) -> bytes:
    if not isinstance(value, str):
        raise EntryError(f"metadata {key!r}: {value!r} is not a string")
    return value.encode("utf-8", "surrogateescape")  # bytes read back as escapes stay bytes


def _string(raw: bytes) -> bytes:
    return struct.pack("<Q", len(raw)) + raw


class _Planned:
    """One tensor's place in the file and how its bytes are produced."""

    __slots__ = ("entry", "ggml", "nbytes", "offset", "produce")

    def __init__(
        self, entry: TensorEntry, ggml: GgmlType, nbytes: int, produce: Callable[[], Any]
    ) -> None:
        self.entry, self.ggml, self.nbytes, self.produce = entry, ggml, nbytes, produce
        self.offset = 0


class GgufWriter(ContainerWriter):
    """A planned GGUF file (version 3, little-endian), ready to be written.

    Args:
        entries: the tensors, written in this order. Plain dtypes F32, F16, BF16, F64 and
            I8..I64 are written as they are; an entry carrying `TensorEntry.blocks` from a
            GGUF file is written as those blocks.
        metadata: key to value: `GgufValue` for an exact type, or a Python value typed by
            `infer_value` (strings stay strings; ``general.alignment`` sets the alignment).
        quantize: ``"Q8_0"`` or ``"Q4_0"``: float tensors of two or more dims whose rows
            are whole 32-element blocks are quantized (bit-exact with gguf-py); a tensor
            already stored quantized keeps its blocks.

    Raises:
        EntryError: a duplicate or non-text name, a length that disagrees with its shape,
            more than 4 dims, metadata that GGUF cannot type.
        DTypeError: a dtype GGUF has no type for (U8, BOOL, FP8 ...), named.
        InvalidOptionError: a `quantize` type other than Q8_0 or Q4_0.
    """

    def __init__(
        self,
        entries: Iterable[TensorEntry],
        metadata: Mapping[str, object] | None = None,
        *,
        quantize: str | None = None,
    ) -> None:
        target = None if quantize is None else _quantize_type(quantize)
        values = {key: _typed(key, value) for key, value in (metadata or {}).items()}
        self.alignment = _alignment(values)
        self._planned = [self._plan(entry, target) for entry in entries]
        self._check_names()
        header = bytearray(MAGIC + struct.pack("<IQQ", VERSION, len(self._planned), len(values)))
        for key, value in values.items():
            header += _string(key.encode("utf-8")) + struct.pack("<I", value.type)
            header += encode_value(value, key)
        offset = 0
        for planned in self._planned:
            planned.offset = offset
            offset += _padded(planned.nbytes, self.alignment)
            dims = tuple(reversed(planned.entry.shape))
            header += _string(planned.entry.name.encode("utf-8"))
            header += struct.pack(
                f"<I{len(dims)}QIQ", len(dims), *dims, planned.ggml.id, planned.offset
            )
        self._header = bytes(header) + bytes(_padded(len(header), self.alignment) - len(header))
        self.size = len(self._header) + offset

    def _plan(self, entry: TensorEntry, target: GgmlType | None) -> _Planned:
        shape = entry.shape
        if len(shape) > MAX_TENSOR_DIMS:
            raise EntryError(
                f"{len(shape)} dims: GGUF tensors have at most {MAX_TENSOR_DIMS}", tensor=entry.name
            )
        elements = math.prod(shape)
        row = shape[-1] if shape else 1
        if entry.blocks is not None:
            ggml = ggml_type_named(entry.blocks[0])
            nbytes = _quantized_bytes(ggml, elements, row, entry.name)
            return _Planned(entry, ggml, nbytes, _checked(entry.blocks[1], nbytes, entry.name))
        name = entry.dtype.name
        if name == "FLEX32":
            name = "F32"  # Burn's Flex32 is f32 bytes
        if name not in _PLAIN_TYPES:
            raise DTypeError(
                f"dtype {entry.dtype.name} has no GGUF type (GGUF holds F32, F16, BF16, F64, "
                "I8..I64 and ggml's quantized blocks)",
                tensor=entry.name,
            )
        if (
            target is not None
            and name in _FLOAT_SOURCES
            and len(shape) >= 2
            and not (row % target.block_size)
        ):
            nbytes = elements // target.block_size * target.type_size
            return _Planned(entry, target, nbytes, lambda: _quantized(entry, target))
        ggml = GGML_TYPES_BY_NAME[name]
        return _Planned(entry, ggml, entry.nbytes, entry.read)

    def _check_names(self) -> None:
        seen: set[str] = set()
        for planned in self._planned:
            if planned.entry.name in seen:
                raise EntryError("name appears twice", tensor=planned.entry.name)
            seen.add(planned.entry.name)

    def _pieces(self) -> Iterator[bytes | memoryview]:
        yield self._header
        for planned in self._planned:
            data = planned.produce()
            yield data
            del data
            padding = _padded(planned.nbytes, self.alignment) - planned.nbytes
            if padding:
                yield bytes(padding)


def _quantize_type(name: str) -> GgmlType:
    upper = name.upper()
    if upper not in QUANTIZE_TYPES:
        raise InvalidOptionError(
            f"quantize to {name!r}: weightstore quantizes to Q8_0 or Q4_0", option="quantize"
        )
    return GGML_TYPES_BY_NAME[upper]


def _typed(key: str, value: object) -> GgufValue:
    """`infer_value`, but the alignment is a uint32 whatever int it is given as: llama.cpp
    reads it with ``gguf_get_val_u32``, which aborts on any other type (gguf-py refuses it)."""
    if key == ALIGNMENT_KEY and type(value) is int and 0 <= value < 2**32:
        return GgufValue(ValueType.UINT32, value)
    return infer_value(value, key)


def _alignment(values: dict[str, GgufValue]) -> int:
    value = values.get(ALIGNMENT_KEY)
    if value is None:
        return DEFAULT_ALIGNMENT
    alignment = value.value
    if (
        type(alignment) is not int
        or not 0 < alignment <= MAX_ALIGNMENT
        or alignment & (alignment - 1)
    ):
        raise EntryError(f"{ALIGNMENT_KEY} {alignment!r} is not a power of two up to 2**24")
    if value.type != ValueType.UINT32:
        raise EntryError(f"{ALIGNMENT_KEY} must be a uint32 (llama.cpp reads no other type)")
    return alignment


def _padded(size: int, alignment: int) -> int:
    return -(-size // alignment) * alignment


def _quantized_bytes(ggml: GgmlType, elements: int, row: int, name: str) -> int:
    if row % ggml.block_size:
        raise EntryError(
            f"{ggml.name} blocks hold {ggml.block_size} elements; the innermost dim {row} is "
            "not a multiple",
            tensor=name,
        )
    return elements // ggml.block_size * ggml.type_size


def _checked(read: Callable[[], Any], nbytes: int, name: str) -> Callable[[], memoryview]:
    def produce() -> memoryview:
        view = as_byte_view(read())
        if view.nbytes != nbytes:
            raise EntryError(f"blocks are {view.nbytes:,} bytes, expected {nbytes:,}", tensor=name)
        return view

    return produce


def _quantized(entry: TensorEntry, target: GgmlType) -> np.ndarray[Any, Any]:
    import numpy as np

    from weightstore.quantized._ggml_quantize import quantize_blocks

    values = np.frombuffer(entry.read(), entry.dtype.numpy).astype(np.float32, copy=False)
    return quantize_blocks(values, target)
