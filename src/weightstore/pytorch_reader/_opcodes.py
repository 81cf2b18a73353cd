"""Every pickle opcode, protocols 0 to 5, as data: one `Opcode` row each, in the manner of
CPython's `pickletools`.

A row names the opcode, its byte, the `ArgReader` that decodes the bytes following it, the
protocol that introduced it, and its stack effect. The symbolic machine (`_machine`) pairs each
row with a handler; `iter_ops` walks a stream with the same table, so a disassembler and the
machine cannot disagree about where an opcode ends.

Argument readers read from a `Stream`, which checks every claimed length against the bytes that
are actually left *before* slicing: a 4 GiB BINUNICODE length in a 100-byte file fails with
`TruncatedError`, having allocated nothing.

    >>> [(op.name, arg) for op, arg, _ in iter_ops(b"\\x80\\x02K\\x07.")]
    [('PROTO', 2), ('BININT1', 7), ('STOP', None)]
"""

from __future__ import annotations

import codecs
import mmap
import struct
from collections.abc import Callable, Iterator
from typing import Any, Final

from weightstore.base._record import ValueRecord
from weightstore.errors import LimitExceeded, PickleError, TruncatedError
from weightstore.pytorch_reader._layout import MAX_DIGITS, MAX_LINE_SIZE, MAX_LONG_SIZE

__all__ = ["OPCODES", "OPCODES_BY_CODE", "ArgReader", "Buffer", "Opcode", "Stream", "iter_ops"]

_U2: Final = struct.Struct("<H")
_I4: Final = struct.Struct("<i")
_U4: Final = struct.Struct("<I")
_U8: Final = struct.Struct("<Q")
_F8_BE: Final = struct.Struct(">d")  # BINFLOAT is the one big-endian field in pickle


Buffer = bytes | mmap.mmap
"""What a pickle is read from: both slice to bytes and `find` without copying."""


class Stream:
    """A pickle's bytes and a read position. The only place that slices them.

    `data` is a `bytes` object or the mapped file itself (a legacy file's pickles are read in
    place); `end` stops the stream short of the buffer's end (a tar entry inside the file).
    """

    __slots__ = ("data", "end", "path", "pos")

    def __init__(
        self, data: Buffer, pos: int = 0, end: int | None = None, path: str | None = None
    ) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end
        self.path = path

    def read(self, size: int, what: str) -> bytes:
        """Exactly `size` bytes, or `TruncatedError` naming `what` before anything is copied."""
        left = self.end - self.pos
        if size < 0 or size > left:
            raise TruncatedError(f"{what} at byte {self.pos:,}", size, left, path=self.path)
        start = self.pos
        self.pos = start + size
        return self.data[start : self.pos]

    def read_line(self, what: str, limit: int | None = None) -> bytes:
        """The bytes up to the next newline (dropped); `limit` caps lines holding numbers."""
        start = self.pos
        stop = self.end if limit is None else min(self.end, start + limit + 1)
        found = self.data.find(b"\n", start, stop)
        if found < 0:
            if stop < self.end:
                raise LimitExceeded(f"{what} line length", stop - start, limit or 0, path=self.path)
            raise TruncatedError(
                f"{what} at byte {start:,}", stop - start + 1, stop - start, path=self.path
            )
        self.pos = found + 1
        return self.data[start:found]

    def malformed(self, detail: str) -> PickleError:
        """A `PickleError` for `detail` at the current position (to raise, not raised)."""
        return PickleError(detail, offset=self.pos, path=self.path)


# -- argument readers ---------------------------------------------------------------------------


class ArgReader(ValueRecord):
    """How to read one kind of opcode argument; `size` is the fixed width, or ``None``."""

    name: str
    size: int | None
    read: Callable[[Stream], Any]
    doc: str

    def __init__(
        self, name: str, size: int | None, read: Callable[[Stream], Any], doc: str
    ) -> None:
        self._set("name", name)
        self._set("size", size)
        self._set("read", read)
        self._set("doc", doc)


def _fixed(layout: struct.Struct, what: str) -> Callable[[Stream], Any]:
    def read(stream: Stream) -> Any:
        return layout.unpack(stream.read(layout.size, what))[0]

    return read


def _read_uint1(stream: Stream) -> int:
    """`Stream.read` of one byte, inlined: BINPUT and BINGET make this the hottest reader."""
    pos = stream.pos
    if pos >= stream.end:
        raise TruncatedError(f"uint1 at byte {pos:,}", 1, stream.end - pos, path=stream.path)
    stream.pos = pos + 1
    return stream.data[pos]


def _counted(width: Callable[[Stream], int], what: str) -> Callable[[Stream], bytes]:
    def read(stream: Stream) -> bytes:
        size = width(stream)
        if size < 0:
            raise stream.malformed(f"{what} has negative length {size:,}")
        return stream.read(size, what)

    return read


_read_uint2 = _fixed(_U2, "uint2")
_read_int4 = _fixed(_I4, "int4")
_read_uint4 = _fixed(_U4, "uint4")
_read_uint8 = _fixed(_U8, "uint8")
_bytes1 = _counted(_read_uint1, "bytes1")
_bytes4 = _counted(_read_uint4, "bytes4")
_bytes8 = _counted(_read_uint8, "bytes8")
_string4 = _counted(_read_int4, "string4")


def _py2_str(raw: bytes) -> str | bytes:
    """A Python 2 ``str``: text when it is ASCII (what `torch.load` decodes), else the bytes,
    as ``encoding="bytes"`` gives (NumPy's raw array data arrives this way)."""
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        return raw


def _unicode(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogatepass")


def _long(raw: bytes) -> int:
    return int.from_bytes(raw, "little", signed=True)


def _read_long4(stream: Stream) -> int:
    """A LONG4 integer, refused past MAX_LONG_SIZE bytes: longer ints are too long for CPython
    to print, so every message or listing that showed one would fail."""
    size = _read_int4(stream)
    if size > MAX_LONG_SIZE:
        raise LimitExceeded("bytes of a LONG4 integer", size, MAX_LONG_SIZE, path=stream.path)
    if size < 0:
        raise stream.malformed(f"long4 has negative length {size:,}")
    return _long(stream.read(size, "long4"))


def _decimal(stream: Stream, what: str) -> bytes:
    line = stream.read_line(what, MAX_LINE_SIZE)
    if len(line) > MAX_DIGITS:  # int() of a long decimal string is quadratic on Python 3.10
        raise LimitExceeded(f"{what} digits", len(line), MAX_DIGITS, path=stream.path)
    return line


def _read_decimalnl_short(stream: Stream) -> int | bool:
    line = _decimal(stream, "decimal")
    if line in (b"00", b"01"):  # protocol 0 spells False and True this way
        return line == b"01"
    return int(line)


def _read_decimalnl_long(stream: Stream) -> int:
    return int(_decimal(stream, "decimal long").removesuffix(b"L"))


def _read_floatnl(stream: Stream) -> float:
    return float(stream.read_line("float", MAX_LINE_SIZE))


def _read_stringnl(stream: Stream) -> str | bytes:
    line = stream.read_line("quoted string")
    if len(line) < 2 or line[0] != line[-1] or line[:1] not in (b"'", b'"'):
        raise stream.malformed("STRING argument is not quoted")
    return _py2_str(codecs.escape_decode(line[1:-1])[0])


def _read_noescape(stream: Stream) -> str:
    return _unicode(stream.read_line("name", MAX_LINE_SIZE))


def _read_noescape_pair(stream: Stream) -> tuple[str, str]:
    return _read_noescape(stream), _read_noescape(stream)


def _read_unicodestringnl(stream: Stream) -> str:
    return str(stream.read_line("unicode string"), "raw-unicode-escape")


def _reader(name: str, size: int | None, read: Callable[[Stream], Any], doc: str) -> ArgReader:
    return ArgReader(name, size, read, doc)


# fmt: off
UINT1 = _reader("uint1", 1, _read_uint1, "one unsigned byte")
UINT2 = _reader("uint2", 2, _read_uint2, "u16, little-endian")
INT4 = _reader("int4", 4, _read_int4, "i32, little-endian")
UINT4 = _reader("uint4", 4, _read_uint4, "u32, little-endian")
UINT8 = _reader("uint8", 8, _read_uint8, "u64, little-endian")
FLOAT8 = _reader("float8", 8, _fixed(_F8_BE, "float8"), "f64, big-endian")
LONG1 = _reader("long1", None, lambda s: _long(_bytes1(s)), "u8 length, two's complement LE")
LONG4 = _reader("long4", None, _read_long4, "i32 length (<= MAX_LONG_SIZE), two's complement")
STRING1 = _reader("string1", None, lambda s: _py2_str(_bytes1(s)), "u8 length, py2 str")
STRING4 = _reader("string4", None, lambda s: _py2_str(_string4(s)), "i32 length, py2 str")
BYTES1 = _reader("bytes1", None, _bytes1, "u8 length, bytes")
BYTES4 = _reader("bytes4", None, _bytes4, "u32 length, bytes")
BYTES8 = _reader("bytes8", None, _bytes8, "u64 length, bytes")
BYTEARRAY8 = _reader("bytearray8", None, lambda s: bytearray(_bytes8(s)), "u64 length")
UNICODE1 = _reader("unicodestring1", None, lambda s: _unicode(_bytes1(s)), "u8 length, UTF-8")
UNICODE4 = _reader("unicodestring4", None, lambda s: _unicode(_bytes4(s)), "u32 length, UTF-8")
UNICODE8 = _reader("unicodestring8", None, lambda s: _unicode(_bytes8(s)), "u64 length, UTF-8")
DECIMALNL_SHORT = _reader("decimalnl_short", None, _read_decimalnl_short, "int line; 00/01 bool")
DECIMALNL_LONG = _reader("decimalnl_long", None, _read_decimalnl_long, "int line, trailing L")
FLOATNL = _reader("floatnl", None, _read_floatnl, "float line, repr form")
STRINGNL = _reader("stringnl", None, _read_stringnl, "quoted, escaped string line")
NOESCAPE = _reader("stringnl_noescape", None, _read_noescape, "UTF-8 line")
NOESCAPE_PAIR = _reader("stringnl_noescape_pair", None, _read_noescape_pair, "two UTF-8 lines")
UNICODENL = _reader("unicodestringnl", None, _read_unicodestringnl, "raw-unicode-escape line")
# fmt: on


# -- the table ----------------------------------------------------------------------------------


class Opcode(ValueRecord):
    """One pickle opcode: name, byte, argument, the protocol that added it, stack effect."""

    name: str
    code: int
    arg: ArgReader | None
    proto: int
    effect: str

    def __init__(
        self, name: str, code: int, arg: ArgReader | None, proto: int, effect: str
    ) -> None:
        self._set("name", name)
        self._set("code", code)
        self._set("arg", arg)
        self._set("proto", proto)
        self._set("effect", effect)


def _op(name: str, code: bytes, arg: ArgReader | None, proto: int, effect: str) -> Opcode:
    return Opcode(name, code[0], arg, proto, effect)


# fmt: off
OPCODES: Final[tuple[Opcode, ...]] = (
    # integers, floats, constants
    _op("INT",              b"I",    DECIMALNL_SHORT, 0, "-> int or bool"),
    _op("BININT",           b"J",    INT4,            1, "-> int"),
    _op("BININT1",          b"K",    UINT1,           1, "-> int"),
    _op("BININT2",          b"M",    UINT2,           1, "-> int"),
    _op("LONG",             b"L",    DECIMALNL_LONG,  0, "-> int"),
    _op("LONG1",            b"\x8a", LONG1,           2, "-> int"),
    _op("LONG4",            b"\x8b", LONG4,           2, "-> int"),
    _op("FLOAT",            b"F",    FLOATNL,         0, "-> float"),
    _op("BINFLOAT",         b"G",    FLOAT8,          1, "-> float"),
    _op("NONE",             b"N",    None,            0, "-> None"),
    _op("NEWTRUE",          b"\x88", None,            2, "-> True"),
    _op("NEWFALSE",         b"\x89", None,            2, "-> False"),
    # strings and bytes
    _op("STRING",           b"S",    STRINGNL,        0, "-> str or bytes"),
    _op("BINSTRING",        b"T",    STRING4,         1, "-> str or bytes"),
    _op("SHORT_BINSTRING",  b"U",    STRING1,         1, "-> str or bytes"),
    _op("BINBYTES",         b"B",    BYTES4,          3, "-> bytes"),
    _op("SHORT_BINBYTES",   b"C",    BYTES1,          3, "-> bytes"),
    _op("BINBYTES8",        b"\x8e", BYTES8,          4, "-> bytes"),
    _op("BYTEARRAY8",       b"\x96", BYTEARRAY8,      5, "-> bytearray"),
    _op("NEXT_BUFFER",      b"\x97", None,            5, "-> out-of-band buffer"),
    _op("READONLY_BUFFER",  b"\x98", None,            5, "buffer -> read-only buffer"),
    _op("UNICODE",          b"V",    UNICODENL,       0, "-> str"),
    _op("SHORT_BINUNICODE", b"\x8c", UNICODE1,        4, "-> str"),
    _op("BINUNICODE",       b"X",    UNICODE4,        1, "-> str"),
    _op("BINUNICODE8",      b"\x8d", UNICODE8,        4, "-> str"),
    # containers
    _op("EMPTY_LIST",       b"]",    None,            1, "-> list"),
    _op("APPEND",           b"a",    None,            0, "list, item -> list"),
    _op("APPENDS",          b"e",    None,            1, "list, mark, items -> list"),
    _op("LIST",             b"l",    None,            0, "mark, items -> list"),
    _op("EMPTY_TUPLE",      b")",    None,            1, "-> tuple"),
    _op("TUPLE",            b"t",    None,            0, "mark, items -> tuple"),
    _op("TUPLE1",           b"\x85", None,            2, "a -> (a,)"),
    _op("TUPLE2",           b"\x86", None,            2, "a, b -> (a, b)"),
    _op("TUPLE3",           b"\x87", None,            2, "a, b, c -> (a, b, c)"),
    _op("EMPTY_DICT",       b"}",    None,            1, "-> dict"),
    _op("DICT",             b"d",    None,            0, "mark, k, v, ... -> dict"),
    _op("SETITEM",          b"s",    None,            0, "dict, k, v -> dict"),
    _op("SETITEMS",         b"u",    None,            1, "dict, mark, k, v, ... -> dict"),
    _op("EMPTY_SET",        b"\x8f", None,            4, "-> set"),
    _op("ADDITEMS",         b"\x90", None,            4, "set, mark, items -> set"),
    _op("FROZENSET",        b"\x91", None,            4, "mark, items -> frozenset"),
    # stack and memo
    _op("POP",              b"0",    None,            0, "item ->"),
    _op("DUP",              b"2",    None,            0, "item -> item, item"),
    _op("MARK",             b"(",    None,            0, "-> mark"),
    _op("POP_MARK",         b"1",    None,            1, "mark, items ->"),
    _op("GET",              b"g",    DECIMALNL_SHORT, 0, "-> memo[n]"),
    _op("BINGET",           b"h",    UINT1,           1, "-> memo[n]"),
    _op("LONG_BINGET",      b"j",    UINT4,           1, "-> memo[n]"),
    _op("PUT",              b"p",    DECIMALNL_SHORT, 0, "item -> item; memo[n] = item"),
    _op("BINPUT",           b"q",    UINT1,           1, "item -> item; memo[n] = item"),
    _op("LONG_BINPUT",      b"r",    UINT4,           1, "item -> item; memo[n] = item"),
    _op("MEMOIZE",          b"\x94", None,            4, "item -> item; memo[len] = item"),
    # globals, extension codes, calls and object state
    _op("EXT1",             b"\x82", UINT1,           2, "-> global registered as code n"),
    _op("EXT2",             b"\x83", UINT2,           2, "-> global registered as code n"),
    _op("EXT4",             b"\x84", INT4,            2, "-> global registered as code n"),
    _op("GLOBAL",           b"c",    NOESCAPE_PAIR,   0, "-> module.name"),
    _op("STACK_GLOBAL",     b"\x93", None,            4, "module, name -> module.name"),
    _op("REDUCE",           b"R",    None,            0, "callable, args -> callable(*args)"),
    _op("BUILD",            b"b",    None,            0, "obj, state -> obj with state"),
    _op("INST",             b"i",    NOESCAPE_PAIR,   0, "mark, args -> module.name(*args)"),
    _op("OBJ",              b"o",    None,            1, "mark, cls, args -> cls(*args)"),
    _op("NEWOBJ",           b"\x81", None,            2, "cls, args -> cls.__new__(cls, *args)"),
    _op("NEWOBJ_EX",        b"\x92", None,            4, "cls, args, kwargs -> cls.__new__(...)"),
    # framing, persistence, end
    _op("PROTO",            b"\x80", UINT1,           2, "-> ; declares the protocol"),
    _op("FRAME",            b"\x95", UINT8,           4, "-> ; the next n bytes are one frame"),
    _op("PERSID",           b"P",    NOESCAPE,        0, "-> persistent_load(id)"),
    _op("BINPERSID",        b"Q",    None,            1, "id -> persistent_load(id)"),
    _op("STOP",             b".",    None,            0, "item -> ; the pickle's value"),
)
# fmt: on
"""Every pickle opcode, protocols 0 to 5, one record each: the table the machine, the skipper
and the disassembler (`iter_ops`) all read."""


def _index(table: tuple[Opcode, ...]) -> dict[int, Opcode]:
    """The table keyed by byte; refuses a table with a repeated name or byte."""
    by_code: dict[int, Opcode] = {}
    names: set[str] = set()
    for op in table:
        if op.code in by_code or op.name in names:
            raise RuntimeError(f"opcode table repeats {op.name} or byte {op.code:#04x}")
        by_code[op.code] = op
        names.add(op.name)
    return by_code


OPCODES_BY_CODE: Final = _index(OPCODES)
"""`OPCODES` by their byte; building it refuses a table that repeats a name or byte."""


def iter_ops(data: Buffer, pos: int = 0) -> Iterator[tuple[Opcode, Any, int]]:
    """Each ``(opcode, argument, offset)`` from `pos` through the first STOP, reading the
    arguments but running nothing.

    Raises:
        PickleError: a byte that is no opcode. TruncatedError: the stream ends first.
    """
    stream = Stream(data, pos)
    while True:
        offset = stream.pos
        code = stream.read(1, "opcode")[0]
        op = OPCODES_BY_CODE.get(code)
        if op is None:
            raise PickleError(f"byte {code:#04x} is not a pickle opcode", offset=offset)
        yield op, (op.arg.read(stream) if op.arg else None), offset
        if op.name == "STOP":
            return
