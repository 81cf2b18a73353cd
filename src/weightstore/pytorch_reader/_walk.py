"""Naming the tensors of a decoded checkpoint, as ``state_dict`` and Burn name them.

A name is the path to the tensor, segments joined by dots: dict keys, list and tuple indices,
and, through a whole pickled ``nn.Module`` (an `InertObject` whose state holds ``_parameters``,
``_buffers`` and ``_modules``), each module's parameters, then its persistent buffers, then its
children, exactly the order and names ``model.state_dict()`` gives. Buffers listed in
``_non_persistent_buffers_set`` are left out, as ``state_dict`` leaves them out; ``None``
parameters (``bias=False``) are skipped.

Shared references can make a small pickle describe an exponential number of paths (a list
holding one list twice, nested forty deep), and a list can hold itself. The walk stops at a
cycle, and counts every value it visits against ``max_nodes`` and its depth against
``max_depth``, so a hostile file fails with `LimitExceeded` instead of hanging.
"""

from __future__ import annotations

from collections.abc import Sized
from typing import Any

import numpy as np

from weightstore.errors import DescriptorError, LimitExceeded
from weightstore.pytorch_reader._layout import Limits
from weightstore.pytorch_reader._objects import InertObject
from weightstore.pytorch_reader._tensors import LazyTensor, UnreadableTensor

__all__ = ["Leaf", "module_entries", "name_tensors", "short_repr"]

Leaf = LazyTensor | UnreadableTensor
"""What a tensor name leads to: a readable tensor, or one that raises when touched."""
_SHORT_ITEMS = 6  # items shown per container in `short_repr`


def name_tensors(root: object, limits: Limits, path: str | None) -> dict[str, Leaf]:
    """Every tensor reachable from `root`, by dotted name, in walk order."""
    walker = _Walker(limits, path)
    walker.walk(root, "", 0)
    return walker.found


class _Walker:
    def __init__(self, limits: Limits, path: str | None) -> None:
        self.found: dict[str, Leaf] = {}
        self._limits, self._path = limits, path
        self._visited = 0
        self._on_path: set[int] = set()

    def walk(self, value: object, prefix: str, depth: int) -> None:
        self._visited += 1
        if self._visited > self._limits.max_nodes:
            raise LimitExceeded(
                "values visited while naming tensors",
                self._visited,
                self._limits.max_nodes,
                path=self._path,
            )
        if isinstance(value, LazyTensor | UnreadableTensor):
            self._emit(prefix, value)
            return
        children = _children(value)
        if children is None or id(value) in self._on_path:  # a leaf, or a cycle back up
            return
        if depth >= self._limits.max_depth:
            raise LimitExceeded(
                "nesting depth while naming tensors",
                depth + 1,
                self._limits.max_depth,
                path=self._path,
            )
        self._on_path.add(id(value))
        try:
            for segment, child in children:
                self.walk(child, f"{prefix}.{segment}" if prefix else segment, depth + 1)
        finally:
            self._on_path.discard(id(value))

    def _emit(self, name: str, tensor: Leaf) -> None:
        if name in self.found:
            raise DescriptorError(
                f"two tensors are both named {name!r} (keys that print alike)",
                path=self._path,
                tensor=name,
            )
        self.found[name] = tensor.with_name(name) if isinstance(tensor, LazyTensor) else tensor


def _segment(key: object) -> str:
    """A dict key as a name segment: strings as they are, numbers printed, others by repr."""
    if isinstance(key, str):
        return key
    if type(key) is int and key.bit_length() > 64:  # str() of a huge int is slow or refused
        return hex(key)
    if key is None or isinstance(key, bool | int | float):
        return str(key)
    return short_repr(key)


def _children(value: object) -> list[tuple[str, object]] | None:
    if isinstance(value, dict):
        return [(_segment(key), item) for key, item in value.items()]
    if isinstance(value, list | tuple):
        return [(str(index), item) for index, item in enumerate(value)]
    if isinstance(value, InertObject):
        entries = module_entries(value)
        return None if entries is None else [(_segment(k), v) for k, v in entries]
    return None


def module_entries(value: InertObject) -> list[tuple[object, object]] | None:
    """A pickled ``nn.Module``'s state-dict entries: parameters, persistent buffers, then
    children; ``None`` when `value` is not a module."""
    attributes = value.attributes
    parameters, buffers = attributes.get("_parameters"), attributes.get("_buffers")
    modules = attributes.get("_modules")
    if not isinstance(parameters, dict) or not isinstance(modules, dict):
        return None
    skipped = attributes.get("_non_persistent_buffers_set")
    transient = skipped if isinstance(skipped, set | frozenset) else set()
    entries = [(k, v) for k, v in parameters.items() if v is not None]
    if isinstance(buffers, dict):
        entries += [(k, v) for k, v in buffers.items() if v is not None and k not in transient]
    entries += [(k, v) for k, v in modules.items() if v is not None]
    return entries


def short_repr(value: object, limit: int = 60) -> str:
    """A one-line description of `value`, at most `limit` characters, at bounded cost."""
    text = _short(value, 2)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(value: object, depth: int) -> str:
    if isinstance(value, str | bytes | int | float | complex | bool) or value is None:
        return (
            repr(value)
            if not isinstance(value, str | bytes) or len(value) < 80
            else repr(value[:77]) + "..."
        )
    if isinstance(value, np.ndarray):
        return f"array({value.dtype}, {list(value.shape)})"
    if isinstance(value, LazyTensor | UnreadableTensor | InertObject):
        return repr(value)
    if isinstance(value, dict) and depth > 0:
        items = [f"{_short(k, 0)}: {_short(v, depth - 1)}" for k, v in _first(value.items())]
        return "{" + _joined(items, value) + "}"
    if isinstance(value, list | tuple | set | frozenset) and depth > 0:
        items = [_short(item, depth - 1) for item in _first(value)]
        brackets = {list: "[]", tuple: "()"}.get(type(value), "{}")
        return brackets[0] + _joined(items, value) + brackets[1]
    try:
        size = f" of {len(value):,}" if isinstance(value, Sized) else ""
    except (OverflowError, TypeError):  # range(10**30) has no int length
        size = ""
    return f"<{type(value).__name__}{size}>"


def _first(items: Any) -> list[Any]:
    head: list[Any] = []
    for item in items:
        if len(head) == _SHORT_ITEMS:
            break
        head.append(item)
    return head


def _joined(items: list[str], whole: Sized) -> str:
    more = len(whole) - len(items)
    return ", ".join(items) + (f", ... {more:,} more" if more > 0 else "")
