"""`Record`: the base of the package's small immutable value classes, in place of frozen
dataclasses.

Generating a dataclass costs 0.3 to 1 ms at import, and the classes on the load path (the
PyTorch reader's records, path filters, limits, header descriptors) made importing them a
visible share of a whole model's load. A subclass names its fields in order in `_FIELDS`, makes
them (plus any state derived from them) its ``__slots__``, and writes a plain ``__init__`` whose
parameters are those fields, setting each with `Record._set`; the base gives what the
dataclasses did: assignment refused, a field-by-field ``repr``, `replace`, and with
`ValueRecord` equality and hash by value. Standard library only, so every layer may use it.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

__all__ = ["Record", "ValueRecord"]

_R = TypeVar("_R", bound="Record")


class Record:
    """Immutable fields named, in order, by the subclass's `_FIELDS`; equality is identity."""

    __slots__ = ()
    _FIELDS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *values: object) -> None:
        for name, value in zip(self._FIELDS, values, strict=True):
            self._set(name, value)

    def _set(self, name: str, value: object) -> None:
        """Set a field during ``__init__`` (plain assignment is refused)."""
        object.__setattr__(self, name, value)

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._FIELDS)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot delete field {name!r}")

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._FIELDS)
        return f"{type(self).__name__}({shown})"

    def replace(self: _R, **changes: Any) -> _R:
        """A copy with the named fields changed, built through ``__init__`` as
        `dataclasses.replace` does, so a subclass's checks and derived state apply to it."""
        unknown = set(changes).difference(self._FIELDS)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {sorted(unknown)[0]!r}")
        return type(self)(*[changes.get(name, getattr(self, name)) for name in self._FIELDS])


class ValueRecord(Record):
    """A `Record` compared and hashed by its fields, as a frozen dataclass is."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ValueRecord) or other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())
