"""Naming the tensors of a decoded checkpoint, as ``state_dict`` and Burn name them.

A name is the path to the tensor, segments joined by dots: dict keys, list and tuple indices,
and, through a whole pickled ``nn.Module`` (an `InertObject` whose state holds ``_parameters``,
``_buffers`` and ``_modules``), each module's parameters, then its persistent buffers, then its
children, exactly the order and names ``model.state_dict()`` gives. Buffers listed in
``_non_persistent_buffers_set`` are left out, as ``state_dict`` leaves them out; ``None``
parameters (``bias=False``) are skipped.

Shared references can make a small pickle describe an exponential number of paths (a list
holding one list twice, nested forty deep), and a list can hold itself. The walk stops at a
cycle, skips a container it has already walked in full without finding a tensor, and counts
every value it visits (and every module entry it scans) against ``max_nodes`` and its depth
against ``max_depth``, so a hostile file fails with `LimitExceeded` instead of hanging. A path
is kept as its segments, joined into a name only when it reaches a tensor, and the bytes of all
names together are counted against ``max_names_size`` before each is built: one long key over
many values costs nothing until it names tensors, and then no more than the limit.

`short_repr` renders any decoded value for a listing or a message, at bounded cost.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final

from weightstore.base._lazy import import_on_first_use
from weightstore.base._render import bounded_repr
from weightstore.errors import DescriptorError, LimitExceeded
from weightstore.pytorch_reader._layout import Limits
from weightstore.pytorch_reader._objects import (
    GlobalRef,
    InertObject,
    PersistentRef,
    StorageClass,
    TorchDType,
)
from weightstore.pytorch_reader._tensors import LazyTensor, UnreadableTensor

if TYPE_CHECKING:
    import numpy as np
else:
    np = import_on_first_use("numpy", globals(), "np")  # naming tensors never needs NumPy

__all__ = [
    "NAMING_SHARE",
    "Leaf",
    "module_entries",
    "name_tensors",
    "short_repr",
    "tensor_holders",
]

Leaf = LazyTensor | UnreadableTensor
"""What a tensor name leads to: a readable tensor, or one that raises when touched."""
_SHORT_SIZE = 60  # characters of a `short_repr` by default


NAMING_SHARE: Final = 16  # naming may visit max_nodes // NAMING_SHARE values


def name_tensors(root: object, limits: Limits, path: str | None) -> dict[str, Leaf]:
    """Every tensor reachable from `root`, by dotted name, in walk order; a tensor reached by
    several paths is listed under each (`LazyTensor.with_name` gives it the name).

    Raises:
        LimitExceeded: the walk visits more than ``max_nodes`` values, nests deeper than
            ``max_depth``, or the names come to more than ``max_names_size`` bytes.
        DescriptorError: two tensors get the same name.
    """
    namer = _Namer(limits, path)
    _Walker(limits, path, namer.emit).walk(root, 0)
    return namer.found


def tensor_holders(entries: Iterable[object], limits: Limits, path: str | None) -> list[bool]:
    """For each of `entries` (a top-level dict's values), whether it holds a tensor. One
    budget of ``max_nodes`` visits covers them all, and each walk ends at its first tensor."""
    walker = _Walker(limits, path, _stop_at_first)
    holders = []
    for value in entries:
        try:
            walker.walk(value, 0)
        except _Found:
            holders.append(True)
            walker.reset()
        else:
            holders.append(False)
    return holders


_NO_CYCLE = 2**63  # deeper than any walk: no cycle seen


class _Found(Exception):
    """Ends a `tensor_holders` walk at the first tensor."""


def _stop_at_first(path: _Path, tensor: Leaf) -> None:
    raise _Found


class _Path:
    """The name segments to the value being walked, and their length: the characters of the
    name they join into, and how many are not ASCII (then bytes and characters differ)."""

    __slots__ = ("chars", "segments", "wide")

    def __init__(self) -> None:
        self.segments: list[str] = []
        self.chars = 0  # characters of the segments, plus one dot after each
        self.wide = 0

    def push(self, segment: str) -> None:
        self.segments.append(segment)
        self.chars += len(segment) + 1
        self.wide += not segment.isascii()

    def pop(self) -> None:
        segment = self.segments.pop()
        self.chars -= len(segment) + 1
        self.wide -= not segment.isascii()


class _Walker:
    """One walk: the values visited so far, the path to the current value, the containers on
    the way to it (a cycle's test, with their depths), and the containers already found to hold
    no tensor. `emit` receives each tensor with the path to it.

    A container walked in full without reaching a tensor, and without a cycle leading above it,
    is skipped when met again: whatever the path to it, it names nothing. So shared references
    cost visits only where they lead to tensors, and there every path is a name, which the
    names limit bounds.
    """

    def __init__(
        self, limits: Limits, path: str | None, emit: Callable[[_Path, Leaf], None]
    ) -> None:
        self._limits, self._path, self._emit = limits, path, emit
        self._visited = 0
        # Naming gets a sixteenth of the node budget: a walk over shared references costs about
        # a microsecond a visit, so a 1.4 KB file could otherwise spend 13 s reaching the full
        # budget; a real checkpoint visits a few values per tensor.
        self._budget = max(1, limits.max_nodes // NAMING_SHARE)
        self._emitted = 0
        self._names = _Path()
        self._on_path: dict[int, int] = {}  # id -> depth of each container being walked
        self._cycle_to = _NO_CYCLE  # the shallowest depth a cycle led back to, in this subtree
        self._tensor_free: set[int] = set()
        self._rendered: dict[int, str] = {}  # id -> segment, for keys that need rendering

    def reset(self) -> None:
        """Forget the path after a walk that ended early; the budget and findings stay."""
        self._names = _Path()
        self._on_path.clear()
        self._cycle_to = _NO_CYCLE

    def walk(self, value: object, depth: int) -> None:
        self._charge(1)
        if isinstance(value, LazyTensor | UnreadableTensor):
            self._emitted += 1
            self._emit(self._names, value)
            return
        ident = id(value)
        if ident in self._tensor_free:
            return
        if ident in self._on_path:  # a cycle back up
            self._cycle_to = min(self._cycle_to, self._on_path[ident])
            return
        if isinstance(value, InertObject):  # a module's entries are scanned on every visit
            self._charge(_module_size(value))
        children = _children(value)
        if children is None:
            return
        if depth >= self._limits.max_depth:
            raise LimitExceeded(
                "nesting depth while naming tensors",
                depth + 1,
                self._limits.max_depth,
                path=self._path,
            )
        emitted, outer_cycle = self._emitted, self._cycle_to
        self._on_path[ident] = depth
        self._cycle_to = _NO_CYCLE
        for key, child in children:
            self._names.push(self._segment(key))
            self.walk(child, depth + 1)
            self._names.pop()
        del self._on_path[ident]
        if self._emitted == emitted and self._cycle_to >= depth:
            self._tensor_free.add(ident)
        self._cycle_to = min(outer_cycle, self._cycle_to)

    def _segment(self, key: object) -> str:
        """A key as a name segment: strings as they are, numbers printed, others rendered
        (once per key: a shared dict's keys are met again on every path to it)."""
        if isinstance(key, str):
            return key
        if type(key) is int:  # str() of a huge int is slow or refused
            return str(key) if key.bit_length() <= 64 else hex(key)
        if key is None or isinstance(key, bool | float):
            return str(key)
        text = self._rendered.get(id(key))
        if text is None:
            text = self._rendered[id(key)] = short_repr(key)
        return text

    def _charge(self, visits: int) -> None:
        self._visited += visits
        if self._visited > self._budget:
            raise LimitExceeded(
                "values visited while naming tensors",
                self._visited,
                self._budget,
                path=self._path,
            )


class _Namer:
    """Joins the path to each tensor into its name, counting the bytes of all names before
    they are built."""

    def __init__(self, limits: Limits, path: str | None) -> None:
        self.found: dict[str, Leaf] = {}
        self._limits, self._path = limits, path
        self._size = 0

    def emit(self, path: _Path, tensor: Leaf) -> None:
        size = max(path.chars - 1, 0)  # no dot after the last segment
        self._check(self._size + size)  # bytes >= characters: refused before it is built
        name = ".".join(path.segments)
        if path.wide:
            size = len(name.encode("utf-8", "surrogatepass"))
        self._size += size
        self._check(self._size)
        if name in self.found:
            raise DescriptorError(
                f"two tensors are both named {bounded_repr(name)} (keys that print alike)",
                path=self._path,
                tensor=name,
            )
        self.found[name] = tensor  # named when handed out: a copy per name costs 2 µs

    def _check(self, size: int) -> None:
        if size > self._limits.max_names_size:
            raise LimitExceeded(
                "bytes of tensor names", size, self._limits.max_names_size, path=self._path
            )


def _children(value: object) -> Iterable[tuple[object, object]] | None:
    """The (key, value) pairs under `value`, produced as the walk goes; ``None`` for a leaf."""
    if isinstance(value, dict):
        return value.items()
    if isinstance(value, list | tuple):
        return enumerate(value)
    if isinstance(value, InertObject):
        return module_entries(value)
    return None


def module_entries(value: InertObject) -> list[tuple[object, object]] | None:
    """A pickled ``nn.Module``'s state-dict entries: parameters, persistent buffers, then
    children; ``None`` when `value` is not a module."""
    parameters, buffers = _attribute(value, "_parameters"), _attribute(value, "_buffers")
    modules = _attribute(value, "_modules")
    if not isinstance(parameters, dict) or not isinstance(modules, dict):
        return None
    skipped = _attribute(value, "_non_persistent_buffers_set")
    transient = skipped if isinstance(skipped, set | frozenset) else set()
    entries = [(k, v) for k, v in parameters.items() if v is not None]
    if isinstance(buffers, dict):
        entries += [(k, v) for k, v in buffers.items() if v is not None and k not in transient]
    entries += [(k, v) for k, v in modules.items() if v is not None]
    return entries


def _attribute(value: InertObject, name: str) -> object:
    """``value.attributes.get(name)``, without copying a state that may be shared and huge."""
    state = value.state
    found = None
    for part in state if isinstance(state, tuple) and len(state) == 2 else (state,):
        if isinstance(part, dict) and name in part:
            found = part[name]
    return found


def _module_size(value: InertObject) -> int:
    """Entries `module_entries` scans for `value`, to charge before it scans them."""
    parts = (_attribute(value, name) for name in ("_parameters", "_buffers", "_modules"))
    return sum(len(part) for part in parts if isinstance(part, dict))


def short_repr(value: object, limit: int = _SHORT_SIZE) -> str:
    """A one-line description of `value`, at most `limit` characters, at bounded cost whatever
    the value (`weightstore.base._render.bounded_repr`, which knows tensors and inert records)."""
    return bounded_repr(value, limit=limit, leaf=_leaf)


# Classes of this reader whose repr is short by construction.
_SELF_DESCRIBED = (
    LazyTensor, UnreadableTensor, InertObject, GlobalRef, TorchDType, StorageClass, PersistentRef,
)  # fmt: skip


def _leaf(value: object) -> str | None:
    if isinstance(value, _SELF_DESCRIBED):
        return repr(value)
    if "numpy" not in sys.modules:  # then nothing is a NumPy array or number
        return None
    if isinstance(value, np.ndarray):
        return f"array({value.dtype}, {list(value.shape)})"
    if isinstance(value, np.generic):  # a number: strings and bytes never get here
        return repr(value)
    return None
