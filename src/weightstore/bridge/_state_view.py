"""A lazy, mutable state dict: what a model's own loading code sees instead of a dict of tensors.

torch's ``Module._load_from_state_dict`` and the load hooks it runs take a mutable mapping of
names to tensors, which they may read, rename (``sd[new] = sd.pop(old)``), split or fill. A
`LazyStateDict` is that mapping without the tensors: its values stay `Unread` until one is
read (``sd[key]``, ``pop``, ``get``, ``items``), are converted then, and are never cached, so
the load holds only the tensors being copied, not the model. Values a hook stores are kept as
given.

Each module gets its own view, holding the keys under its prefix, as torch gives each module
its own dict (``prefixed``); views of one load share a `Ledger`:

    blocked   names no write may create (filtered out, or failed weightstore's own checks):
              storing one is dropped, so the filter and the checks hold whatever a hook does
    failed    name -> why reading it failed; the reader gets an `Unreadable` in its place
    taken     spare source names some view removed (pop, del, overwrite): consumed by a hook

This module is torch-free: the conversion from array to tensor is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, NoReturn

import numpy as np

from weightstore.bridge._model import READ_ERRORS
from weightstore.transfer._plan import ArrayReader

__all__ = ["LazyStateDict", "Ledger", "Unread", "Unreadable"]

Convert = Callable[["np.ndarray[Any, Any]"], Any]


# Plain classes, not dataclasses: this module is imported by the first torch load, and a slotted
# dataclass costs ~0.4 ms to create, a fifth of a whole load into a meta model.


class Unread:
    """A value not read yet.

    Attributes:
        read: produces the array; may raise one of `READ_ERRORS`.
        spare_name: the source name of a tensor name matching left unused, else None.
    """

    __slots__ = ("read", "spare_name")

    def __init__(self, read: ArrayReader, spare_name: str | None = None) -> None:
        self.read, self.spare_name = read, spare_name

    def __repr__(self) -> str:
        return f"Unread(spare_name={self.spare_name!r})"


class Ledger:
    """What every view of one load shares (see the module docstring)."""

    __slots__ = ("blocked", "failed", "taken")

    def __init__(self, blocked: frozenset[str] = frozenset()) -> None:
        self.blocked = blocked
        self.failed: dict[str, str] = {}
        self.taken: set[str] = set()


class Unreadable:
    """Stands in for a tensor whose data failed to read, so the load goes on.

    torch's loader reports it as "not a tensor" for its key and moves on; code that uses it
    fails with an `AttributeError` that says which tensor could not be read and why.
    """

    __slots__ = ("name", "reason")

    def __init__(self, name: str, reason: str) -> None:
        self.name, self.reason = name, reason

    def __getattr__(self, attribute: str) -> NoReturn:
        raise AttributeError(f"tensor {self.name!r} could not be read: {self.reason}")

    def __repr__(self) -> str:
        return f"Unreadable({self.name!r})"


class LazyStateDict(MutableMapping[str, Any]):
    """A mutable mapping whose `Unread` values are read and converted on each access."""

    def __init__(self, items: dict[str, Any], ledger: Ledger, convert: Convert) -> None:
        self._items = items
        self._ledger = ledger
        self._convert = convert

    def prefixed(self, prefix: str, convert: Convert) -> LazyStateDict:
        """A new view of the keys starting with `prefix`, values still unread (torch builds each
        child module's dict the same way, after the parent's hooks ran)."""
        items = {key: value for key, value in self._items.items() if key.startswith(prefix)}
        return LazyStateDict(items, self._ledger, convert)

    def converting(self, convert: Convert) -> LazyStateDict:
        """This view's keys and values, read through `convert`: shares the dict, so only for
        a view whose dict nothing else holds (one from `by_child` or `empty`)."""
        return LazyStateDict(self._items, self._ledger, convert)

    def by_child(self, prefix: str) -> dict[str, LazyStateDict]:
        """This view's keys under ``prefix + child + "."``, grouped by child name, values still
        unread: what `prefixed` would give each child of the module at `prefix`, in one pass
        over the keys instead of one per child (a wide model has thousands of children)."""
        groups: dict[str, dict[str, Any]] = {}
        start = len(prefix)
        for key, value in self._items.items():
            child, dot, _ = key[start:].partition(".")
            if dot and key.startswith(prefix):  # a hook may have stored any key
                groups.setdefault(child, {})[key] = value
        return {
            child: LazyStateDict(items, self._ledger, self._convert)
            for child, items in groups.items()
        }

    def empty(self) -> LazyStateDict:
        """A view with no keys, sharing this one's ledger."""
        return LazyStateDict({}, self._ledger, self._convert)

    def __getitem__(self, key: str) -> Any:
        value = self._items[key]
        if not isinstance(value, Unread):
            return value
        try:
            return self._convert(value.read())
        except READ_ERRORS as err:
            self._ledger.failed.setdefault(key, str(err))
            return Unreadable(key, str(err))

    def __setitem__(self, key: str, value: Any) -> None:
        if key in self._ledger.blocked:
            return
        self._note_removed(self._items.get(key), value)
        self._items[key] = value

    def __delitem__(self, key: str) -> None:
        self._note_removed(self._items.pop(key), None)

    def __contains__(self, key: object) -> bool:
        return key in self._items  # never reads, unlike Mapping's default

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        """Remove every key without reading any value."""
        for key in list(self._items):
            del self[key]

    def __repr__(self) -> str:
        return f"LazyStateDict({list(self._items)!r})"

    def _note_removed(self, old: Any, new: Any) -> None:
        if isinstance(old, Unread) and old is not new and old.spare_name is not None:
            self._ledger.taken.add(old.spare_name)
