"""What a global named in a pickle becomes: a safe stand-in, a storage class, a torch dtype, or
an inert `GlobalRef`. Nothing here imports a module or calls a function the file names.

`resolve_global` is the only way a name enters the machine. `call_global` (REDUCE, INST, OBJ)
and `new_object` (NEWOBJ) are the only ways one is "called": a `StandIn` runs its own small,
argument-checking function; anything else yields an `InertObject` recording the call.

Stand-ins build plain values: ``OrderedDict``, ``set``, ``frozenset``, ``slice``, ``range``,
``complex``, ``bytes``, ``argparse.Namespace``, NumPy arrays and scalars of numeric dtypes, and
(from `_rebuild`) tensors, ``torch.Size`` and ``torch.device``. ``collections.defaultdict``
becomes a plain dict: its factory is a global we will not call.
"""

from __future__ import annotations

import collections
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from weightstore.base._lazy import import_on_first_use
from weightstore.base._record import ValueRecord
from weightstore.base._render import bounded_repr
from weightstore.dtypes import TORCH_STORAGE_CLASSES
from weightstore.pytorch_reader import _rebuild
from weightstore.pytorch_reader._objects import (
    TORCH_DTYPES,
    Context,
    GlobalRef,
    InertObject,
    Malformed,
    Pending,
    StorageClass,
    TorchDType,
    expect_int,
    expect_ints,
    shown_int,
    take,
)

if TYPE_CHECKING:
    import argparse

    import numpy as np
else:  # a state dict's pickle names neither: loading one pays for no NumPy or argparse import
    argparse = import_on_first_use("argparse", globals(), "argparse")
    np = import_on_first_use("numpy", globals(), "np")

__all__ = ["StandIn", "build_state", "call_global", "new_object", "resolve_global"]

StandInFn = Callable[[Context, tuple[object, ...]], object]
NewFn = Callable[[Context, tuple[object, ...], dict[str, object]], object]

# Python 2 module names (pickle's own fix_imports table, the entries torch files use), torch's
# renamed `torch.tensor` module, and NumPy 2's `numpy._core`.
_MODULE_ALIASES: Final = {
    "__builtin__": "builtins",
    "copy_reg": "copyreg",
    "torch.tensor": "torch._tensor",
    "numpy._core.multiarray": "numpy.core.multiarray",
    "numpy._core.numeric": "numpy.core.numeric",
}
_NAME_ALIASES: Final = {("builtins", "xrange"): ("builtins", "range")}
_ENCODINGS: Final = frozenset({"latin1", "latin-1", "iso-8859-1", "utf-8", "utf8", "ascii"})
_NUMPY_DTYPE_NAME: Final = re.compile(r"[biufcSU][0-9]{1,4}")  # no objects, records or voids
_MULTIARRAY: Final = "numpy.core.multiarray"


class StandIn(ValueRecord):
    """A global we know: calling it runs `call`; NEWOBJ runs `new` (else records the call)."""

    module: str
    name: str
    call: StandInFn
    new: NewFn | None

    def __init__(self, module: str, name: str, call: StandInFn, new: NewFn | None = None) -> None:
        self._set("module", module)
        self._set("name", name)
        self._set("call", call)
        self._set("new", new)

    @property
    def ref(self) -> GlobalRef:
        """The global this stands in for, as an inert reference."""
        return GlobalRef(self.module, self.name)

    def __repr__(self) -> str:
        return f"<stand-in {self.module}.{self.name}>"


def resolve_global(module: str, name: str) -> object:
    """What the machine pushes for GLOBAL / STACK_GLOBAL ``module name``."""
    module = _MODULE_ALIASES.get(module, module)
    module, name = _NAME_ALIASES.get((module, name), (module, name))
    # torch's own loader takes a storage class by its name, whatever module the file gives it.
    if name in TORCH_STORAGE_CLASSES or (module.startswith("torch") and name.endswith("Storage")):
        return StorageClass(name, TORCH_STORAGE_CLASSES.get(name))
    if module == "torch" and name in TORCH_DTYPES:
        return TorchDType(TORCH_DTYPES[name][0])
    return STANDINS.get((module, name)) or GlobalRef(module, name)


def call_global(context: Context, callee: object, args: object) -> object:
    """REDUCE: ``callee(*args)``, symbolically."""
    if not isinstance(args, tuple):
        raise Malformed(f"call arguments must be a tuple, not {type(args).__name__}")
    if isinstance(callee, StandIn):
        return callee.call(context, args)
    if isinstance(callee, GlobalRef | InertObject):
        return InertObject(callee, args)
    raise Malformed(f"a {type(callee).__name__} is not callable")


def new_object(context: Context, cls: object, args: object, kwargs: object) -> object:
    """NEWOBJ / NEWOBJ_EX: ``cls.__new__(cls, *args, **kwargs)``, symbolically."""
    if not isinstance(args, tuple) or not isinstance(kwargs, dict):
        raise Malformed("NEWOBJ needs an argument tuple and a keyword dict")
    if isinstance(cls, StandIn):
        if cls.new is not None:
            return cls.new(context, args, kwargs)
        cls = cls.ref
    if isinstance(cls, GlobalRef | InertObject):
        return InertObject(cls, args, kwargs, how="new")
    raise Malformed(f"a {type(cls).__name__} is not a class")


def build_state(context: Context, target: object, state: object) -> object:
    """BUILD: `target` given `state`; returns the finished value (a new one for `Pending`)."""
    if isinstance(target, Pending):
        return target.build(context, state)
    if isinstance(state, dict):  # one shared state may be built into many objects
        context.spend(len(state))
    if isinstance(target, InertObject):
        if isinstance(target.state, dict) and isinstance(state, dict):
            target.state.update(state)
        else:
            target.state = state
        return target
    if _holds_attributes(target) and isinstance(state, dict):
        # `state_dict()` sets `_metadata` on its OrderedDict this way. Writing the instance dict
        # directly (not setattr) means no attribute name can reach a descriptor or the type.
        vars(target).update((k, v) for k, v in state.items() if isinstance(k, str))
        return target
    raise Malformed(f"BUILD cannot set state on a {type(target).__name__}")


def _holds_attributes(target: object) -> bool:
    """Whether BUILD may set `target`'s attributes: an ``OrderedDict``, ``Counter`` or
    ``argparse.Namespace`` exactly (no subclass). A Namespace exists only once argparse is
    imported, so the check never imports it."""
    kind = type(target)
    if kind is collections.OrderedDict or kind is collections.Counter:
        return True
    loaded = sys.modules.get("argparse")
    return loaded is not None and kind is getattr(loaded, "Namespace", None)


# -- builtins and collections -------------------------------------------------------------------


def _items(context: Context, value: object, what: str) -> list[object]:
    if not isinstance(value, list | tuple | set | frozenset):
        raise Malformed(f"{what} expects a list of items, not {type(value).__name__}")
    context.spend(len(value))  # one list may be passed again and again
    items = list(value)
    for item in items:
        context.check_key(item)
    return items


def _set(context: Context, args: tuple[object, ...]) -> object:
    args = take(args, "set", 0, 1)
    return set(_items(context, args[0], "set")) if args else set()


def _frozenset(context: Context, args: tuple[object, ...]) -> object:
    args = take(args, "frozenset", 0, 1)
    return frozenset(_items(context, args[0], "frozenset")) if args else frozenset()


def _pairs(context: Context, value: object, what: str) -> list[tuple[object, object]]:
    if isinstance(value, dict):
        value = list(value.items())
    if not isinstance(value, list | tuple):
        raise Malformed(f"{what} expects (key, value) pairs, not {type(value).__name__}")
    context.spend(len(value))
    pairs = []
    for pair in value:
        key, item = take(tuple(pair) if isinstance(pair, list) else pair, f"{what} item", 2)
        context.check_key(key)
        pairs.append((key, item))
    return pairs


def _ordered_dict(context: Context, args: tuple[object, ...]) -> object:
    args = take(args, "OrderedDict", 0, 1)
    return collections.OrderedDict(_pairs(context, args[0], "OrderedDict") if args else ())


def _defaultdict(context: Context, args: tuple[object, ...]) -> object:
    """A plain dict: the default factory is a global, and we call none."""
    args = take(args, "defaultdict", 0, 2)
    return dict(_pairs(context, args[1], "defaultdict") if len(args) == 2 else ())


def _counter(context: Context, args: tuple[object, ...]) -> object:
    args = take(args, "Counter", 0, 1)
    return collections.Counter(dict(_pairs(context, args[0], "Counter")) if args else {})


def _namespace(context: Context, args: tuple[object, ...]) -> object:
    take(args, "argparse.Namespace", 0)
    return argparse.Namespace()


def _namespace_new(context: Context, args: tuple[object, ...], kwargs: dict[str, object]) -> Any:
    context.spend(len(kwargs))
    namespace = argparse.Namespace()
    vars(namespace).update((k, v) for k, v in kwargs.items() if isinstance(k, str))
    return namespace


def _slice(context: Context, args: tuple[object, ...]) -> object:
    args = take(args, "slice", 1, 3)
    return slice(*(None if arg is None else expect_int(arg, "slice bound") for arg in args))


def _range(context: Context, args: tuple[object, ...]) -> object:
    return range(*(expect_int(arg, "range bound") for arg in take(args, "range", 1, 3)))


def _complex(context: Context, args: tuple[object, ...]) -> object:
    parts: list[int | float] = []
    for part in take(args, "complex", 0, 2):
        if not isinstance(part, int | float) or isinstance(part, bool):
            raise Malformed("complex expects real and imaginary numbers")
        parts.append(part)
    return complex(*parts)


def _encode(context: Context, text: object, encoding: object) -> bytes:
    if not isinstance(text, str) or encoding not in _ENCODINGS:
        raise Malformed(f"encode expects a str and one of {sorted(_ENCODINGS)}")
    context.allocate(len(text))  # UTF-8 may take up to 4 bytes a character; a bound either way
    return text.encode(str(encoding))


def _codecs_encode(context: Context, args: tuple[object, ...]) -> object:
    """Protocol 2 writes ``bytes`` as ``_codecs.encode(latin1_text, "latin1")``."""
    return _encode(context, *take(args, "_codecs.encode", 2))


def _bytes_from(context: Context, args: tuple[object, ...], name: str) -> bytes:
    args = take(args, name, 0, 2)
    if not args:
        return b""
    if len(args) == 2:
        return _encode(context, args[0], args[1])
    value = args[0]
    if type(value) is bytes:
        return value  # immutable: shared, not copied
    if isinstance(value, bytes | bytearray | list):
        context.allocate(len(value))
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, list) and all(type(v) is int and 0 <= v < 256 for v in value):
        return bytes(value)
    raise Malformed(f"{name} expects bytes or a list of byte values")


def _bytes(context: Context, args: tuple[object, ...]) -> object:
    return _bytes_from(context, args, "bytes")


def _bytearray(context: Context, args: tuple[object, ...]) -> object:
    data = _bytes_from(context, args, "bytearray")
    context.allocate(len(data))
    return bytearray(data)


def _reconstructor(context: Context, args: tuple[object, ...]) -> object:
    """``copyreg._reconstructor(cls, base, state)``: how protocols 0 and 1 create objects."""
    cls, _base, _state = take(args, "copyreg._reconstructor", 3)
    return new_object(context, cls, (), {})


def _newobj(context: Context, args: tuple[object, ...]) -> object:
    if not args:
        raise Malformed("copyreg.__newobj__ needs a class")
    return new_object(context, args[0], args[1:], {})


def _newobj_ex(context: Context, args: tuple[object, ...]) -> object:
    cls, inner, kwargs = take(args, "copyreg.__newobj_ex__", 3)
    return new_object(context, cls, inner, kwargs)


# -- NumPy --------------------------------------------------------------------------------------


def _numpy_dtype_of(value: object) -> np.dtype[Any] | None:
    """A finished NumPy dtype of a plain numeric or string kind, else ``None`` (always, while
    NumPy is not imported: then no value can be one)."""
    if "numpy" not in sys.modules or not isinstance(value, np.dtype):
        return None
    return value if value.kind in "biufcSU" and value.itemsize > 0 else None


def _raw_bytes(context: Context, value: object) -> bytes | None:
    if type(value) is bytes:
        return value
    if isinstance(value, str | bytes | bytearray):
        context.allocate(len(value))
    if isinstance(value, str):  # Python 2 raw data, decoded by pickle as text
        return value.encode("latin-1") if max(value, default="\0") <= "\xff" else None
    return bytes(value) if isinstance(value, bytes | bytearray) else None


def _array_from(
    context: Context,
    raw: bytes,
    dtype: np.dtype[Any],
    shape: tuple[int, ...],
    fortran: bool = False,
) -> np.ndarray[Any, Any]:
    count = 1
    for size in shape:
        if size < 0:
            raise Malformed(f"array shape {bounded_repr(list(shape))} has a negative size")
        count *= size
    if count * dtype.itemsize != len(raw):
        raise Malformed(
            f"array of shape {bounded_repr(list(shape))} and dtype {dtype} needs "
            f"{shown_int(count * dtype.itemsize)} bytes, the pickle holds {len(raw):,}"
        )
    context.allocate(len(raw))
    flat: np.ndarray[Any, Any] = np.frombuffer(raw, dtype=dtype)
    shaped: np.ndarray[Any, Any] = flat.reshape(shape, order="F" if fortran else "C").copy()
    return shaped


class PendingArray(Pending):
    """``numpy.core.multiarray._reconstruct(...)``: an empty array its BUILD fills."""

    __slots__ = ("args",)

    def __init__(self, args: tuple[object, ...]) -> None:
        super().__init__()
        self.args = args

    def build(self, context: Context, state: object) -> Any:
        """State ``([version,] shape, dtype, is_fortran, raw)``; object arrays stay inert."""
        fields = state if isinstance(state, tuple) else ()
        if len(fields) == 5:
            fields = fields[1:]
        if len(fields) == 4:
            shape, dtype, fortran, raw = fields
            np_dtype, data = _numpy_dtype_of(dtype), _raw_bytes(context, raw)
            if np_dtype is not None and data is not None:
                sizes = expect_ints(shape, "array shape", 64)
                return _array_from(context, data, np_dtype, sizes, fortran is True)
        return InertObject(GlobalRef(_MULTIARRAY, "_reconstruct"), self.args, state=state)


class PendingDType(Pending):
    """``numpy.dtype(name, align, copy)``: its BUILD state carries the byte order."""

    __slots__ = ("args", "name")

    def __init__(self, args: tuple[object, ...]) -> None:
        super().__init__()
        self.args = args
        self.name = args[0] if args else None

    def build(self, context: Context, state: object) -> Any:
        fields = state if isinstance(state, tuple) else ()
        simple = len(fields) >= 8 and fields[2] is None and fields[3] is None
        name = self.name
        if simple and isinstance(name, str) and _NUMPY_DTYPE_NAME.fullmatch(name):
            dtype = np.dtype(name)
            order = fields[1]
            return dtype.newbyteorder(order) if order in ("<", ">") else dtype
        return InertObject(GlobalRef("numpy", "dtype"), self.args, state=state)


def _reconstruct(context: Context, args: tuple[object, ...]) -> object:
    return PendingArray(take(args, "numpy _reconstruct", 3))


def _dtype(context: Context, args: tuple[object, ...]) -> object:
    return PendingDType(take(args, "numpy.dtype", 1, 3))


def _scalar(context: Context, args: tuple[object, ...]) -> object:
    """``numpy.core.multiarray.scalar(dtype, raw)``: one NumPy number."""
    args = take(args, "numpy scalar", 1, 2)
    dtype = _numpy_dtype_of(args[0])
    raw = _raw_bytes(context, args[1]) if len(args) == 2 else None
    if dtype is None or raw is None:
        return InertObject(GlobalRef(_MULTIARRAY, "scalar"), args)
    return _array_from(context, raw, dtype, ())[()]


def _frombuffer(context: Context, args: tuple[object, ...]) -> object:
    """``numpy.core.numeric._frombuffer(buffer, dtype, shape, order)``, NumPy's protocol 5
    form; the buffer arrives in band, as a bytearray."""
    buffer, dtype, shape, order = take(args, "numpy _frombuffer", 4)
    np_dtype, raw = _numpy_dtype_of(dtype), _raw_bytes(context, buffer)
    if np_dtype is None or raw is None or order not in ("C", "F"):
        return InertObject(GlobalRef("numpy.core.numeric", "_frombuffer"), args)
    sizes = expect_ints(shape, "array shape", 64)
    return _array_from(context, raw, np_dtype, sizes, order == "F")


# -- the table ----------------------------------------------------------------------------------


def _table() -> dict[tuple[str, str], StandIn]:
    rows: dict[tuple[str, str], tuple[StandInFn, NewFn | None]] = {
        ("builtins", "set"): (_set, None),
        ("builtins", "frozenset"): (_frozenset, None),
        ("builtins", "slice"): (_slice, None),
        ("builtins", "range"): (_range, None),
        ("builtins", "complex"): (_complex, lambda c, a, k: _complex(c, a)),
        ("builtins", "bytes"): (_bytes, None),
        ("builtins", "bytearray"): (_bytearray, None),
        ("_codecs", "encode"): (_codecs_encode, None),
        ("collections", "OrderedDict"): (_ordered_dict, lambda c, a, k: collections.OrderedDict()),
        ("collections", "defaultdict"): (_defaultdict, lambda c, a, k: {}),
        ("collections", "Counter"): (_counter, lambda c, a, k: collections.Counter()),
        ("argparse", "Namespace"): (_namespace, _namespace_new),
        ("copyreg", "_reconstructor"): (_reconstructor, None),
        ("copyreg", "__newobj__"): (_newobj, None),
        ("copyreg", "__newobj_ex__"): (_newobj_ex, None),
        ("numpy", "dtype"): (_dtype, None),
        (_MULTIARRAY, "_reconstruct"): (_reconstruct, None),
        (_MULTIARRAY, "scalar"): (_scalar, None),
        ("numpy.core.numeric", "_frombuffer"): (_frombuffer, None),
        **{key: (call, None) for key, call in _rebuild.TABLE.items()},
    }
    return {key: StandIn(key[0], key[1], call, new) for key, (call, new) in rows.items()}


STANDINS: Final = _table()
