"""The GGUF mutator: edit the decoded header, then write it back with its lengths fixed up.

A byte flip in a GGUF header mostly breaks a length and dies at the next read, so the file is
decoded into a model (`GgufModel`: the fixed fields, the metadata pairs with their values, the
tensor infos and the data section), one to three fields are changed (counts, string and array
lengths, value and ggml type ids, dims, offsets, the alignment, names, byte order, the blocks'
bytes), and the model is encoded again: strings and arrays carry their true lengths unless the
edit is a lie about one, the header is padded to the alignment the pairs now declare, and
after an edit of a tensor's type or dims the tensors are laid out again (`relayout`), each at
an aligned offset with as many bytes as its type and dims take, so the reader gets past its
layout checks to the tensors. The decoder here is lenient and bounded (it reads what the
fuzzer's inputs hold, at most 64 KiB); it shares no code with the reader it tests, except the
ggml type table (ids and block sizes), which is data.
"""

from __future__ import annotations

import math
import random
import struct
from dataclasses import dataclass, field
from typing import Any, Final

from weightstore.quantized import GGML_TYPES

__all__ = ["GgufModel", "encode", "flip_byte_order", "mutate_gguf", "parse", "relayout"]

Rng = random.Random

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_CODES: Final = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f",
                 BOOL: "B", U64: "Q", I64: "q", F64: "d"}  # fmt: skip  # BOOL: any byte
_BITS: Final = {U8: 8, I8: 8, U16: 16, I16: 16, U32: 32, I32: 32, BOOL: 8, U64: 64, I64: 64}
_SIGNED: Final = frozenset({I8, I16, I32, I64})
_MAX_COUNT: Final = 65_536  # pairs or infos the lenient decoder accepts
_MAX_DEPTH: Final = 12
_MAX_TENSOR_BYTES: Final = 16_384  # a relayout gives a tensor at most this many bytes
_MAX_PADDING: Final = 65_536  # a larger declared alignment is not padded to (the file is cut)

INTERESTING_INTS: Final = (
    0, 1, -1, 2, 3, 7, 8, 31, 32, 33, 255, 256, 4096, 2**16, 2**20, 2**20 + 1, 2**24,
    2**24 + 1, 2**26, 2**26 + 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63,
    2**64 - 1,
)  # fmt: skip
VALUE_TYPES: Final = (*range(13), 13, 255, 2**16, 2**32 - 1)
GGML_IDS: Final = (*GGML_TYPES, 4, 5, 31, 42, 99, 255, 2**31, 2**32 - 1)
ALIGNMENTS: Final = (0, 1, 2, 3, 8, 16, 31, 32, 48, 64, 4096, 2**24, 2**24 + 1, 2**32 - 1, -32)
TEXTS: Final = (
    b"", b"\xff", b"\xc3", b"ok\x00nul", "é".encode() * 3, b"\xed\xa0\x80", b"x" * 3000,
    b'{"algorithm": "sha256", "tensors": {}}', b"{bad json", b"general.alignment",
)  # fmt: skip
DIGESTS_KEY: Final = b"weightstore.digests"


@dataclass(slots=True)
class Array:
    """An array value: its element type, its items, and a count that may lie."""

    element: int
    items: list[Any]
    count: int | None = None


@dataclass(slots=True)
class Lie:
    """A string whose length field says `declared`, not ``len(raw)``."""

    raw: bytes
    declared: int


@dataclass(slots=True)
class Pair:
    key: bytes | Lie
    type_id: int  # as written; `kind` is how the value is encoded (they differ after a lie)
    kind: int
    value: Any


@dataclass(slots=True)
class Info:
    name: bytes | Lie
    dims: list[int]
    type_id: int
    offset: int
    n_dims: int | None = None  # a lie about len(dims)


@dataclass(slots=True)
class GgufModel:
    order: str
    version: int
    pairs: list[Pair]
    infos: list[Info]
    data: bytes
    tensor_count: int | None = None  # lies about len(infos), len(pairs)
    kv_count: int | None = None
    tail: bytes = field(default=b"")


# -- decoding (lenient, bounded) ------------------------------------------------------------------


class _Bad(Exception):
    pass


class _Reader:
    def __init__(self, data: bytes, order: str) -> None:
        self.data, self.order, self.at = data, order, 0

    def take(self, size: int) -> bytes:
        if size < 0 or self.at + size > len(self.data):
            raise _Bad
        out = self.data[self.at : self.at + size]
        self.at += size
        return out

    def unpack(self, code: str) -> Any:
        packer = struct.Struct(self.order + code)
        return packer.unpack(self.take(packer.size))[0]

    def string(self) -> bytes:
        return self.take(self.unpack("Q"))

    def value(self, kind: int, depth: int) -> Any:
        if kind in _CODES:
            return self.unpack(_CODES[kind])
        if kind == STRING:
            return self.string()
        if kind != ARRAY or depth > _MAX_DEPTH:
            raise _Bad
        element, count = self.unpack("I"), self.unpack("Q")
        if count > len(self.data) - self.at:  # every element takes a byte at least
            raise _Bad
        return Array(element, [self.value(element, depth + 1) for _ in range(count)])


def parse(data: bytes) -> GgufModel | None:
    """The model of `data`, or None where it is no GGUF file this decoder follows."""
    if len(data) < 24 or data[:4] != b"GGUF":
        return None
    little, big = struct.unpack_from("<I", data, 4)[0], struct.unpack_from(">I", data, 4)[0]
    reader = _Reader(data, "<" if little <= big else ">")
    reader.at = 4
    try:
        version, tensors, pairs = reader.unpack("I"), reader.unpack("Q"), reader.unpack("Q")
        if tensors > _MAX_COUNT or pairs > _MAX_COUNT:
            return None
        model = GgufModel(reader.order, version, [], [], b"")
        for _ in range(pairs):
            key, kind = reader.string(), reader.unpack("I")
            model.pairs.append(Pair(key, kind, kind, reader.value(kind, 0)))
        for _ in range(tensors):
            name, n_dims = reader.string(), reader.unpack("I")
            if n_dims > 16:
                return None
            dims = [reader.unpack("Q") for _ in range(n_dims)]
            model.infos.append(Info(name, dims, reader.unpack("I"), reader.unpack("Q")))
    except (_Bad, struct.error, RecursionError):
        return None
    start = reader.at + (-reader.at % padding_of(model))
    model.data = data[start:]
    return model


# -- encoding -------------------------------------------------------------------------------------


def alignment_of(model: GgufModel) -> int | None:
    """The ``general.alignment`` the pairs declare, when it is a usable power of two."""
    for pair in model.pairs:
        if pair.key == b"general.alignment" and pair.kind in _BITS and pair.type_id == pair.kind:
            value = pair.value
            if type(value) is int and 0 < value <= 2**24 and not value & (value - 1):
                return value
            return None
    return 32


def padding_of(model: GgufModel) -> int:
    alignment = alignment_of(model)
    return alignment if alignment is not None and alignment <= _MAX_PADDING else 32


def _scalar(kind: int, value: Any, order: str) -> bytes:
    if kind in _BITS:
        bits = _BITS[kind]
        number = int(value) % 2**bits if isinstance(value, (int, float)) else 0
        if kind in _SIGNED and number >= 2 ** (bits - 1):
            number -= 2**bits
        return struct.pack(order + _CODES[kind], number)
    number = float(value) if isinstance(value, (int, float)) else 0.0
    try:
        return struct.pack(order + _CODES[kind], number)
    except OverflowError:  # a float64 past float32's range
        return struct.pack(order + _CODES[kind], math.inf)


def _string(raw: bytes | Lie, order: str) -> bytes:
    if isinstance(raw, Lie):
        return struct.pack(order + "Q", raw.declared % 2**64) + raw.raw
    return struct.pack(order + "Q", len(raw)) + raw


def _value(kind: int, value: Any, order: str) -> bytes:
    if kind in _CODES:
        return _scalar(kind, value, order)
    if kind == STRING:
        return _string(value if isinstance(value, (bytes, Lie)) else b"", order)
    if kind == ARRAY and isinstance(value, Array):
        count = len(value.items) if value.count is None else value.count % 2**64
        head = struct.pack(order + "IQ", value.element % 2**32, count)
        return head + b"".join(_value(value.element, item, order) for item in value.items)
    return b""  # a type GGUF does not define: no bytes follow


def encode(model: GgufModel) -> bytes:
    """The file `model` describes, the header padded to the alignment its pairs declare."""
    order = model.order
    tensors = len(model.infos) if model.tensor_count is None else model.tensor_count
    pairs = len(model.pairs) if model.kv_count is None else model.kv_count
    out = [
        b"GGUF",
        struct.pack(order + "IQQ", model.version % 2**32, tensors % 2**64, pairs % 2**64),
    ]
    for pair in model.pairs:
        out += [_string(pair.key, order), struct.pack(order + "I", pair.type_id % 2**32)]
        out.append(_value(pair.kind, pair.value, order))
    for info in model.infos:
        n_dims = len(info.dims) if info.n_dims is None else info.n_dims
        out += [_string(info.name, order), struct.pack(order + "I", n_dims % 2**32)]
        out += [struct.pack(order + "Q", dim % 2**64) for dim in info.dims]
        out.append(struct.pack(order + "IQ", info.type_id % 2**32, info.offset % 2**64))
    header = b"".join(out)
    return header + bytes(-len(header) % padding_of(model)) + model.data + model.tail


# -- fix-ups --------------------------------------------------------------------------------------


def _nbytes(info: Info) -> int | None:
    """Bytes the tensor takes by its type and dims; None if unknown, not whole blocks, or big."""
    ggml = GGML_TYPES.get(info.type_id)
    if ggml is None or any(not 0 <= dim <= _MAX_TENSOR_BYTES for dim in info.dims):
        return None
    elements = math.prod(info.dims)
    row = info.dims[0] if info.dims else 1
    if row % ggml.block_size or elements > _MAX_TENSOR_BYTES * 8:
        return None
    size = elements // ggml.block_size * ggml.type_size
    return size if size <= _MAX_TENSOR_BYTES else None


def relayout(model: GgufModel, rng: Rng) -> None:
    """Give every tensor whose size is known its own aligned place and bytes, in file order
    (old bytes kept where they were, new ones random); the others keep their offsets."""
    alignment, data = padding_of(model), model.data
    pieces: list[bytes] = []
    position = 0
    for info in model.infos:
        size = _nbytes(info)
        if size is None:
            continue
        old = data[info.offset : info.offset + size] if info.offset < len(data) else b""
        fresh = old + rng.randbytes(size - len(old))
        info.offset = position
        pieces.append(fresh + bytes(-size % alignment))
        position += size + (-size % alignment)
    model.data = b"".join(pieces)


def flip_byte_order(model: GgufModel) -> None:
    """The same file in the other byte order, plain tensors' elements swapped too."""
    data = bytearray(model.data)
    for info in model.infos:
        ggml, size = GGML_TYPES.get(info.type_id), _nbytes(info)
        if ggml is None or ggml.plain is None or size is None or ggml.type_size == 1:
            continue
        width = ggml.type_size
        end = min(info.offset + size, len(data))
        for at in range(info.offset, end - width + 1, width):
            data[at : at + width] = data[at : at + width][::-1]
    model.data = bytes(data)
    model.order = ">" if model.order == "<" else "<"


# -- edits ----------------------------------------------------------------------------------------


def _int(rng: Rng) -> int:
    if rng.random() < 0.25:
        return rng.randrange(-(2**63), 2**64)
    return rng.choice(INTERESTING_INTS)


def _new_value(rng: Rng, depth: int = 0) -> tuple[int, Any]:
    kind = rng.choice((U8, I8, U16, I16, U32, I32, F32, BOOL, U64, I64, F64, STRING, ARRAY))
    if kind in (F32, F64):
        return kind, rng.choice((0.0, -0.0, 1.5, math.nan, math.inf, -math.inf, 1e300))
    if kind in _CODES:
        return kind, _int(rng)
    if kind == STRING:
        return kind, rng.choice(TEXTS)
    return kind, _new_array(rng, depth)


def _new_array(rng: Rng, depth: int) -> Array:
    roll = rng.randrange(6)
    if roll == 0:  # a vocabulary: many short strings, some bytes that are not UTF-8
        count = rng.choice((3, 200, 2000))
        return Array(STRING, [rng.choice(TEXTS[:6]) + b"%d" % i for i in range(count)])
    if roll == 1 and depth < _MAX_DEPTH:  # nested, down to one past the reader's limit
        levels = rng.choice((1, 2, 7, 8, 9, 10))
        value = Array(U8, [1, 2])
        for _ in range(levels):
            value = Array(ARRAY, [value] * rng.choice((1, 2)))
        return value
    kind, item = _new_value(rng, depth + 1)
    return Array(kind, [item] * rng.choice((0, 1, 3, 64)))


def _pick(items: list[Any], rng: Rng) -> Any:
    return rng.choice(items) if items else None


def _edit_pair(model: GgufModel, rng: Rng) -> None:
    pair = _pick(model.pairs, rng)
    roll = rng.randrange(10)
    if pair is None or roll == 0:  # a new pair: any type, a duplicate key, the alignment
        key = rng.choice((b"general.name", b"tokenizer.ggml.tokens", DIGESTS_KEY, *TEXTS[:5]))
        if pair is not None and rng.random() < 0.3:
            key = pair.key if isinstance(pair.key, bytes) else key
        kind, value = _new_value(rng)
        if key == DIGESTS_KEY:
            kind, value = STRING, rng.choice(TEXTS[-4:-1])
        model.pairs.insert(rng.randrange(len(model.pairs) + 1), Pair(key, kind, kind, value))
    elif roll == 1:
        model.pairs.remove(pair)
    elif roll == 2:  # the type id lies: the value's bytes are read as another type
        pair.type_id = rng.choice(VALUE_TYPES)
    elif roll == 3:  # the value changes type, its id with it
        pair.kind, pair.value = _new_value(rng)
        pair.type_id = pair.kind
    elif roll == 4:  # a length that lies: the key, a string value, an array count
        if pair.kind == ARRAY and isinstance(pair.value, Array):
            pair.value.count = rng.choice((len(pair.value.items) + 1, 2**26, 2**26 + 1, _int(rng)))
        elif pair.kind == STRING and isinstance(pair.value, bytes):
            pair.value = Lie(pair.value, rng.choice((len(pair.value) + 1, 2**26 + 1, _int(rng))))
        elif isinstance(pair.key, bytes):
            pair.key = Lie(pair.key, rng.choice((len(pair.key) + 1, 0, 2**26 + 1, _int(rng))))
    elif roll == 5:
        pair.key = rng.choice((*TEXTS[:5], b"general.alignment"))
    elif roll == 6 and pair.kind == ARRAY and isinstance(pair.value, Array):
        array = pair.value
        choice = rng.randrange(4)
        if choice == 0 and array.items:
            del array.items[rng.randrange(len(array.items))]
        elif choice == 1:
            array.element = rng.choice(VALUE_TYPES)  # the items re-encoded as that type
        elif choice == 2:
            pair.value = Array(ARRAY, [array] * rng.choice((1, 2)))  # one level deeper
        else:
            array.items.extend(array.items[:8] * rng.choice((1, 30)))
    else:
        pair.value = _int(rng) if pair.kind in _BITS else _new_value(rng)[1]
        if pair.kind not in _CODES:
            pair.kind, pair.value = _new_value(rng)
            pair.type_id = pair.kind


def _edit_alignment(model: GgufModel, rng: Rng) -> None:
    value: Any
    kind, value = U32, rng.choice((1, 8, 16, 32, 64, 4096))  # mostly one that works
    if rng.random() < 0.4:
        kind, value = (
            rng.choice((U32, U64, U8, I32, I64, BOOL, F32, STRING)),
            rng.choice(ALIGNMENTS),
        )
    if kind == STRING:
        value = b"%d" % value
    model.pairs = [p for p in model.pairs if p.key != b"general.alignment"]
    model.pairs.insert(
        rng.randrange(len(model.pairs) + 1), Pair(b"general.alignment", kind, kind, value)
    )
    if rng.random() < 0.8:
        relayout(model, rng)


def _edit_info(model: GgufModel, rng: Rng) -> None:
    info = _pick(model.infos, rng)
    roll = rng.randrange(9)
    if info is None or roll == 0:  # a new tensor of any known type, whole blocks
        type_id = rng.choice(list(GGML_TYPES))
        block = GGML_TYPES[type_id].block_size
        dims = [block * rng.choice((1, 2))] + [rng.choice((1, 2, 3))] * rng.randrange(3)
        model.infos.insert(
            rng.randrange(len(model.infos) + 1), Info(b"t%d" % rng.randrange(99), dims, type_id, 0)
        )
        relayout(model, rng)
        return
    if roll == 1:
        model.infos.remove(info)
    elif roll == 2:  # another type; the row made whole blocks of it, mostly
        info.type_id = rng.choice(GGML_IDS)
        ggml = GGML_TYPES.get(info.type_id)
        if ggml is not None and rng.random() < 0.8:
            info.dims = [ggml.block_size * rng.choice((1, 2)), *info.dims[1:]]
        if rng.random() < 0.8:
            relayout(model, rng)
    elif roll == 3:  # a dim at an edge (0, 2**63, 2**64 - 1, ...)
        if info.dims:
            info.dims[rng.randrange(len(info.dims))] = rng.choice(INTERESTING_INTS)
        if rng.random() < 0.5:
            relayout(model, rng)
    elif roll == 4:  # dims added or dropped (past ggml's four), or their count lies
        choice = rng.randrange(3)
        if choice == 0:
            info.dims.append(rng.choice((1, 2)))
        elif choice == 1 and info.dims:
            info.dims.pop()
        else:
            info.n_dims = rng.choice((0, len(info.dims) + 1, 5, 2**32 - 1))
        if rng.random() < 0.5:
            relayout(model, rng)
    elif roll == 5:  # an offset that overlaps, misaligns or points past the end
        other = rng.choice(model.infos)
        info.offset = rng.choice((
            other.offset, info.offset + 1, info.offset + padding_of(model) // 2,
            len(model.data), len(model.data) + 32, 2**63, 2**64 - 32, 0,
        ))  # fmt: skip
    elif roll == 6:  # a name: a twin, not UTF-8, empty, long, or a length that lies
        other = rng.choice(model.infos)
        names = (other.name if isinstance(other.name, bytes) else b"x", *TEXTS[:7])
        info.name = rng.choice(names)
        if rng.random() < 0.2 and isinstance(info.name, bytes):
            info.name = Lie(info.name, rng.choice((len(info.name) + 1, 2**26 + 1, _int(rng))))
    elif roll == 7:  # the blocks' bytes: scales NaN, infinite or huge, or random bytes
        _edit_blocks(model, info, rng)
    else:
        i, j = rng.randrange(len(model.infos)), rng.randrange(len(model.infos))
        model.infos[i], model.infos[j] = model.infos[j], model.infos[i]


def _edit_blocks(model: GgufModel, info: Info, rng: Rng) -> None:
    size = _nbytes(info)
    if size is None or info.offset + size > len(model.data) or not size:
        return
    data = bytearray(model.data)
    if rng.random() < 0.5:
        data[info.offset : info.offset + size] = rng.randbytes(size)
    else:
        special = rng.choice((b"\x00\x7c", b"\x00\x7e", b"\x00\xfc", b"\xff\x7b", b"\x01\x00"))
        for _ in range(rng.choice((1, 8))):
            at = info.offset + rng.randrange(max(1, size - 1))
            data[at : at + 2] = special
    model.data = bytes(data[: len(model.data)])


def _edit_fixed(model: GgufModel, rng: Rng) -> None:
    roll = rng.randrange(5)
    if roll == 0:
        model.version = rng.choice((0, 1, 2, 4, 2**24, 2**32 - 1))
    elif roll == 1:
        model.tensor_count = rng.choice((len(model.infos) + 1, 0, 2**20, 2**20 + 1, 2**64 - 1))
    elif roll == 2:
        model.kv_count = rng.choice((len(model.pairs) + 1, 0, 2**16, 2**16 + 1, 2**64 - 1))
    elif roll == 3:
        flip_byte_order(model)
    else:  # the data cut short, or bytes after it
        cut = rng.randrange(len(model.data) + 1)
        model.data = model.data[:cut] if rng.random() < 0.7 else model.data + rng.randbytes(64)


_EDITS: Final = (
    (_edit_pair, 4), (_edit_info, 5), (_edit_alignment, 1), (_edit_fixed, 1),
)  # fmt: skip


def mutate_gguf(data: bytes, rng: Rng) -> bytes | None:
    """A GGUF file with one to three header edits, its lengths and layout redone."""
    model = parse(data)
    if model is None:
        return None
    edits = [edit for edit, weight in _EDITS for _ in range(weight)]
    for _ in range(rng.choice((1, 1, 2, 3))):
        rng.choice(edits)(model, rng)
    return encode(model)
