"""`Record`: the one way the package writes an immutable value class.

A subclass is declared as a frozen dataclass is, by annotations (its fields, in order) and
class-level values (their defaults)::

    class Span(ValueRecord):
        start: int
        stop: int = 0
        note: str = field(default="", compare=False)

The metaclass reads the annotations when the class is made and gives the class ``__slots__``
from them, a constructor taking the fields by position or keyword (a `TypeError` naming a
missing or unknown argument), assignment refused, a field-by-field ``repr``, `replace`, pickling,
and with `ValueRecord` equality and hash by value. It generates no code: `dataclasses` ``exec``s
each class's methods, 0.3 to 1 ms a class at import, which the classes on the load path (the
PyTorch reader's records, path filters, snapshots, entries) made a visible share of a model's
load; here the constructor is one shared function driven by a tuple of slot setters, as fast as
the generated one.

A class that checks or derives state defines ``__post_init__`` (run by the constructor and so by
`replace`), setting derived fields (declared ``field(init=False)``) with `Record._set`. A class
whose constructor takes other types than it stores (a sequence kept as a tuple) may define
``__init__`` with the fields as parameters, in order, and call ``super().__init__``. Type checkers
see the constructor through `dataclass_transform` (PEP 681). Standard library only, so every
layer may use it.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

    from typing_extensions import dataclass_transform
else:
    try:
        from typing import dataclass_transform
    except ImportError:  # Python 3.10: the decorator only informs type checkers

        def dataclass_transform(**_: Any) -> Any:
            return lambda decorated: decorated


__all__ = ["Record", "RecordMeta", "ValueRecord", "field"]

_R = TypeVar("_R", bound="Record")


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<no default>"


_MISSING: Any = _Missing()


class _Field:
    """What `field` declares about one field; the metaclass consumes it."""

    __slots__ = ("compare", "default", "init", "repr")

    def __init__(self, default: object, init: bool, repr: bool, compare: bool) -> None:
        self.default, self.init, self.repr, self.compare = default, init, repr, compare


def field(
    *, default: Any = _MISSING, init: bool = True, repr: bool = True, compare: bool = True
) -> Any:
    """A field declared with more than a default: left out of the ``repr`` or of equality and
    hash, or (``init=False``) derived state that ``__post_init__`` sets with `Record._set`, which
    the constructor does not take and ``repr``, equality and `replace` ignore."""
    return _Field(default, init, repr, compare)


def _is_class_var(annotation: object) -> bool:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return isinstance(text, str) and text.replace("typing.", "").startswith(("ClassVar", "Final"))


def _own_fields(namespace: dict[str, Any]) -> list[tuple[str, _Field]]:
    """The fields a class body declares, in order, their defaults taken out of the body (a
    slot cannot share its name with a class attribute)."""
    declared = []
    for name, annotation in namespace.get("__annotations__", {}).items():
        if _is_class_var(annotation):
            continue
        value = namespace.pop(name, _MISSING)
        spec = value if isinstance(value, _Field) else _Field(value, True, True, True)
        if isinstance(spec.default, (list, dict, set, bytearray)):
            raise TypeError(f"field {name!r} has a mutable default {spec.default!r}")
        declared.append((name, spec))
    return declared


def _no_check(self: Record) -> None:
    """Check the fields or derive state from them: a class that defines ``__post_init__`` has
    its constructor (and so `Record.replace`) run it."""


class RecordMeta(type):
    """Makes a `Record` class from its annotations: slots, constructor tables, key getters."""

    _FIELDS: tuple[str, ...]
    _SPECS: tuple[tuple[str, _Field], ...]
    _SETTERS: tuple[Callable[[Any, Any], None], ...]
    _STATE: tuple[str, ...]
    _DEFAULTS: dict[str, object]
    _REQUIRED: int
    _TAIL: tuple[object, ...]
    _POST_INIT: bool
    _REPR: tuple[str, ...]
    _KEY: Callable[[Any], object]

    def __new__(
        mcls, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kwargs: Any
    ) -> RecordMeta:
        inherited = [spec for base in bases for spec in getattr(base, "_SPECS", ())]
        if "__slots__" in namespace and any(isinstance(base, RecordMeta) for base in bases):
            raise TypeError(f"{name}: a record declares its fields as annotations, not __slots__")
        own = _own_fields(namespace)
        known = {field_name for field_name, _ in inherited}
        namespace["__slots__"] = tuple(n for n, _ in own if n not in known)
        specs = tuple({**dict(inherited), **dict(own)}.items())
        init = [(n, spec) for n, spec in specs if spec.init]
        seen_default = None
        for field_name, spec in init:
            if spec.default is not _MISSING:
                seen_default = field_name
            elif seen_default is not None:
                raise TypeError(f"{name}: field {field_name!r} without a default follows "
                                f"{seen_default!r}, which has one")  # fmt: skip
        cls = super().__new__(mcls, name, bases, namespace, **kwargs)
        cls._SPECS = specs
        cls._FIELDS = tuple(n for n, _ in init)
        cls._STATE = tuple(n for n, _ in specs)
        cls._SETTERS = tuple(getattr(cls, n).__set__ for n in cls._FIELDS)
        cls._DEFAULTS = {n: spec.default for n, spec in init if spec.default is not _MISSING}
        cls._REQUIRED = len(init) - len(cls._DEFAULTS)  # defaults trail, as checked above
        cls._TAIL = tuple(cls._DEFAULTS.values())
        cls._POST_INIT = getattr(cls, "__post_init__", None) is not _no_check
        if "__init__" not in namespace and bases:
            cls.__init__ = _constructor(cls)  # type: ignore[misc]
        cls._REPR = tuple(n for n, spec in init if spec.repr)
        compared = [n for n, spec in init if spec.compare]
        # attrgetter, not a lambda: it does not bind as a method, and runs in C.
        cls._KEY = attrgetter(*compared) if compared else attrgetter("__class__")
        return cls


def _bind(cls: RecordMeta, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The constructor's arguments in field order, defaults filled in (the slow path: only
    when a call passes keywords or leaves fields to their defaults)."""
    names = cls._FIELDS
    if len(args) > len(names):
        raise TypeError(
            f"{cls.__name__}() takes {len(names)} positional arguments but {len(args)} were given"
        )
    values = list(args)
    for field_name in names[len(args) :]:
        if field_name in kwargs:
            values.append(kwargs.pop(field_name))
        elif field_name in cls._DEFAULTS:
            values.append(cls._DEFAULTS[field_name])
        else:
            raise TypeError(f"{cls.__name__}() missing required argument {field_name!r}")
    if kwargs:
        unknown = sorted(kwargs)[0]
        kind = "multiple values for argument" if unknown in names else "an unexpected argument"
        raise TypeError(f"{cls.__name__}() got {kind} {unknown!r}")
    return tuple(values)


def _init(self: Record, *args: Any, **kwargs: Any) -> None:
    """The constructor `Record` gives a class that defines ``__init__`` (and calls this
    through ``super().__init__``), driven by the class's tables."""
    cls = type(self)
    setters = cls._SETTERS
    if kwargs or len(args) != len(setters):  # lengths match below
        args = _complete(cls, args, kwargs)
    for set_field, value in zip(setters, args, strict=False):
        set_field(self, value)
    if cls._POST_INIT:
        self.__post_init__()


def _complete(cls: RecordMeta, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    if not kwargs and cls._REQUIRED <= len(args) < len(cls._FIELDS):  # trailing defaults
        return args + cls._TAIL[len(args) - cls._REQUIRED :]
    return _bind(cls, args, kwargs)


def _constructor(cls: RecordMeta) -> Callable[..., None]:
    """A constructor for `cls` alone, its slot setters bound to locals.

    Written out for up to eight fields: calling each setter directly costs a third less than
    looping over them, which is what lets a record be made as fast as a dataclass (whose
    constructor is generated code). Wider records loop."""
    setters, post, width = cls._SETTERS, cls._POST_INIT, len(cls._SETTERS)
    required, tail = cls._REQUIRED, cls._TAIL
    if not 0 < width <= 8:
        return _init
    s0, s1, s2, s3, s4, s5, s6, s7 = setters + (None,) * (8 - width)

    def __init__(self: Record, *args: Any, **kwargs: Any) -> None:
        if kwargs or len(args) != width:
            if type(self) is not cls:  # a subclass's own __init__ called super().__init__
                return _init(self, *args, **kwargs)
            if not kwargs and required <= len(args) < width:  # trailing defaults
                args += tail[len(args) - required :]
            else:
                args = _bind(cls, args, kwargs)
        s0(self, args[0])  # type: ignore[misc]
        if width > 1:
            s1(self, args[1])  # type: ignore[misc]
            if width > 2:
                s2(self, args[2])  # type: ignore[misc]
                if width > 3:
                    s3(self, args[3])  # type: ignore[misc]
                    if width > 4:
                        s4(self, args[4])  # type: ignore[misc]
                        if width > 5:
                            s5(self, args[5])  # type: ignore[misc]
                            if width > 6:
                                s6(self, args[6])  # type: ignore[misc]
                                if width > 7:
                                    s7(self, args[7])  # type: ignore[misc]
        if post:
            self.__post_init__()
        return None

    return __init__


def _restore(cls: type[_R], state: tuple[object, ...]) -> _R:
    """Unpickle: set every field, derived ones too, without running the constructor again."""
    record = object.__new__(cls)
    for name, value in zip(cls._STATE, state, strict=True):
        object.__setattr__(record, name, value)
    return record


@dataclass_transform(frozen_default=True, eq_default=False, field_specifiers=(field,))
class Record(metaclass=RecordMeta):
    """Immutable fields declared by annotations; equality is identity."""

    # Filled in by RecordMeta for every class: the constructor's fields, in order; every slot.
    _FIELDS: ClassVar[tuple[str, ...]]
    _STATE: ClassVar[tuple[str, ...]]

    __init__ = _init

    __post_init__ = _no_check

    def _set(self, name: str, value: object) -> None:
        """Set a field during construction (plain assignment is refused)."""
        object.__setattr__(self, name, value)

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._FIELDS)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot delete field {name!r}")

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in type(self)._REPR)
        return f"{type(self).__name__}({shown})"

    def __reduce__(self) -> tuple[Any, ...]:
        return _restore, (type(self), tuple(getattr(self, name) for name in self._STATE))

    def replace(self: _R, **changes: Any) -> _R:
        """A copy with the named fields changed, built through the constructor as
        `dataclasses.replace` does, so a subclass's checks and derived state apply to it."""
        names = self._FIELDS
        if not changes.keys() <= set(names):
            unknown = sorted(set(changes).difference(names))[0]
            raise TypeError(f"{type(self).__name__} has no field {unknown!r}")
        made: _R = type(self)(*[changes[n] if n in changes else getattr(self, n) for n in names])
        return made


class ValueRecord(Record):
    """A `Record` compared and hashed by its fields (those not declared ``compare=False``), as
    a frozen dataclass is."""

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        key = type(self)._KEY
        return bool(key(self) == key(other))

    def __hash__(self) -> int:
        return hash(type(self)._KEY(self))
