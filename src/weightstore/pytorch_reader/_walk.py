"""Naming the tensors of a decoded checkpoint, as ``state_dict`` and Burn name them.

A name is the path to the tensor, segments joined by dots: dict keys, list and tuple indices,
and, through a whole pickled ``nn.Module`` (an `InertObject` whose state holds ``_parameters``,
``_buffers`` and ``_modules``), each module's parameters, then its persistent buffers, then its
children, exactly the order and names ``model.state_dict()`` gives. Buffers listed in
``_non_persistent_buffers_set`` are left out, as ``state_dict`` leaves them out; ``None``
parameters (``bias=False``) are skipped.

Shared references can make a small pickle describe an exponential number of paths (a list
holding one list twice, nested forty deep), and a list can hold itself. A first pass visits
each distinct container once and finds those from which a tensor can be reached at all; the
walk enters only those, and stops at a cycle. Both count every value they visit (and every
module entry they scan) against ``max_nodes // NAMING_SHARE`` and their depth against
``max_depth``, so a hostile file fails with `LimitExceeded` instead of hanging. A path
is kept as its segments, joined into a name only when it reaches a tensor, and the bytes of all
names together are counted against ``max_names_size`` before each is built: one long key over
many values costs nothing until it names tensors, and then no more than the limit.

`short_repr` renders any decoded value for a listing or a message, at bounded cost.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
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
        LimitExceeded: finding the containers that lead to a tensor, or the walk through them,
            visits more than ``max_nodes // NAMING_SHARE`` values, nests deeper than
            ``max_depth``, or the names come to more than ``max_names_size`` bytes.
        DescriptorError: two tensors get the same name.
    """
    namer = _Namer(limits, path)
    leading = _leading_to_tensors((root,), limits, path)
    _Walker(limits, path, leading, namer.emit).walk(root)
    return namer.found


def tensor_holders(entries: Iterable[object], limits: Limits, path: str | None) -> list[bool]:
    """For each of `entries` (a top-level dict's values), whether it holds a tensor. One
    budget of ``max_nodes // NAMING_SHARE`` visits covers them all, each container visited
    once whichever entries share it."""
    values = list(entries)
    leading = _leading_to_tensors(values, limits, path)
    return [isinstance(value, _LEAVES) or id(value) in leading for value in values]


_LEAVES: Final = (LazyTensor, UnreadableTensor)


class _Budget:
    """Visits charged against naming's share of ``max_nodes``; each pass has its own."""

    __slots__ = ("limit", "path", "visited")

    def __init__(self, limits: Limits, path: str | None) -> None:
        self.limit = max(1, limits.max_nodes // NAMING_SHARE)
        self.path = path
        self.visited = 0

    def exceeded(self) -> LimitExceeded:
        what = "values visited while naming tensors"
        return LimitExceeded(what, self.visited, self.limit, path=self.path)


def _leading_to_tensors(roots: Iterable[object], limits: Limits, path: str | None) -> set[int]:
    """The ids of the containers under `roots` from which some tensor can be reached.

    One pass over the distinct containers (each entered once, its children listed once, the
    holders of each container recorded), then the holders of tensors and, back up those
    records, their holders in turn. A container left out names nothing by any path, so the
    walk skips it; unlike a walk that learns this as it goes, a cycle does not hide it, and a
    graph of shared references costs its size, not its paths. Iterative: the depth checked
    is the pass's own, which a recursive walk would reach too.
    """
    budget = _Budget(limits, path)
    max_depth = limits.max_depth
    holders: dict[int, list[int]] = {}  # container id -> ids of the containers holding it
    holding_tensors: list[int] = []
    entered: set[int] = set()
    for root in roots:
        budget.visited += 1
        if budget.visited > budget.limit:
            raise budget.exceeded()
        root_children = None if id(root) in entered else _child_values(root, budget)
        if root_children is None:
            continue
        entered.add(id(root))
        holders[id(root)] = []
        stack: list[tuple[int, Iterator[object]]] = [(id(root), root_children)]
        while stack:
            holder, children = stack[-1]
            for child in children:
                budget.visited += 1
                if budget.visited > budget.limit:
                    raise budget.exceeded()
                if isinstance(child, _LEAVES):
                    holding_tensors.append(holder)
                    continue
                ident = id(child)
                if ident in entered:
                    holders[ident].append(holder)
                    continue
                grandchildren = _child_values(child, budget)
                if grandchildren is None:
                    continue
                if len(stack) >= max_depth:
                    raise LimitExceeded(
                        "nesting depth while naming tensors", len(stack) + 1, max_depth, path=path
                    )
                entered.add(ident)
                holders[ident] = [holder]
                stack.append((ident, grandchildren))
                break
            else:
                stack.pop()
    leading: set[int] = set()
    while holding_tensors:
        ident = holding_tensors.pop()
        if ident not in leading:
            leading.add(ident)
            holding_tensors += holders.get(ident, ())
    return leading


def _child_values(value: object, budget: _Budget) -> Iterator[object] | None:
    """The values under a container, as `_children` gives them; ``None`` for a leaf. A
    module's entries are charged as they are scanned."""
    if isinstance(value, InertObject):
        budget.visited += _module_size(value)
        if budget.visited > budget.limit:
            raise budget.exceeded()
    children = _children(value)
    if children is None:
        return None
    return (child for _, child in children)


class _Walker:
    """One walk: the values visited so far, the segments of the path to the current value,
    and the containers on the way to it (a cycle's test). It enters only the containers in
    `leading`, those from which a tensor can be reached; `emit` receives each tensor with the
    segments of the path to it.

    Only a container that leads to a tensor is walked more than once: every path to it is
    either a name, which the names limit bounds, or a path that a cycle cuts short, which the
    budget bounds.
    """

    def __init__(
        self,
        limits: Limits,
        path: str | None,
        leading: set[int],
        emit: Callable[[list[str], Leaf], None],
    ) -> None:
        self._limits, self._path, self._emit = limits, path, emit
        self._leading = leading
        self._budget = _Budget(limits, path)
        self._names: list[str] = []
        self._on_path: set[int] = set()  # ids of the containers being walked
        self._rendered: dict[int, str] = {}  # id -> segment, for keys that need rendering

    def walk(self, root: object) -> None:
        """Emit every tensor under `root` (the root itself, if it is one)."""
        budget = self._budget
        budget.visited += 1
        if isinstance(root, _LEAVES):
            self._emit(self._names, root)
        elif id(root) in self._leading:
            budget.visited = self._enter(root, id(root), 0, budget.visited)

    def _enter(self, value: object, ident: int, depth: int, visited: int) -> int:
        """Walk the children of container `value`, which leads to a tensor and is not on the
        path; returns the visits counted so far (a local count: this is the hot loop)."""
        budget = self._budget
        if isinstance(value, InertObject):  # a module's entries are scanned on every visit
            visited += _module_size(value)
            if visited > budget.limit:
                budget.visited = visited
                raise budget.exceeded()
        children = _children(value)
        if children is None:
            return visited
        if depth >= self._limits.max_depth:
            raise LimitExceeded(
                "nesting depth while naming tensors",
                depth + 1,
                self._limits.max_depth,
                path=self._path,
            )
        leading, on_path, names, limit = self._leading, self._on_path, self._names, budget.limit
        on_path.add(ident)
        for key, child in children:
            visited += 1
            if visited > limit:
                budget.visited = visited
                raise budget.exceeded()
            if isinstance(child, _LEAVES):
                names.append(key if type(key) is str else self._segment(key))
                self._emit(names, child)
                names.pop()
                continue
            child_id = id(child)
            if child_id in leading and child_id not in on_path:  # else: names nothing, a cycle
                names.append(key if type(key) is str else self._segment(key))
                visited = self._enter(child, child_id, depth + 1, visited)
                names.pop()
        on_path.discard(ident)
        return visited

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


class _Namer:
    """Joins the path to each tensor into its name, counting the bytes of all names before
    they are built."""

    def __init__(self, limits: Limits, path: str | None) -> None:
        self.found: dict[str, Leaf] = {}
        self._limits, self._path = limits, path
        self._size = 0

    def emit(self, segments: list[str], tensor: Leaf) -> None:
        size = sum(map(len, segments)) + max(len(segments) - 1, 0)  # characters, with dots
        self._check(self._size + size)  # bytes >= characters: refused before it is built
        name = ".".join(segments)
        if not name.isascii():
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
