"""Bounded rendering of values a file supplied, for error messages and listings.

`repr()` and `str()` cost as much as the value they print, and a file decides the value: a
477-byte pickle builds a list holding one list twice, forty levels deep (2**40 paths, every one
of which `repr` walks), and CPython refuses to print an int of more than 4,300 digits at all
(`ValueError`). So nothing a file supplied is shown with them; it is shown with `bounded_repr`,
which visits at most `max_nodes` values, shows at most `MAX_REPR_ITEMS` items of a container and
`MAX_REPR_DEPTH` levels of nesting, and returns at most `limit` characters, whatever the value.
Shared references are visited once per path and charged each time, a cycle prints as ``...``,
and an int of more than `MAX_INT_BITS` bits prints as its size (as `bounded_int`, which messages
use for every count and size a file supplied, prints it).

    >>> bounded_repr({"lr": 0.1, "steps": list(range(1000))})
    "{'lr': 0.1, 'steps': [0, 1, 2, 3, 4, 5, ... 994 more]}"
    >>> bounded_repr("x" * 10**6, limit=12)
    "'xxxxxxxx..."
    >>> bounded_repr(2**100_000)
    '<int of 100,001 bits>'
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Final, cast

__all__ = [
    "MAX_INT_BITS",
    "MAX_REPR_DEPTH",
    "MAX_REPR_ITEMS",
    "MAX_REPR_NODES",
    "MAX_REPR_SIZE",
    "LeafRenderer",
    "bounded_int",
    "bounded_repr",
]

MAX_REPR_SIZE: Final = 200
"""Characters `bounded_repr` returns at most by default: one line of a message."""
MAX_REPR_NODES: Final = 64
"""Values `bounded_repr` visits at most by default, containers and their items alike."""
MAX_REPR_ITEMS: Final = 6
"""Items shown per container; the rest are counted (``... 994 more``)."""
MAX_REPR_DEPTH: Final = 8
"""Levels of nesting shown; deeper containers print as ``...``."""
MAX_INT_BITS: Final = 256
"""Ints wider than this print as ``<int of N bits>``: about 77 digits, and `str()` of an int is
quadratic in its length (and refused past 4,300 digits)."""

_Container = (
    dict[object, object] | list[object] | tuple[object, ...] | set[object] | frozenset[object]
)
LeafRenderer = Callable[[object], "str | None"]
"""A hook for values `bounded_repr` does not know (not a builtin scalar, string or container):
returns their text, itself bounded, or ``None`` for the default ``<TypeName of N>``."""


def bounded_int(value: int) -> str:
    """`value` with thousands separators (``1,234``), or ``<int of N bits>`` when it is wider
    than `MAX_INT_BITS`: how every count, size or offset a file supplied appears in a message,
    since ``f"{value:,}"`` of a file's 5,000-digit int raises `ValueError` instead.

        >>> bounded_int(2**20), bounded_int(-(2**300))
        ('1,048,576', '<int of 301 bits>')
    """
    bits = value.bit_length()
    return f"{int(value):,}" if bits <= MAX_INT_BITS else f"<int of {bits:,} bits>"


def bounded_repr(
    value: object,
    *,
    limit: int = MAX_REPR_SIZE,
    max_nodes: int = MAX_REPR_NODES,
    leaf: LeafRenderer | None = None,
) -> str:
    """`value` as `repr` would show it, cut short: at most `limit` characters, ending in
    ``...`` when cut, after visiting at most `max_nodes` values.

    Builtin scalars, strings, bytes, lists, tuples, dicts and sets (and their subclasses, shown
    as the builtin) are rendered here; any other object by `leaf`, else as ``<TypeName>`` (with
    its length when it has one), so no foreign ``__repr__`` ever runs.

    Args:
        value: anything, including cyclic and shared structures.
        limit: characters returned at most (3 or more).
        max_nodes: values visited at most.
        leaf: renders the objects this function does not know; must be bounded itself.
    """
    out = _Renderer(max(limit, 3), max_nodes, leaf)
    out.render(value, 0)
    text = "".join(out.parts)
    return text if len(text) <= limit else text[: max(limit, 3) - 3] + "..."


class _Renderer:
    """One rendering: the pieces so far, their length, and the visits left."""

    __slots__ = ("active", "leaf", "limit", "nodes", "parts", "size")

    def __init__(self, limit: int, max_nodes: int, leaf: LeafRenderer | None) -> None:
        self.parts: list[str] = []
        self.size = 0
        self.limit, self.nodes, self.leaf = limit, max_nodes, leaf
        self.active: set[int] = set()  # ids of the containers being rendered: a cycle's test

    def emit(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)

    def spent(self) -> bool:
        return self.size > self.limit or self.nodes <= 0

    def render(self, value: object, depth: int) -> None:
        self.nodes -= 1
        if isinstance(value, str | bytes | bytearray):
            room = max(self.limit - self.size + 1, 0)  # one more than fits, so a cut shows
            self.emit(repr(value[:room]) + ("..." if len(value) > room else ""))
        elif isinstance(value, bool | float | complex) or value is None:
            self.emit(repr(value))
        elif isinstance(value, int):
            bits = value.bit_length()
            self.emit(repr(int(value)) if bits <= MAX_INT_BITS else bounded_int(value))
        elif isinstance(value, dict | list | tuple | set | frozenset):
            self.container(value, depth)
        elif _is_namespace(value):
            self.namespace(value, depth)
        else:
            self.emit((self.leaf(value) if self.leaf else None) or _default(value))

    def container(self, value: _Container, depth: int) -> None:
        if not value:
            self.emit(_EMPTY.get(type(value)) or _EMPTY[_base(value)])
            return
        if id(value) in self.active or depth >= MAX_REPR_DEPTH:
            self.emit("...")
            return
        opening, closing = _BRACKETS[_base(value)]
        self.active.add(id(value))
        self.emit(opening)
        shown = 0
        pairs = isinstance(value, dict)
        for item in value.items() if isinstance(value, dict) else value:
            if shown == MAX_REPR_ITEMS or self.spent():
                break
            self.emit(", " if shown else "")
            if pairs:
                key, entry = cast(tuple[object, object], item)
                self.render(key, depth + 1)
                self.emit(": ")
                self.render(entry, depth + 1)
            else:
                self.render(item, depth + 1)
            shown += 1
        more = len(value) - shown
        if more:
            self.emit(f", ... {more:,} more")
        elif shown == 1 and isinstance(value, tuple):
            self.emit(",")  # (x,)
        self.emit(closing)
        self.active.discard(id(value))

    def namespace(self, value: object, depth: int) -> None:
        """An ``argparse.Namespace`` as its repr shows it, ``Namespace(lr=0.1, ...)``: a
        training checkpoint's ``args``, whose fields are what a reader wants to see."""
        fields = vars(value)
        if id(value) in self.active or depth >= MAX_REPR_DEPTH:
            self.emit("Namespace(...)")
            return
        self.active.add(id(value))
        self.emit("Namespace(")
        shown = 0
        for key, entry in fields.items():
            if shown == MAX_REPR_ITEMS or self.spent():
                break
            self.emit(", " if shown else "")
            if isinstance(key, str) and len(key) <= _MAX_FIELD_NAME and key.isidentifier():
                self.emit(key)
            else:  # a file's key: long, or no name at all
                self.render(key, depth + 1)
            self.emit("=")
            self.render(entry, depth + 1)
            shown += 1
        more = len(fields) - shown
        self.emit(f", ... {more:,} more)" if more else ")")
        self.active.discard(id(value))


_MAX_FIELD_NAME: Final = 100  # characters of a Namespace field name shown bare


def _is_namespace(value: object) -> bool:
    """Whether `value` is an ``argparse.Namespace`` exactly; never imports argparse (without
    it loaded, nothing is one)."""
    argparse = sys.modules.get("argparse")
    return argparse is not None and type(value) is getattr(argparse, "Namespace", None)


_BRACKETS: Final[dict[type, tuple[str, str]]] = {
    dict: ("{", "}"), list: ("[", "]"), tuple: ("(", ")"), set: ("{", "}"),
    frozenset: ("frozenset({", "})"),
}  # fmt: skip
_EMPTY: Final[dict[type, str]] = {
    dict: "{}", list: "[]", tuple: "()", set: "set()", frozenset: "frozenset()",
}  # fmt: skip


def _base(value: object) -> type:
    """The builtin container type `value` is an instance of (an OrderedDict is a dict)."""
    return next(kind for kind in _BRACKETS if isinstance(value, kind))


def _default(value: object) -> str:
    name = type(value).__name__
    try:
        size = len(value)  # type: ignore[arg-type]
    except Exception:  # no length, or one that does not fit an int (range(10**30))
        return f"<{name}>"
    return f"<{name} of {size:,}>"
