"""The values the pickle machine builds besides plain Python data, and the torch dtype table.

A pickle names classes and functions; the machine never imports them. A name it knows (see
`_globals`) becomes a safe stand-in that builds a plain value; every other name becomes a
`GlobalRef`, and calling one gives an `InertObject` that records the call (callee, arguments,
later state and items) and does nothing else. That is the one idea of this reader's safety: the
file decides what gets *recorded*, never what gets *run*.

Value classes compare and hash by identity (``eq=False``) unless they are small frozen records,
so a hostile pickle that uses one as a dict key costs one pointer hash.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Protocol

from weightstore.base._record import ValueRecord
from weightstore.base._render import bounded_repr
from weightstore.dtypes import DType, from_torch

if TYPE_CHECKING:
    from weightstore.pytorch_reader._layout import Limits

__all__ = [
    "TORCH_DTYPES",
    "Context",
    "GlobalRef",
    "InertObject",
    "Malformed",
    "Pending",
    "PersistentRef",
    "StorageClass",
    "TorchDType",
    "TorchDevice",
    "clip",
    "expect_int",
    "expect_ints",
    "shown_int",
    "take",
    "torch_itemsize",
]

# fmt: off
# Every dtype attribute of the `torch` module (torch 2.13), alias -> (canonical name, bytes per
# element). Sub-byte and quantized types keep their storage unit's width.
TORCH_DTYPES: Final[dict[str, tuple[str, int]]] = {
    "float64": ("float64", 8), "double": ("float64", 8),
    "float32": ("float32", 4), "float": ("float32", 4),
    "float16": ("float16", 2), "half": ("float16", 2),
    "bfloat16": ("bfloat16", 2),
    "int64": ("int64", 8), "long": ("int64", 8),
    "int32": ("int32", 4), "int": ("int32", 4),
    "int16": ("int16", 2), "short": ("int16", 2),
    "int8": ("int8", 1),
    "uint64": ("uint64", 8), "uint32": ("uint32", 4), "uint16": ("uint16", 2),
    "uint8": ("uint8", 1),
    "bool": ("bool", 1),
    "complex128": ("complex128", 16), "cdouble": ("complex128", 16),
    "complex64": ("complex64", 8), "cfloat": ("complex64", 8),
    "complex32": ("complex32", 4), "chalf": ("complex32", 4),
    "float8_e4m3fn": ("float8_e4m3fn", 1), "float8_e5m2": ("float8_e5m2", 1),
    "float8_e4m3fnuz": ("float8_e4m3fnuz", 1), "float8_e5m2fnuz": ("float8_e5m2fnuz", 1),
    "float8_e8m0fnu": ("float8_e8m0fnu", 1), "float4_e2m1fn_x2": ("float4_e2m1fn_x2", 1),
    "qint8": ("qint8", 1), "quint8": ("quint8", 1), "qint32": ("qint32", 4),
    "quint4x2": ("quint4x2", 1), "quint2x4": ("quint2x4", 1),
    "bits1x8": ("bits1x8", 1), "bits2x4": ("bits2x4", 1), "bits4x2": ("bits4x2", 1),
    "bits8": ("bits8", 1), "bits16": ("bits16", 2),
    **{f"int{n}": (f"int{n}", 1) for n in range(1, 8)},
    **{f"uint{n}": (f"uint{n}", 1) for n in range(1, 8)},
    "bit": ("uint1", 1),
}
# fmt: on
"""Every dtype attribute of the `torch` module: alias -> (canonical name, bytes per element)."""


def torch_itemsize(name: str) -> int:
    """Bytes per element of a canonical torch dtype name (all names in TORCH_DTYPES)."""
    return TORCH_DTYPES[name][1]


class Context(Protocol):
    """What a stand-in may ask of the machine running it."""

    @property
    def path(self) -> str | None:
        """The file, for error messages."""
        ...

    @property
    def limits(self) -> Limits:
        """The resource caps of the reader running the pickle."""
        ...

    def persistent_load(self, pid: object) -> object:
        """The value a persistent id stands for (a storage, a module class, ...)."""
        ...

    def check_key(self, key: object) -> None:
        """Refuse a dict key or set item that is unhashable or too costly to hash."""
        ...

    def spend(self, nodes: int) -> None:
        """Charge `nodes` units of work (items a stand-in walks or copies) to the limit."""
        ...

    def allocate(self, size: int) -> None:
        """Charge `size` bytes a stand-in is about to build (an array, bytes, a string) to the
        limit, before it builds them."""
        ...

    def call(self, callee: object, args: tuple[object, ...]) -> object:
        """What REDUCE would build from `callee` and `args`."""
        ...


class GlobalRef(ValueRecord):
    """A class or function the file names and we do not know; it is never imported."""

    module: str
    name: str

    def __init__(self, module: str, name: str) -> None:
        self._set("module", module)
        self._set("name", name)

    @property
    def qualname(self) -> str:
        """``module.name``, as the file spells it."""
        return f"{self.module}.{self.name}"

    def __repr__(self) -> str:
        return f"<global {clip(self.qualname)}>"


class InertObject:
    """What calling a `GlobalRef` built: a record of the call, its state and items, nothing run.

    Attributes:
        callee: the `GlobalRef` (or other inert value) that was called.
        args: positional arguments, as decoded.
        kwargs: keyword arguments (NEWOBJ_EX only).
        how: ``"call"`` (REDUCE, INST, OBJ) or ``"new"`` (NEWOBJ: ``cls.__new__(cls, *args)``).
        state: what BUILD passed (``__setstate__`` or ``__dict__`` update), else ``None``.
        listitems: items APPEND/APPENDS added.
        dictitems: items SETITEM/SETITEMS added.
    """

    __slots__ = ("args", "callee", "dictitems", "how", "kwargs", "listitems", "state")

    def __init__(
        self,
        callee: object,
        args: tuple[object, ...] = (),
        kwargs: dict[str, object] | None = None,
        how: str = "call",
        state: object = None,
        listitems: list[object] | None = None,
        dictitems: dict[object, object] | None = None,
    ) -> None:
        self.callee = callee
        self.args = args
        self.kwargs: dict[str, object] = {} if kwargs is None else kwargs
        self.how = how
        self.state = state
        self.listitems: list[object] = [] if listitems is None else listitems
        self.dictitems: dict[object, object] = {} if dictitems is None else dictitems

    @property
    def class_name(self) -> str:
        """Dotted name of what was called, or ``"<inert>"`` when that was no named global."""
        callee = self.callee
        return callee.qualname if isinstance(callee, GlobalRef) else "<inert>"

    @property
    def attributes(self) -> dict[str, object]:
        """The instance ``__dict__`` BUILD gave, from a dict state or a ``(dict, slots)`` pair."""
        state = self.state
        if isinstance(state, tuple) and len(state) == 2:
            merged: dict[str, object] = {}
            for part in state:
                if isinstance(part, dict):
                    merged.update((k, v) for k, v in part.items() if isinstance(k, str))
            return merged
        if isinstance(state, dict):
            return {k: v for k, v in state.items() if isinstance(k, str)}
        return {}

    def __repr__(self) -> str:  # shallow on purpose: a pickle can nest these without end
        return f"<inert {clip(self.class_name)} object>"


class TorchDType(ValueRecord):
    """A torch dtype the file names (``torch.float32``); `name` is canonical."""

    name: str

    def __init__(self, name: str) -> None:
        self._set("name", name)

    @property
    def dtype(self) -> DType:
        """The weightstore dtype; `DTypeError` for dtypes weightstore has no row for."""
        return from_torch(self.name)

    @property
    def itemsize(self) -> int:
        """Bytes per element (a sub-byte or quantized dtype's storage unit)."""
        return torch_itemsize(self.name)

    def __repr__(self) -> str:
        return f"torch.{self.name}"


class TorchDevice(ValueRecord):
    """A ``torch.device``: its type (``"cpu"``, ``"cuda"``) and optional index."""

    type: str
    index: int | None

    def __init__(self, type: str, index: int | None = None) -> None:
        self._set("type", type)
        self._set("index", index)

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"


class StorageClass(ValueRecord):
    """A storage class global (``torch.FloatStorage``); `torch_dtype` is ``None`` when the
    name is one torch never wrote, so only its byte width is unknown."""

    name: str
    torch_dtype: str | None

    def __init__(self, name: str, torch_dtype: str | None) -> None:
        self._set("name", name)
        self._set("torch_dtype", torch_dtype)

    @property
    def itemsize(self) -> int | None:
        """Bytes per element, ``None`` for a class torch never wrote."""
        return None if self.torch_dtype is None else torch_itemsize(self.torch_dtype)

    def __repr__(self) -> str:
        return f"torch.{self.name}"


class PersistentRef(ValueRecord):
    """A persistent id in a file that has nothing to resolve it against (a plain pickle)."""

    pid: object

    def __init__(self, pid: object) -> None:
        self._set("pid", pid)

    def __repr__(self) -> str:
        return "<persistent id>"


class Pending:
    """A value BUILD completes (a NumPy array or dtype). The machine records which memo slots
    hold it, so that when BUILD replaces it with the finished value those slots follow."""

    __slots__ = ("memo_keys",)

    def __init__(self) -> None:
        self.memo_keys: list[int] = []

    def build(self, context: Context, state: object) -> Any:
        """The finished value for `state`."""
        raise NotImplementedError


class Malformed(Exception):
    """A stand-in or handler refusing its input; the machine re-raises it as `PickleError`
    carrying the opcode and offset it was running."""


def take(args: object, name: str, low: int, high: int | None = None) -> tuple[object, ...]:
    """`args` as a tuple of `low` to `high` items (exactly `low` when `high` is ``None``)."""
    if not isinstance(args, tuple):
        raise Malformed(f"{name} expects an argument tuple, not {type(args).__name__}")
    high = low if high is None else high
    if not low <= len(args) <= high:
        span = str(low) if low == high else f"{low} to {high}"
        raise Malformed(f"{name} takes {span} arguments, not {len(args)}")
    return args


def expect_int(value: object, what: str) -> int:
    """`value` if it is an int (not a bool), else `Malformed` naming `what`."""
    if type(value) is not int:
        raise Malformed(f"{what} must be an int, not {type(value).__name__}")
    return value


def expect_ints(value: object, what: str, limit: int) -> tuple[int, ...]:
    """A tuple or list of ints (a ``torch.Size``, a stride) of at most `limit` items."""
    if not isinstance(value, tuple | list):
        raise Malformed(f"{what} must be a tuple of ints, not {type(value).__name__}")
    if len(value) > limit:
        raise Malformed(f"{what} has {len(value):,} items, more than {limit:,}")
    return tuple(expect_int(item, what) for item in value)


_CLIP_SIZE: Final = 120  # characters of a name or message part a file supplied


def clip(text: str, size: int = _CLIP_SIZE) -> str:
    """`text` cut to `size` characters (the cut marked ``...``): for names and error text a
    file supplied, which may be a megabyte long."""
    return text if len(text) <= size else text[: size - 3] + "..."


def shown_int(value: int) -> str:
    """An int from a file for a message: with thousands separators when it fits 64 bits, else
    rendered bounded (``<int of 13,288 bits>``), since a file's ints reach 4,000 digits."""
    return f"{value:,}" if value.bit_length() <= 64 else bounded_repr(value)
