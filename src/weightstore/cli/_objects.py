"""What a PyTorch checkpoint holds besides tensors: its objects as JSON, and suspicious globals.

The PyTorch reader decodes a pickle without running it: a class or function it does not know
becomes a `GlobalRef`, and a call to one an `InertObject` (`weightstore.pytorch_reader`). Nothing
ran, but ``torch.load(weights_only=False)`` on the same file *would* import and call those
names, so the command line reports them. A global is **suspicious** when its module lies
outside torch, NumPy and collections (``posix.system``, ``builtins.eval``, ``__main__.Net``),
or is one of the few torch and NumPy entry points that load or run code themselves
(`RISKY_NAMES`: ``torch.load``, ``torch.jit``, ``numpy.load``, ...).

The scan walks the decoded value (dicts, lists, inert objects' arguments and state), every
shared object once, at most `MAX_SCAN_NODES` values and `MAX_SCAN_DEPTH` levels; a scan cut
short is itself reported, so a file cannot hide a global behind a billion shared references.
It sees the globals that the decoded value keeps; a global the pickle names and then discards
never reaches the value (the reader keeps no list of names resolved), which is why `verify`
calls this a flag, not a proof.

`to_json` turns decoded values into JSON types (numbers stay numbers), bounded in depth, items
and string length, since a file supplies them.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from weightstore.base._lazy import import_on_first_use
from weightstore.base._record import ValueRecord
from weightstore.cli._text import MAX_TEXT_LEN, json_number, shortened
from weightstore.pytorch_reader import (
    GlobalRef,
    InertObject,
    LazyTensor,
    TorchDevice,
    TorchDType,
    UnreadableTensor,
)

if TYPE_CHECKING:
    import numpy as np
else:
    np = import_on_first_use("numpy", globals(), "np")  # inspect of a header needs no NumPy

__all__ = [
    "MAX_SCAN_DEPTH",
    "MAX_SCAN_NODES",
    "RISKY_NAMES",
    "SAFE_MODULE_ROOTS",
    "Scan",
    "SuspiciousGlobal",
    "describe_value",
    "is_suspicious",
    "scan_globals",
    "to_json",
]

SAFE_MODULE_ROOTS: Final = frozenset({"torch", "numpy", "collections"})
"""Top-level modules whose globals a checkpoint may name without being flagged."""

RISKY_NAMES: Final = (
    "torch.load", "torch.serialization", "torch.hub", "torch.jit", "torch.package",
    "torch.utils.cpp_extension", "torch._C", "torch.ops", "torch.distributed",
    "numpy.load", "numpy.f2py", "numpy.distutils", "numpy.ctypeslib", "numpy.testing",
)  # fmt: skip
"""Names (or name prefixes) inside the safe roots that load files or run code when called."""

MAX_SCAN_NODES: Final = 2_000_000  # values the scan visits before it stops and says so
MAX_SCAN_DEPTH: Final = 10_000  # nesting the scan follows before it stops and says so
_MAX_JSON_DEPTH: Final = 6  # nesting shown in JSON; deeper values become "..."
_MAX_JSON_ITEMS: Final = 50  # items shown per container
_MAX_JSON_NODES: Final = 5_000  # values shown per object, all levels together
_MAX_JSON_TEXT: Final = 5 * MAX_TEXT_LEN  # characters of one string
_MAX_EXACT_INT_BITS: Final = 64  # larger ints are shown in hex: str() of a huge int is refused


class SuspiciousGlobal(ValueRecord):
    """A global the pickle names that ``torch.load`` would import and maybe call.

    Attributes:
        module: the module as the file spells it (``"posix"``).
        name: the name inside it (``"system"``).
        where: the dotted path of the value that holds it (``"config.loss"``; ``""``: the root).
    """

    module: str
    name: str
    where: str

    @property
    def qualname(self) -> str:
        """``module.name``."""
        return f"{self.module}.{self.name}"


class Scan(ValueRecord):
    """The result of `scan_globals`.

    Attributes:
        suspicious: each suspicious global once, with the first place it was found.
        complete: False when the scan stopped at `MAX_SCAN_NODES` values.
    """

    suspicious: tuple[SuspiciousGlobal, ...]
    complete: bool

    @property
    def flagged(self) -> bool:
        """Whether there is anything to warn about (a suspicious global or a cut-short scan)."""
        return bool(self.suspicious) or not self.complete


def is_suspicious(module: str, name: str) -> bool:
    """Whether loading a file that names ``module.name`` with ``torch.load`` could run code
    beyond torch's, NumPy's and collections' own classes."""
    if module.split(".")[0] not in SAFE_MODULE_ROOTS:
        return True
    qualname = f"{module}.{name}"
    return any(qualname == risky or qualname.startswith(risky + ".") for risky in RISKY_NAMES)


def scan_globals(
    root: object, *, max_nodes: int = MAX_SCAN_NODES, max_depth: int = MAX_SCAN_DEPTH
) -> Scan:
    """Every suspicious global reachable from `root`, the decoded value of a checkpoint, each
    with the first place the walk (in the file's order) finds it."""
    found: dict[tuple[str, str], SuspiciousGlobal] = {}
    seen: set[int] = set()
    # Depth first over lazy child iterators: memory grows with depth, never with a list's width.
    stack: list[Iterator[tuple[str, object]]] = [iter([("", root)])]
    visited = 0
    while stack:
        step = next(stack[-1], None)
        if step is None:
            stack.pop()
            continue
        visited += 1
        if visited > max_nodes or len(stack) > max_depth:
            return Scan(tuple(found.values()), complete=False)
        where, value = step
        if isinstance(value, GlobalRef):
            if is_suspicious(value.module, value.name):
                key = (value.module, value.name)
                found.setdefault(key, SuspiciousGlobal(value.module, value.name, where))
            continue
        children = _children(value)
        if children is None or id(value) in seen:
            continue
        seen.add(id(value))
        stack.append(_placed(where, children))
    return Scan(tuple(found.values()), complete=True)


def _placed(where: str, children: Iterator[tuple[str, object]]) -> Iterator[tuple[str, object]]:
    """`children` with each segment joined under `where`, lazily."""
    for segment, child in children:
        yield (f"{where}.{segment}" if where and segment else where or segment), child


def _children(value: object) -> Iterator[tuple[str, object]] | None:
    """A container's (segment, child) pairs, keys included; None for a leaf."""
    if isinstance(value, dict):
        return _dict_children(value)
    if isinstance(value, list | tuple | set | frozenset):
        return ((str(index), item) for index, item in enumerate(value))
    if isinstance(value, InertObject):
        return _inert_children(value)
    if isinstance(value, argparse.Namespace):
        return _dict_children(vars(value))
    return None


def _dict_children(value: dict[Any, Any]) -> Iterator[tuple[str, object]]:
    for key, item in value.items():
        segment = _key_text(key)
        yield segment, key
        yield segment, item


def _inert_children(value: InertObject) -> Iterator[tuple[str, object]]:
    yield "", value.callee  # the global that was called sits where the object sits
    yield from ((f"args.{i}", arg) for i, arg in enumerate(value.args))
    yield from ((f"kwargs.{key}", arg) for key, arg in value.kwargs.items())
    yield "state", value.state
    yield from ((f"items.{i}", item) for i, item in enumerate(value.listitems))
    yield "dictitems", value.dictitems


def _key_text(key: object) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool | float) or key is None:
        return str(key)
    if isinstance(key, int):
        return str(key) if key.bit_length() <= _MAX_EXACT_INT_BITS else hex(key)
    return describe_value(key, 40)


# -- JSON ---------------------------------------------------------------------------------------


class _Budget:
    """Values `to_json` may still render for one object."""

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes

    def take(self) -> bool:
        self.nodes -= 1
        return self.nodes >= 0


def to_json(value: object) -> Any:
    """`value` (as the PyTorch reader decodes it) as JSON types, bounded in size.

    Numbers stay numbers (non-finite floats become ``"NaN"``/``"Infinity"``), strings are cut at
    1,000 characters, containers at 50 items and 6 levels; what was cut reads ``"..."``.
    Non-plain values are tagged objects: ``{"object": "posix.system", "args": [...]}``,
    ``{"global": ...}``, ``{"tensor": ...}``, ``{"array": ...}``, ``{"bytes": <size>}``.
    """
    return _json(value, _MAX_JSON_DEPTH, _Budget(_MAX_JSON_NODES))


def _json(value: object, depth: int, budget: _Budget) -> Any:
    if not budget.take():
        return "..."
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, bool | str | int | float):
        return _json_scalar(value)
    tagged = _json_tagged(value)
    if tagged is not None:
        return tagged
    if depth <= 0:
        return "..."
    if isinstance(value, dict | argparse.Namespace):
        pairs = value.items() if isinstance(value, dict) else vars(value).items()
        head, more = _first(pairs)
        shown = {_key_text(k): _json(v, depth - 1, budget) for k, v in head}
        return {**shown, "...": f"{more:,} more"} if more else shown
    if isinstance(value, list | tuple | set | frozenset):
        items, more = _first(value)
        return [_json(item, depth - 1, budget) for item in items] + (["..."] if more else [])
    if isinstance(value, InertObject):
        return _json_inert(value, depth, budget)
    return {"value": type(value).__name__}


def _json_scalar(value: bool | str | int | float | None) -> Any:
    if isinstance(value, str):
        return value if len(value) <= _MAX_JSON_TEXT else value[: _MAX_JSON_TEXT - 3] + "..."
    if isinstance(value, float):
        return json_number(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value.bit_length() <= _MAX_EXACT_INT_BITS else hex(value)
    return value


def _json_tagged(value: object) -> Any:
    """The tagged form of a leaf that is not a plain JSON value, or None."""
    if isinstance(value, GlobalRef):
        return {"global": value.qualname}
    if isinstance(value, LazyTensor):
        return {"tensor": {"dtype": value.torch_dtype, "shape": list(value.shape)}}
    if isinstance(value, UnreadableTensor):
        return {"unreadable_tensor": value.global_name}
    if isinstance(value, np.ndarray):
        return {"array": {"dtype": str(value.dtype), "shape": list(value.shape)}}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"bytes": len(value)}
    if isinstance(value, complex):
        return {"real": json_number(value.real), "imag": json_number(value.imag)}
    if isinstance(value, TorchDType | TorchDevice | slice | range):
        return str(value) if isinstance(value, TorchDevice) else repr(value)
    return None


def _json_inert(value: InertObject, depth: int, budget: _Budget) -> dict[str, Any]:
    document: dict[str, Any] = {"object": value.class_name}
    if value.args:
        document["args"] = _json(value.args, depth - 1, budget)
    if value.kwargs:
        document["kwargs"] = _json(value.kwargs, depth - 1, budget)
    if value.state is not None:
        document["state"] = _json(value.state, depth - 1, budget)
    if value.listitems:
        document["items"] = _json(value.listitems, depth - 1, budget)
    if value.dictitems:
        document["dictitems"] = _json(value.dictitems, depth - 1, budget)
    return document


def _first(items: Any) -> tuple[list[Any], int]:
    """The first `_MAX_JSON_ITEMS` of a sized collection, and how many more there are."""
    head: list[Any] = []
    for item in items:
        if len(head) == _MAX_JSON_ITEMS:
            break
        head.append(item)
    return head, len(items) - len(head)


def describe_value(value: object, limit: int = 60) -> str:
    """A one-line text form of a decoded value (its JSON form, compact), at most `limit`
    characters, printable."""
    text = json.dumps(to_json(value), ensure_ascii=False, separators=(", ", ": "))
    return shortened(text, limit)
