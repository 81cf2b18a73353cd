"""Structure-aware mutations: change what a reader parses, keep what it checks first.

A byte flip in a burnpack or SafeTensors header almost always breaks the CBOR or JSON and dies at
the first parse; a flip in a zipped pickle dies at the CRC. So each format gets a mutator that
decodes the container, changes the decoded structure, and writes it back with the framing
fixed up (lengths, padding, zip directory), leaving the deeper checks to be tested:

- burnpack: the CBOR metadata as Python values: interesting ints (u64 edges, 5,000-digit bignums),
  dtype and shape rewrites, offsets moved, deep nesting, values shared or made cyclic (CBOR tags
  28/29), raw tags; the u32 metadata size and the padding to the data start are rewritten.
- SafeTensors: the JSON header likewise (with text-level extras JSON values cannot carry: huge
  digit strings, duplicate keys, deep brackets); the u64 header length is rewritten. A file
  holding quantized groups has their parts' shapes, dtypes and values edited instead, half the
  time, its data laid out again (`fuzz.quantized_mutators`).
- PyTorch: the pickle, opcode by opcode (split with the reader's own `iter_ops`): values replaced
  by hostile ones (cyclic or exponential memo graphs, 5,000-digit ints, deep nests, foreign
  globals), opcodes deleted, duplicated or inserted; then re-zipped, each member stored or
  compressed with deflate, bzip2 or LZMA (sometimes with the compressed bytes damaged), or
  written back into the legacy pickle sequence or the tar layout.
- GGUF: the header decoded field by field and edited (`fuzz.gguf_mutators`), lengths and the
  tensor layout redone.

Every mutator takes ``(data, rng)`` and returns the new bytes, or ``None`` when `data` does not
parse as its format (the caller then falls back to libFuzzer's byte mutations).
"""

from __future__ import annotations

import io
import json
import random
import struct
import tarfile
import zipfile
from collections.abc import Callable
from typing import Any, Final

import cbor2

from fuzz.gguf_mutators import mutate_gguf
from fuzz.quantized_mutators import mutate_quantized
from weightstore.burnpack import _layout as burnpack_layout
from weightstore.dtypes import ALL_DTYPES
from weightstore.pytorch_reader import iter_ops

__all__ = ["MUTATORS", "mutate_burnpack", "mutate_pickle", "mutate_pytorch", "mutate_safetensors"]

Rng = random.Random

INTERESTING_INTS: Final = (
    0, 1, -1, 2, 7, 8, 255, 256, 2**16, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**53 + 1,
    2**63 - 1, 2**63, -(2**63), 2**64 - 1, 2**64, 2**100, -(2**64), 10**30,
)  # fmt: skip
HUGE_DIGITS: Final = (4301, 5000, 20_000)  # past CPython's 4,300-digit int/str conversion limit
DTYPE_NAMES: Final = (
    *(d.name for d in ALL_DTYPES), "f32", "F32 ", "", "F128", "U1", "Q4_0", "BOOL", "bool", "\x00",
)  # fmt: skip
NAMES: Final = ("", ".", "a..b", "a." * 40, "\x00", "é" * 3, "x" * 20_000, "__metadata__", "0")


def _interesting_int(rng: Rng) -> int:
    roll = rng.random()
    if roll < 0.1:
        return int(10 ** rng.choice(HUGE_DIGITS)) - rng.randrange(10)
    if roll < 0.3:
        return rng.randrange(-(2**64), 2**65)
    return rng.choice(INTERESTING_INTS)


# -- decoded trees (CBOR and JSON alike) ----------------------------------------------------------


def _nodes(tree: Any, limit: int = 400) -> list[tuple[Any, Any]]:
    """``(container, key)`` of up to `limit` places in `tree`, breadth first."""
    found: list[tuple[Any, Any]] = []
    queue: list[Any] = [tree]
    seen: set[int] = set()
    while queue and len(found) < limit:
        node = queue.pop(0)
        if id(node) in seen:
            continue
        seen.add(id(node))
        keys = list(node) if isinstance(node, dict) else range(len(node))
        for key in keys:
            found.append((node, key))
            if isinstance(node[key], (dict, list)):
                queue.append(node[key])
    return found


def _nest(value: Any, rng: Rng) -> Any:
    for _ in range(rng.choice((2, 50, 127, 129, 300, 1000))):
        value = [value] if rng.random() < 0.8 else {"k": value}
    return value


def _new_value(old: Any, rng: Rng, cbor: bool) -> Any:
    """A replacement for `old`: a near miss of its own kind, or something else entirely."""
    roll = rng.randrange(12)
    if roll < 3 and isinstance(old, bool):
        return not old
    if roll < 3 and isinstance(old, int):
        return rng.choice((old + rng.choice((-1, 1, 256)), _interesting_int(rng), -old))
    if roll < 3 and isinstance(old, str):
        return rng.choice((*DTYPE_NAMES, *NAMES, old + old, old[:-1]))
    if roll < 3 and isinstance(old, list):
        return rng.choice((old[:-1], [*old, _interesting_int(rng)], old * 40, old[::-1], []))
    choices: list[Any] = [
        _interesting_int(rng), rng.choice(DTYPE_NAMES), rng.choice(NAMES), None, True, False,
        [], {}, [_interesting_int(rng)] * rng.choice((1, 3, 65, 70)), 1.5, float("nan"),
        float("inf"), -0.0, 1e308, _nest(old, rng), {"Int": _interesting_int(rng)},
    ]  # fmt: skip
    if cbor:
        choices += [
            b"\xff" * 4,
            cbor2.CBORTag(rng.choice((28, 29, 2, 3, 24, 55799, 1)), old),
            cbor2.CBORTag(29, rng.choice((0, 1, 5, 2**40))),
            cbor2.undefined,
        ]
    return rng.choice(choices)


def _mutate_tree(tree: Any, rng: Rng, cbor: bool) -> None:
    """One to three edits of `tree`, in place."""
    for _ in range(rng.choice((1, 1, 2, 3))):
        places = _nodes(tree)
        if not places or rng.random() < 0.05:  # a new member, where there may be none
            added = _new_value({"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, rng, cbor)
            if isinstance(tree, dict):
                tree[rng.choice(NAMES)] = added
            else:
                tree.append(added)
            continue
        container, key = rng.choice(places)
        roll = rng.randrange(10)
        if roll == 0 and isinstance(container, dict):
            del container[key]
        elif roll == 0:
            container.pop(key)
        elif roll == 1 and isinstance(container, dict):  # a twin under a hostile name
            container[rng.choice(NAMES) + rng.choice(("", str(rng.randrange(9))))] = container[key]
        elif roll == 2 and cbor:  # shared (tag 28/29) or cyclic once value_sharing encodes it
            target = rng.choice((container, tree, container[key]))
            container[key] = target if isinstance(target, (dict, list)) else [target, target]
        elif roll == 3:
            other_container, other_key = rng.choice(places)
            container[key], other_container[other_key] = other_container[other_key], container[key]
        else:
            container[key] = _new_value(container[key], rng, cbor)


def _encode_cbor(tree: Any, rng: Rng) -> bytes:
    return bytes(cbor2.dumps(tree, value_sharing=rng.random() < 0.7))


# -- burnpack --------------------------------------------------------------------------------------


def mutate_burnpack(data: bytes, rng: Rng) -> bytes | None:
    """A burnpack file with its CBOR metadata edited and its size field and padding redone."""
    header = burnpack_layout.HEADER
    if len(data) < header.size:
        return None
    magic, version, metadata_size = header.unpack_from(data)
    try:
        tree = burnpack_layout.decode_metadata(data[header.size : header.size + metadata_size])
    except Exception:
        return None
    if not isinstance(tree, (dict, list)):
        tree = {"tensors": tree}
    tensor_bytes = data[burnpack_layout.data_start(metadata_size) :]
    _mutate_tree(tree, rng, cbor=True)
    try:
        metadata = _encode_cbor(tree, rng)
    except (ValueError, TypeError, RecursionError, cbor2.CBOREncodeError):
        return None
    if rng.random() < 0.05:
        version = rng.choice((0, 2, 0xFFFF))
    size = len(metadata) if rng.random() < 0.95 else rng.choice((0, len(metadata) + 1, 2**32 - 1))
    start = burnpack_layout.data_start(len(metadata))
    out = header.pack(magic, version, size) + metadata
    return out + bytes(start - len(out)) + tensor_bytes


# -- SafeTensors ---------------------------------------------------------------------------------

_SENTINEL: Final = "\u0001fuzz\u0001"
QUANTIZED_SHARE: Final = 0.5  # of a quantized file's mutations: its groups' parts, not its JSON


def _text_extras(text: str, rng: Rng) -> str:
    """Edits JSON values cannot express: huge digit strings, duplicate keys, deep brackets."""
    roll = rng.randrange(6)
    if roll == 0:  # the first number becomes a 5,000-digit one
        for index, char in enumerate(text):
            if char.isdigit():
                return text[:index] + "9" * rng.choice(HUGE_DIGITS) + text[index:]
    if roll == 1 and text.startswith("{") and '"' in text:  # a duplicate of the first member
        end = text.find("},") + 1 or text.find(",") or len(text) - 1
        return "{" + text[1:end] + "," + text[1:]
    if roll == 2:
        depth = rng.choice((100, 1000, 3000))
        return text.replace(_SENTINEL, "[" * depth + "]" * depth, 1)
    return text


def mutate_safetensors(data: bytes, rng: Rng) -> bytes | None:
    """A SafeTensors file with its JSON header edited and its u64 length redone; half the
    time, for a file holding quantized groups, their parts edited instead, the file laid out
    again so that it opens (`fuzz.quantized_mutators`)."""
    if len(data) < 8:
        return None
    if rng.random() < QUANTIZED_SHARE:
        edited = mutate_quantized(data, rng)
        if edited is not None:
            return edited
    (size,) = struct.unpack_from("<Q", data)
    try:
        tree = json.loads(data[8 : 8 + size])
    except (ValueError, RecursionError):
        return None
    if not isinstance(tree, (dict, list)):
        tree = {"t": tree}
    _mutate_tree(tree, rng, cbor=False)
    if rng.random() < 0.2:
        places = _nodes(tree)
        if places:
            container, key = rng.choice(places)
            container[key] = _SENTINEL
    try:
        text = json.dumps(tree, ensure_ascii=rng.random() < 0.5, allow_nan=True)
    except (ValueError, RecursionError):
        return None
    header = _text_extras(text, rng).replace(f'"{_SENTINEL}"', "[]").encode()
    if rng.random() < 0.5:
        header += b" " * (-len(header) % 8)
    length = len(header) if rng.random() < 0.95 else rng.choice((0, len(header) - 1, 2**63))
    return struct.pack("<Q", length) + header + data[8 + size :]


# -- pickles, opcode by opcode ---------------------------------------------------------------------


def _ops(stream: bytes) -> tuple[list[bytes], bytes] | None:
    """`stream` split into one chunk per opcode through the first STOP, and what follows."""
    offsets: list[int] = []
    try:
        for _op, _arg, offset in iter_ops(stream):
            offsets.append(offset)
    except Exception:
        return None
    end = offsets[-1] + 1
    bounds = [*offsets, end]
    return [stream[bounds[i] : bounds[i + 1]] for i in range(len(offsets))], stream[end:]


def _text(value: str) -> bytes:
    raw = value.encode("utf-8", "surrogatepass")
    return b"X" + struct.pack("<I", len(raw)) + raw


def _long(value: int) -> bytes:
    raw = value.to_bytes((value.bit_length() + 8) // 8 or 1, "little", signed=True)
    if len(raw) < 256:
        return b"\x8a" + bytes([len(raw)]) + raw
    return b"\x8b" + struct.pack("<i", len(raw)) + raw


GLOBALS: Final = (
    ("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_parameter"),
    ("torch._utils", "_rebuild_tensor"), ("torch._utils", "_rebuild_qtensor"),
    ("torch._tensor", "_rebuild_from_type_v2"), ("torch", "FloatStorage"),
    ("torch", "HalfStorage"), ("torch", "BoolStorage"), ("torch", "ComplexFloatStorage"),
    ("torch", "UntypedStorage"), ("torch", "Size"), ("torch", "device"), ("torch", "bfloat16"),
    ("torch", "float8_e4m3fn"), ("collections", "OrderedDict"), ("builtins", "set"),
    ("builtins", "bool"), ("builtins", "getattr"), ("numpy.core.multiarray", "_reconstruct"),
    ("numpy", "dtype"), ("numpy", "ndarray"), ("os", "system"), ("builtins", "eval"),
    ("__builtin__", "set"), ("torch.nn.modules.linear", "Linear"), ("", ""),
)  # fmt: skip


def _global(rng: Rng) -> bytes:
    module, name = rng.choice(GLOBALS)
    if rng.random() < 0.3:
        return _text(module) + _text(name) + b"\x93"  # STACK_GLOBAL
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _graph(rng: Rng) -> bytes:
    """A value whose object graph is cyclic or exponentially shared (memo slots 90000+)."""
    base = 90_000
    out = b"]r" + struct.pack("<I", base)  # EMPTY_LIST, LONG_BINPUT base
    if rng.random() < 0.4:  # the list holds itself
        return out + b"j" + struct.pack("<I", base) + b"a"
    # 2**levels visits for a walker that does not remember what it has seen; 64 levels take
    # any such walker to its node limit (the saved timeout crasher), so they are rare here.
    for level in range(rng.choice((8, 12, 16, 18)) if rng.random() < 0.95 else 64):
        get = b"j" + struct.pack("<I", base + level)
        out += b"0(" + get + get + b"lr" + struct.pack("<I", base + level + 1)
    return out


def _deep(rng: Rng) -> bytes:
    depth = rng.choice((200, 257, 1000, 3000))  # every limit is under 300 levels
    if rng.random() < 0.5:
        return b"]" * depth + b"a" * (depth - 1)  # lists in lists
    return b"(" * depth + b"t" * depth  # tuples in tuples, every mark open at once


def _value(rng: Rng) -> bytes:
    """Opcodes that push exactly one hostile value."""
    roll = rng.randrange(10)
    if roll == 0:
        return b"I" + b"9" * rng.choice(HUGE_DIGITS) + b"\n"
    if roll == 1:
        return b"L" + b"7" * rng.choice(HUGE_DIGITS) + b"L\n"
    if roll == 2:
        return _long(_interesting_int(rng) if rng.random() < 0.7 else 1 << 40_000)
    if roll == 3:
        return _graph(rng)
    if roll == 4:
        return _deep(rng)
    if roll == 5:
        return _text(rng.choice((*NAMES, *DTYPE_NAMES)))
    if roll == 6:
        return b"(" + b"K\x01" * rng.choice((0, 1, 65, 70, 5000)) + b"t"  # a shape
    if roll == 7:
        return _global(rng)
    if roll == 8:
        return rng.choice((b"N", b"\x88", b"\x89", b"G\x7f\xf8" + bytes(6), b"}", b"]", b")"))
    return b"J" + struct.pack("<i", rng.randrange(-(2**31), 2**31))


RAW_OPS: Final = (
    b"(", b"t", b"\x85", b"\x86", b"\x87", b")", b"]", b"}", b"a", b"e", b"s", b"u", b"R",
    b"b", b"\x81", b"\x92", b"\x93", b"Q", b"0", b"1", b"2", b"\x94", b"N", b"\x88", b"o",
    b"\x8f", b"\x90", b"\x91", b"\x97", b"\x98", b"h\x00", b"h\xff", b"q\x00", b"j\xff\xff\xff\x7f",
    b"\x82\x01", b"\x95\xff\xff\xff\xff\x00\x00\x00\x00", b"\x80\x05", b"P0\n", b".",
)  # fmt: skip
_PUSHES_ONE: Final = frozenset(b"NIJKLMXV\x8a\x8b\x8c\x88\x89GFh]j})S\x8e\x8dUTBC\x96\x8fcg")


def mutate_pickle(stream: bytes, rng: Rng) -> bytes | None:
    """`stream` (one pickle, maybe followed by other bytes) with one to three opcode edits."""
    split = _ops(stream)
    if split is None:
        return None
    chunks, tail = split
    if rng.random() < 0.5:  # frames are optional; edits would break their lengths
        chunks = [c for c in chunks if c[:1] != b"\x95"]
    for _ in range(rng.choice((1, 1, 2, 3))):
        index = rng.randrange(len(chunks))
        roll = rng.randrange(10)
        values = [i for i, c in enumerate(chunks) if c[0] in _PUSHES_ONE]
        if roll < 5 and values:
            chunks[rng.choice(values)] = _value(rng)
        elif roll == 5 and len(chunks) > 1:
            del chunks[index]
        elif roll == 6:
            chunks.insert(index, chunks[index])
        elif roll == 7:
            chunks.insert(index, rng.choice(RAW_OPS))
        elif roll == 8 and index + 1 < len(chunks):
            chunks[index], chunks[index + 1] = chunks[index + 1], chunks[index]
        else:
            chunks.insert(index, _value(rng) + b"0")  # a value pushed and popped
    return b"".join(chunks) + tail


# -- PyTorch containers ------------------------------------------------------------------------

COMPRESSIONS: Final = (
    zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA,
)  # fmt: skip


def _damage_member(out: bytearray, info: zipfile.ZipInfo, rng: Rng) -> None:
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    if info.compress_size:
        out[start + rng.randrange(info.compress_size)] ^= 1 << rng.randrange(8)


def _mutate_zip(data: bytes, rng: Rng) -> bytes | None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = [(info, archive.read(info)) for info in archive.infolist()]
    except Exception:
        return None
    pickles = [i for i, (info, _) in enumerate(members) if info.filename.endswith(".pkl")]
    roll = rng.randrange(10)
    if roll < 6 and pickles:
        index = rng.choice(pickles)
        mutated = mutate_pickle(members[index][1], rng)
        if mutated is not None:
            members[index] = (members[index][0], mutated)
    elif roll == 6 and members:
        index = rng.randrange(len(members))
        content = members[index][1]
        members[index] = (members[index][0], content[: rng.randrange(len(content) + 1)])
    elif roll == 7 and members:
        del members[rng.randrange(len(members))]
    return _write_zip(members, rng)


def _write_zip(members: list[tuple[zipfile.ZipInfo, bytes]], rng: Rng) -> bytes:
    buffer = io.BytesIO()
    compress_all = rng.random() < 0.3
    written: list[zipfile.ZipInfo] = []
    with zipfile.ZipFile(buffer, "w") as archive:
        for old, content in members:
            info = zipfile.ZipInfo(old.filename, date_time=old.date_time)
            recompress = compress_all or rng.random() < 0.2
            info.compress_type = rng.choice(COMPRESSIONS) if recompress else old.compress_type
            archive.writestr(info, content)
            written.append(info)
    out = bytearray(buffer.getvalue())
    compressed = [info for info in written if info.compress_type != zipfile.ZIP_STORED]
    if compressed and rng.random() < 0.25:
        _damage_member(out, rng.choice(compressed), rng)
    return bytes(out)


def _mutate_tar(data: bytes, rng: Rng) -> bytes | None:
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            members = []
            for info in archive.getmembers():
                file = archive.extractfile(info)
                members.append((info, file.read() if file else b""))
    except Exception:
        return None
    if not members:
        return None
    index = rng.randrange(len(members))
    info, content = members[index]
    mutated = mutate_pickle(content, rng)
    members[index] = (info, mutated if mutated is not None else content[: len(content) // 2])
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for old, content in members:
            info = tarfile.TarInfo(old.name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def _mutate_pickles(data: bytes, rng: Rng) -> bytes | None:
    """A legacy checkpoint (or a bare pickle): one of its leading pickles edited."""
    starts = [0]
    while len(starts) < 6:
        split = _ops(data[starts[-1] :])
        if split is None:
            break
        starts.append(len(data) - len(split[1]))
    if len(starts) == 1:
        return None
    index = rng.randrange(len(starts) - 1)
    start, end = starts[index], starts[index + 1]
    mutated = mutate_pickle(data[start:end], rng)
    return None if mutated is None else data[:start] + mutated + data[end:]


def mutate_pytorch(data: bytes, rng: Rng) -> bytes | None:
    """A PyTorch checkpoint of any layout, its pickle edited and its container rewritten."""
    if data[:4] == b"PK\x03\x04":
        return _mutate_zip(data, rng)
    if data[257:262] == b"ustar":
        return _mutate_tar(data, rng)
    return _mutate_pickles(data, rng)


MUTATORS: Final[dict[str, Callable[[bytes, Rng], bytes | None]]] = {
    "burnpack": mutate_burnpack,
    "safetensors": mutate_safetensors,
    "pytorch": mutate_pytorch,
    "gguf": mutate_gguf,
}
