"""`PathFilter`: which tensors a save or a load touches, decided from path strings alone.

A filter holds four kinds of criteria and matches a path when **any** of them does (OR logic, as
Burn's `PathFilter`): a `match_all` flag, exact full paths, regexes (searched anywhere in the
path, as Rust's `is_match`) and predicates called with the path and its container path.

Two departures from Burn, both because Burn's behaviour loses tensors without a word:

* an **empty** filter matches everything, so "no criteria" and "no filter" mean the same for
  every store (Burn's `BurnpackStore` treats an empty filter as "match nothing");
* an invalid regex raises `InvalidOptionError` at the builder call (Burn drops it silently,
  which empties a one-regex filter).

Regex syntax is Rust's or Python's; `weightstore.paths._regex` says what is translated.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TypeAlias

from weightstore.base._record import ValueRecord, field
from weightstore.errors import InvalidOptionError
from weightstore.paths._regex import compile_pattern

PathPredicate: TypeAlias = Callable[[str, str], bool]
"""Called as ``predicate(path, container_path)``; both are dot-joined strings."""


def _strings(values: Iterable[str], what: str) -> tuple[str, ...]:
    """A tuple of `values`, refusing a bare str, which would iterate as single characters."""
    if isinstance(values, str):
        raise InvalidOptionError(f"{what} takes a list of strings, got the str {values!r}")
    items = tuple(values)
    for item in items:
        if not isinstance(item, str):
            raise InvalidOptionError(f"{what} takes strings, got {type(item).__name__}")
    return items


class PathFilter(ValueRecord):
    """Select tensors by path; immutable, each builder method returns a new filter.

    A `ValueRecord` (compared and hashed by its four fields), not a dataclass: this module
    loads with every store, and generating the dataclass cost more at import than the class
    does in use.

    Example:
        >>> keep = PathFilter().with_regex(r"^encoder\\.").with_full_path("head.weight")
        >>> keep.matches("encoder.layers.0.weight"), keep.matches("decoder.bias")
        (True, False)

    Attributes:
        regexes: compiled patterns, in the order added.
        full_paths: exact paths, in the order added.
        predicates: callables ``(path, container_path) -> bool``, in the order added.
        accept_all: set by `match_all()`; matches every path whatever else is set.
    """

    regexes: tuple[re.Pattern[str], ...] = ()
    full_paths: tuple[str, ...] = ()
    predicates: tuple[PathPredicate, ...] = ()
    accept_all: bool = False
    _full_path_set: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        # A set beside the ordered tuple: a load may test thousands of paths against it.
        self._set("_full_path_set", frozenset(self.full_paths))

    def with_regex(self, pattern: str) -> PathFilter:
        """Also match paths in which `pattern` is found (unanchored; use ``^``/``$`` to anchor).

        Raises:
            InvalidOptionError: `pattern` does not compile or uses Rust syntax re would misread.
        """
        return PathFilter(
            (*self.regexes, compile_pattern(pattern)),
            self.full_paths,
            self.predicates,
            self.accept_all,
        )

    def with_regexes(self, patterns: Iterable[str]) -> PathFilter:
        """`with_regex` for each pattern; none is added unless all compile.

        Raises:
            InvalidOptionError: a pattern does not compile, or `patterns` is a bare str.
        """
        compiled = tuple(compile_pattern(p) for p in _strings(patterns, "with_regexes"))
        return PathFilter(
            (*self.regexes, *compiled), self.full_paths, self.predicates, self.accept_all
        )

    def with_full_path(self, path: str) -> PathFilter:
        """Also match exactly `path` (dot-joined, as the store names tensors)."""
        return self.with_full_paths(_strings([path], "with_full_path"))

    def with_full_paths(self, paths: Iterable[str]) -> PathFilter:
        """`with_full_path` for each of `paths`.

        Raises:
            InvalidOptionError: `paths` is a bare str or holds something other than str.
        """
        added = _strings(paths, "with_full_paths")
        return PathFilter(
            self.regexes, (*self.full_paths, *added), self.predicates, self.accept_all
        )

    def with_predicate(self, predicate: PathPredicate) -> PathFilter:
        """Also match when ``predicate(path, container_path)`` is true.

        The container path joins the module types from the root to the tensor's owner with
        ``.``; it is ``""`` where a store knows no types (tensors read from a file).

        Raises:
            InvalidOptionError: `predicate` is not callable.
        """
        if not callable(predicate):
            raise InvalidOptionError(f"with_predicate takes a callable, got {predicate!r}")
        return PathFilter(
            self.regexes, self.full_paths, (*self.predicates, predicate), self.accept_all
        )

    def match_all(self) -> PathFilter:
        """A filter that matches every path; other criteria are kept but no longer matter."""
        return PathFilter(self.regexes, self.full_paths, self.predicates, accept_all=True)

    @property
    def is_empty(self) -> bool:
        """True when nothing was set; an empty filter matches every path (no filtering)."""
        return not (self.accept_all or self.regexes or self.full_paths or self.predicates)

    def matches(self, path: str, container_path: str = "") -> bool:
        """Whether the tensor at `path` is selected; any one criterion is enough.

        Criteria are tried cheapest first: the flag, exact paths, regexes, then predicates,
        which may be arbitrary user code and so run last.
        """
        if self.accept_all or self.is_empty:
            return True
        if path in self._full_path_set:
            return True
        if any(regex.search(path) for regex in self.regexes):
            return True
        return any(predicate(path, container_path) for predicate in self.predicates)

    def __str__(self) -> str:
        if self.accept_all:
            return "PathFilter(all)"
        if self.is_empty:
            return "PathFilter(empty: matches every path)"
        parts = [f"regexes={[r.pattern for r in self.regexes]}"] if self.regexes else []
        if self.full_paths:
            parts.append(f"full_paths={list(self.full_paths)}")
        if self.predicates:
            parts.append(f"predicates={len(self.predicates)}")
        return f"PathFilter({', '.join(parts)})"
