"""The symbolic pickle machine: runs protocols 0 to 5 without importing or calling anything.

It keeps pickle's own model (a stack, a stack of marks, a memo) and differs in two ways:

* Globals resolve through `_globals.resolve_global`, never `importlib`, and "calling" one is
  `_globals.call_global`, which runs only our stand-ins. A hostile ``os.system`` is recorded as
  an `InertObject`; nothing runs.
* Every resource is capped (`Limits`): stack size, mark depth, memo entries, container sizes,
  total work. Memo entries are shared references, as in CPython, so a memo bomb costs nothing
  here; the work it would cause later (hashing a deep tuple, walking shared lists) is charged
  against the node budget where it happens.

Dispatch is a table, ``HANDLERS``, with one small function per opcode of `_opcodes.OPCODES`;
the two tables are checked against each other at import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, cast

from weightstore.errors import (
    LimitExceeded,
    PickleError,
    TruncatedError,
    UnsupportedVersionError,
    WeightstoreError,
)
from weightstore.pytorch_reader._globals import (
    build_state,
    call_global,
    new_object,
    resolve_global,
)
from weightstore.pytorch_reader._layout import (
    BUILT_SIZE_SLACK,
    DEFAULT_LIMITS,
    HIGHEST_PICKLE_PROTOCOL,
    MAX_BUILT_RATIO,
    MAX_HASH_SHARERS,
    Limits,
)
from weightstore.pytorch_reader._objects import (
    Context,
    GlobalRef,
    InertObject,
    Malformed,
    Pending,
    clip,
    shown_int,
)
from weightstore.pytorch_reader._opcodes import OPCODES, Buffer, Opcode, Stream

__all__ = ["HANDLERS", "Machine", "run_pickle"]

PersistentLoad = Callable[[object], object]
Handler = Callable[["Machine", object], None]
Reader = Callable[[Stream], object]

_NOTHING: Final = object()  # `result` until STOP runs
_HASH_MODULUS: Final = 2**61 - 1  # ints below it in size hash to themselves: never collide
_DETAIL_SIZE: Final = 500  # characters of a refusal's text; its parts are bounded already


def _no_persistent_ids(pid: object) -> object:
    raise Malformed("a persistent id, but this stream has no storages to resolve it")


class Machine(Context):
    """One pickle stream, run symbolically.

    Args:
        stream: the bytes, positioned at the first opcode.
        limits: resource caps.
        persistent_load: resolves PERSID/BINPERSID ids (storages); the layout provides it.
    """

    def __init__(
        self,
        stream: Stream,
        *,
        limits: Limits = DEFAULT_LIMITS,
        persistent_load: PersistentLoad = _no_persistent_ids,
    ) -> None:
        self.stream = stream
        self._limits = limits
        self._persistent_load = persistent_load
        self.stack: list[object] = []
        self.metastack: list[list[object]] = []
        self.stacked = 0  # items held in `metastack`
        self.memo: dict[int, object] = {}
        self.protocol = 0
        self.nodes = 0
        self.result: object = _NOTHING
        self._hash_sharers: dict[int, list[object]] = {}
        self.built = 0  # bytes the stand-ins built
        self._built_limit = MAX_BUILT_RATIO * (stream.end - stream.pos) + BUILT_SIZE_SLACK

    # -- the Context the stand-ins see -----------------------------------------------------------

    @property
    def path(self) -> str | None:
        return self.stream.path

    @property
    def limits(self) -> Limits:
        return self._limits

    def persistent_load(self, pid: object) -> object:
        return self._persistent_load(pid)

    def call(self, callee: object, args: tuple[object, ...]) -> object:
        return call_global(self, callee, args)

    def check_key(self, key: object) -> None:
        """Refuse a dict key or set item that is unhashable, nests too deep to hash safely
        (CPython hashes tuples recursively in C), or shares its hash with too many others."""
        kind = type(key)
        if kind is str or kind is bytes:
            return  # hashed with a per-process random seed
        if kind is int and -_HASH_MODULUS < key < _HASH_MODULUS:  # type: ignore[operator]
            return
        if kind is tuple or kind is frozenset:
            self._charge_nested(key)  # type: ignore[arg-type]
        try:
            digest = hash(key)
        except TypeError:
            raise Malformed(f"a {kind.__name__} cannot be a dict key or set item") from None
        sharers = self._hash_sharers.setdefault(digest, [])
        if key not in sharers:
            sharers.append(key)
            if len(sharers) > MAX_HASH_SHARERS:
                raise LimitExceeded(
                    "count of dict keys sharing one hash value",
                    len(sharers),
                    MAX_HASH_SHARERS,
                    path=self.path,
                )

    def _charge_nested(self, key: tuple[object, ...] | frozenset[object]) -> None:
        todo: list[tuple[tuple[object, ...] | frozenset[object], int]] = [(key, 1)]
        while todo:
            value, depth = todo.pop()
            if depth > self._limits.max_depth:
                raise LimitExceeded(
                    "nesting depth of a dict key", depth, self._limits.max_depth, path=self.path
                )
            self.spend(len(value))
            todo.extend((item, depth + 1) for item in value if type(item) in (tuple, frozenset))  # type: ignore[misc]

    def allocate(self, size: int) -> None:
        """Charge `size` bytes about to be built against MAX_BUILT_RATIO times the pickle."""
        self.built += size
        if self.built > self._built_limit:
            raise LimitExceeded(
                "bytes built by constructors (arrays, bytes, strings)",
                self.built,
                self._built_limit,
                path=self.path,
            )

    def spend(self, nodes: int) -> None:
        """Charge `nodes` units of work against the limit."""
        self.nodes += nodes
        if self.nodes > self._limits.max_nodes:
            raise LimitExceeded(
                "work (opcodes run and key elements hashed)",
                self.nodes,
                self._limits.max_nodes,
                path=self.path,
            )

    # -- running ---------------------------------------------------------------------------------

    def run(self) -> object:
        """Run to STOP and return the pickled value; `stream.pos` is then just past STOP.

        Raises:
            PickleError: a malformed stream. TruncatedError: it ends before STOP.
            LimitExceeded: it asks for more than `limits` allow.
        """
        stream, data, table = self.stream, self.stream.data, _DISPATCH_TABLE
        max_nodes, max_stack = self._limits.max_nodes, self._limits.max_stack_size
        op: Opcode | None = None
        offset = stream.pos
        try:
            while self.result is _NOTHING:  # the hot loop: no calls beyond the handler's
                offset = stream.pos
                if offset >= stream.end:
                    raise TruncatedError(
                        "pickle stream (it has no STOP opcode)", 1, 0, path=self.path
                    )
                entry = table[data[offset]]
                if entry is None:
                    detail = f"byte {data[offset]:#04x} is not a pickle opcode"
                    raise PickleError(detail, offset=offset, path=self.path)
                op, read, handler = entry
                stream.pos = offset + 1
                handler(self, None if read is None else read(stream))
                self.nodes += 1
                if self.nodes > max_nodes or len(self.stack) + self.stacked > max_stack:
                    self._check_limits()
        except WeightstoreError:
            raise
        except Malformed as err:
            detail = clip(str(err), _DETAIL_SIZE)
            raise PickleError(detail, offset=offset, opcode=_name(op), path=self.path) from None
        except (ArithmeticError, LookupError, TypeError, ValueError, RecursionError) as err:
            # Python's own text may quote the file whole: float() of a 64 KiB line does.
            detail = clip(f"{type(err).__name__}: {err}", _DETAIL_SIZE)
            raise PickleError(detail, offset=offset, opcode=_name(op), path=self.path) from err
        return self.result

    def _check_limits(self) -> None:
        self.spend(0)
        size, limit = len(self.stack) + self.stacked, self._limits.max_stack_size
        if size > limit:
            raise LimitExceeded("pickle stack size", size, limit, path=self.path)

    # -- stack helpers used by the handlers ------------------------------------------------------

    def pop(self) -> object:
        """Remove and return the top of the stack; `Malformed` when it is empty."""
        if not self.stack:
            raise Malformed("the stack is empty")
        return self.stack.pop()

    def top(self) -> object:
        """The top of the stack, left in place; `Malformed` when it is empty."""
        if not self.stack:
            raise Malformed("the stack is empty")
        return self.stack[-1]

    def pop_mark(self) -> list[object]:
        """The items pushed since the last MARK, which is removed with them."""
        if not self.metastack:
            raise Malformed("no MARK to pop back to")
        items = self.stack
        self.stack = self.metastack.pop()
        self.stacked -= len(self.stack)
        return self.sized(items)

    def sized(self, items: list[object], extra: int = 0) -> list[object]:
        """`items`, refused when `extra` more would make a container over the limit."""
        if len(items) + extra > self._limits.max_container_size:
            raise LimitExceeded(
                "container size",
                len(items) + extra,
                self._limits.max_container_size,
                path=self.path,
            )
        return items


def _name(op: Opcode | None) -> str | None:
    return None if op is None else op.name


def run_pickle(
    data: Buffer,
    pos: int = 0,
    end: int | None = None,
    *,
    path: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
    persistent_load: PersistentLoad = _no_persistent_ids,
) -> tuple[object, int, int]:
    """Run the pickle at `pos` in `data` (up to `end`); returns (value, offset past its STOP,
    protocol)."""
    machine = Machine(Stream(data, pos, end, path), limits=limits, persistent_load=persistent_load)
    value = machine.run()
    return value, machine.stream.pos, machine.protocol


# -- handlers, one per opcode -------------------------------------------------------------------


def _push_arg(m: Machine, arg: object) -> None:
    m.stack.append(arg)


def _push_constant(value: object) -> Handler:
    def push(m: Machine, arg: object) -> None:
        m.stack.append(value)

    return push


def _push_empty(factory: Callable[[], object]) -> Handler:
    def push(m: Machine, arg: object) -> None:
        m.stack.append(factory())

    return push


def _next_buffer(m: Machine, arg: object) -> None:
    raise Malformed("the stream wants an out-of-band buffer, and a file carries none")


def _readonly_buffer(m: Machine, arg: object) -> None:
    top = m.top()
    if isinstance(top, bytearray):
        m.allocate(len(top))
        m.stack[-1] = bytes(top)


def _append_to(m: Machine, target: object, items: list[object]) -> None:
    if isinstance(target, list):
        target.extend(m.sized(items, len(target)))
    elif isinstance(target, InertObject):
        target.listitems.extend(m.sized(items, len(target.listitems)))
    else:
        raise Malformed(f"cannot append to a {type(target).__name__}")


def _append(m: Machine, arg: object) -> None:
    value = m.pop()
    _append_to(m, m.top(), [value])


def _appends(m: Machine, arg: object) -> None:
    items = m.pop_mark()
    _append_to(m, m.top(), items)


def _pairs(items: list[object]) -> list[tuple[object, object]]:
    if len(items) % 2:
        raise Malformed(f"an odd number of items ({len(items):,}) for keys and values")
    return list(zip(items[::2], items[1::2], strict=True))


def _set_items(m: Machine, target: object, pairs: list[tuple[object, object]]) -> None:
    if isinstance(target, dict):
        m.sized([], len(target) + len(pairs))
    elif isinstance(target, InertObject):
        target = target.dictitems
        m.sized([], len(target) + len(pairs))
    else:
        raise Malformed(f"cannot set items on a {type(target).__name__}")
    for key, value in pairs:
        m.check_key(key)
        target[key] = value


def _setitem(m: Machine, arg: object) -> None:
    value = m.pop()
    key = m.pop()
    _set_items(m, m.top(), [(key, value)])


def _setitems(m: Machine, arg: object) -> None:
    pairs = _pairs(m.pop_mark())
    _set_items(m, m.top(), pairs)


def _dict(m: Machine, arg: object) -> None:
    target: dict[object, object] = {}
    _set_items(m, target, _pairs(m.pop_mark()))
    m.stack.append(target)


def _additems(m: Machine, arg: object) -> None:
    items = m.pop_mark()
    target = m.top()
    if isinstance(target, InertObject):
        target.listitems.extend(m.sized(items, len(target.listitems)))
        return
    if not isinstance(target, set):
        raise Malformed(f"cannot add items to a {type(target).__name__}")
    m.sized(items, len(target))
    for item in items:
        m.check_key(item)
        target.add(item)


def _frozenset(m: Machine, arg: object) -> None:
    items = m.pop_mark()
    for item in items:
        m.check_key(item)
    m.stack.append(frozenset(items))


def _list(m: Machine, arg: object) -> None:
    items = m.pop_mark()  # first: it swaps `m.stack` for the list below the mark
    m.stack.append(items)


def _tuple(m: Machine, arg: object) -> None:
    items = tuple(m.pop_mark())
    m.stack.append(items)


def _tuple_of(count: int) -> Handler:
    def build(m: Machine, arg: object) -> None:
        if len(m.stack) < count:
            raise Malformed(f"the stack holds {len(m.stack)} items, TUPLE{count} needs {count}")
        items = tuple(m.stack[-count:])
        del m.stack[-count:]
        m.stack.append(items)

    return build


def _pop(m: Machine, arg: object) -> None:
    if m.stack:
        m.stack.pop()
    else:
        m.pop_mark()  # CPython: POP on an empty stack discards the mark above it


def _dup(m: Machine, arg: object) -> None:
    m.stack.append(m.top())


def _mark(m: Machine, arg: object) -> None:
    if len(m.metastack) >= m._limits.max_depth:
        raise LimitExceeded(
            "open MARK depth", len(m.metastack) + 1, m._limits.max_depth, path=m.path
        )
    m.metastack.append(m.stack)
    m.stacked += len(m.stack)
    m.stack = []


def _pop_mark(m: Machine, arg: object) -> None:
    m.pop_mark()


def _get(m: Machine, arg: object) -> None:
    index = int(arg)  # type: ignore[call-overload]  # GET's text may read 00/01 as a bool
    if index not in m.memo:
        raise Malformed(f"memo entry {shown_int(index)} was never stored")
    m.stack.append(m.memo[index])


def _binget(m: Machine, arg: object) -> None:
    """BINGET and LONG_BINGET: `_get` for an index already read as an int."""
    value = m.memo.get(arg, _NOTHING)  # type: ignore[call-overload]
    if value is _NOTHING:
        raise Malformed(f"memo entry {shown_int(arg)} was never stored")  # type: ignore[arg-type]
    m.stack.append(value)


def _put(m: Machine, arg: object) -> None:
    index = int(arg)  # type: ignore[call-overload]
    if index < 0:
        raise Malformed(f"memo index {shown_int(index)} is negative")
    memo = m.memo
    if index not in memo and len(memo) >= m._limits.max_memo_size:
        raise LimitExceeded("memo size", len(memo) + 1, m._limits.max_memo_size, path=m.path)
    if not m.stack:
        raise Malformed("the stack is empty")
    value = m.stack[-1]
    memo[index] = value
    if isinstance(value, Pending):
        value.memo_keys.append(index)


def _memoize(m: Machine, arg: object) -> None:
    _put(m, len(m.memo))


def _ext(m: Machine, arg: object) -> None:
    """Extension codes name globals through copyreg's registry, which is empty unless a
    program fills it; we record the code and resolve nothing."""
    m.stack.append(GlobalRef("copyreg.extension_registry", str(arg)))


def _global(m: Machine, arg: object) -> None:
    module, name = cast(tuple[str, str], arg)
    m.stack.append(resolve_global(module, name))


def _stack_global(m: Machine, arg: object) -> None:
    name = m.pop()
    module = m.pop()
    if not isinstance(module, str) or not isinstance(name, str):
        raise Malformed("STACK_GLOBAL needs a module name and a global name, both str")
    m.stack.append(resolve_global(module, name))


def _reduce(m: Machine, arg: object) -> None:
    args = m.pop()
    callee = m.pop()
    m.stack.append(call_global(m, callee, args))


def _build(m: Machine, arg: object) -> None:
    state = m.pop()
    target = m.top()
    built = build_state(m, target, state)
    if built is not target:  # a Pending value finished: its memo slots follow it
        m.stack[-1] = built
        for index in target.memo_keys if isinstance(target, Pending) else ():
            if m.memo.get(index) is target:
                m.memo[index] = built


def _inst(m: Machine, arg: object) -> None:
    module, name = cast(tuple[str, str], arg)
    args = tuple(m.pop_mark())
    m.stack.append(call_global(m, resolve_global(module, name), args))


def _obj(m: Machine, arg: object) -> None:
    items = m.pop_mark()
    if not items:
        raise Malformed("OBJ needs a class after its MARK")
    m.stack.append(call_global(m, items[0], tuple(items[1:])))


def _newobj(m: Machine, arg: object) -> None:
    args = m.pop()
    cls = m.pop()
    m.stack.append(new_object(m, cls, args, {}))


def _newobj_ex(m: Machine, arg: object) -> None:
    kwargs = m.pop()
    args = m.pop()
    cls = m.pop()
    m.stack.append(new_object(m, cls, args, kwargs))


def _proto(m: Machine, arg: object) -> None:
    version = int(arg)  # type: ignore[call-overload]
    if version > HIGHEST_PICKLE_PROTOCOL:
        raise UnsupportedVersionError(version, HIGHEST_PICKLE_PROTOCOL, path=m.path)
    m.protocol = version


def _frame(m: Machine, arg: object) -> None:
    size, left = cast(int, arg), m.stream.end - m.stream.pos
    if size > left:
        raise TruncatedError(f"pickle frame at byte {m.stream.pos:,}", size, left, path=m.path)


def _persid(m: Machine, arg: object) -> None:
    m.stack.append(m.persistent_load(arg))


def _binpersid(m: Machine, arg: object) -> None:
    m.stack.append(m.persistent_load(m.pop()))


def _stop(m: Machine, arg: object) -> None:
    m.result = m.pop()


_CONSTANT_PUSHES: Final = (
    "INT",
    "BININT",
    "BININT1",
    "BININT2",
    "LONG",
    "LONG1",
    "LONG4",
    "FLOAT",
    "BINFLOAT",
    "STRING",
    "BINSTRING",
    "SHORT_BINSTRING",
    "BINBYTES",
    "SHORT_BINBYTES",
    "BINBYTES8",
    "BYTEARRAY8",
    "UNICODE",
    "SHORT_BINUNICODE",
    "BINUNICODE",
    "BINUNICODE8",
)

HANDLERS: Final[dict[str, Handler]] = {
    **{name: _push_arg for name in _CONSTANT_PUSHES},
    "NONE": _push_constant(None),
    "NEWTRUE": _push_constant(True),
    "NEWFALSE": _push_constant(False),
    "NEXT_BUFFER": _next_buffer,
    "READONLY_BUFFER": _readonly_buffer,
    "EMPTY_LIST": _push_empty(list),
    "APPEND": _append,
    "APPENDS": _appends,
    "LIST": _list,
    "EMPTY_TUPLE": _push_constant(()),
    "TUPLE": _tuple,
    "TUPLE1": _tuple_of(1),
    "TUPLE2": _tuple_of(2),
    "TUPLE3": _tuple_of(3),
    "EMPTY_DICT": _push_empty(dict),
    "DICT": _dict,
    "SETITEM": _setitem,
    "SETITEMS": _setitems,
    "EMPTY_SET": _push_empty(set),
    "ADDITEMS": _additems,
    "FROZENSET": _frozenset,
    "POP": _pop,
    "DUP": _dup,
    "MARK": _mark,
    "POP_MARK": _pop_mark,
    "GET": _get,
    "BINGET": _binget,
    "LONG_BINGET": _binget,
    "PUT": _put,
    "BINPUT": _put,
    "LONG_BINPUT": _put,
    "MEMOIZE": _memoize,
    "EXT1": _ext,
    "EXT2": _ext,
    "EXT4": _ext,
    "GLOBAL": _global,
    "STACK_GLOBAL": _stack_global,
    "REDUCE": _reduce,
    "BUILD": _build,
    "INST": _inst,
    "OBJ": _obj,
    "NEWOBJ": _newobj,
    "NEWOBJ_EX": _newobj_ex,
    "PROTO": _proto,
    "FRAME": _frame,
    "PERSID": _persid,
    "BINPERSID": _binpersid,
    "STOP": _stop,
}
"""The handler of each opcode, by opcode name; checked against `OPCODES` at import."""


def _dispatch_table() -> list[tuple[Opcode, Reader | None, Handler] | None]:
    """Byte -> (opcode, argument reader, handler); checks that the handler table covers the
    opcode table."""
    names = {op.name for op in OPCODES}
    if names != set(HANDLERS):
        raise RuntimeError(
            f"opcodes without handlers or handlers without opcodes: {sorted(names ^ set(HANDLERS))}"
        )
    table: list[tuple[Opcode, Reader | None, Handler] | None] = [None] * 256
    for op in OPCODES:
        table[op.code] = (op, None if op.arg is None else op.arg.read, HANDLERS[op.name])
    return table


_DISPATCH_TABLE: Final = _dispatch_table()
