"""`StoreOptions`: every setting a store has, as one immutable value.

Its own module so that what reads a store's settings (the set and remote-read planners, the
pipelines) imports the settings, not the store.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, cast

if TYPE_CHECKING:
    from weightstore.adapters import Adapter
    from weightstore.paths import KeyRemapper, PathFilter

__all__ = ["StoreOptions"]

# `StoreOptions`' fields in declaration order: positional arguments, `replace`, equality, repr.
_OPTION_FIELDS: Final = (
    "filter", "remapper", "from_adapter", "to_adapter", "allow_partial", "validate",
    "overwrite", "metadata", "skip_enum_variants", "map_indices_contiguous",
    "map_indices_except", "top_level_key", "auto_extension", "dedupe_tied", "durable",
    "max_shard_size", "variant",
)  # fmt: skip


class StoreOptions:
    """Every setting a store has, immutable. Field names are the option names that
    `ContainerFormat.store_options` lists; defaults differ per store (`Store._defaults`).

    A plain slotted class rather than a frozen dataclass: the decorator's code generation cost
    more than the rest of the store's import. It behaves as that dataclass did (keyword or
    positional fields, equality and hash by value, assignment refused, `replace`).
    """

    # `filter` and `remapper` are properties over these two: None until first asked for, so a
    # plain load never imports `weightstore.paths` (its regex machinery costs ~1 ms).
    __slots__ = ("_filter", "_remapper", *_OPTION_FIELDS[2:])

    _filter: PathFilter | None
    _remapper: KeyRemapper | None
    from_adapter: Adapter | None
    to_adapter: Adapter | None
    allow_partial: bool
    validate: bool
    overwrite: bool
    metadata: Mapping[str, str]
    skip_enum_variants: bool
    map_indices_contiguous: bool
    map_indices_except: str | None
    top_level_key: str | None
    auto_extension: bool
    dedupe_tied: bool
    durable: bool
    max_shard_size: int | None  # bytes per shard; set: saves write a sharded set
    variant: str | None  # a set's variant ("fp16"): model.fp16-00001-of-00002.safetensors

    def __init__(
        self,
        filter: PathFilter | None = None,  # None: a new empty `PathFilter` (no filtering)
        remapper: KeyRemapper | None = None,  # None: a new `KeyRemapper` without rules
        from_adapter: Adapter | None = None,
        to_adapter: Adapter | None = None,
        allow_partial: bool = False,
        validate: bool = True,
        overwrite: bool = False,
        metadata: Mapping[str, str] | None = None,  # None: no pairs
        skip_enum_variants: bool = False,
        map_indices_contiguous: bool = False,
        map_indices_except: str | None = None,
        top_level_key: str | None = None,
        auto_extension: bool = True,
        dedupe_tied: bool = False,
        durable: bool = True,
        max_shard_size: int | None = None,
        variant: str | None = None,
    ) -> None:
        values = (
            filter, remapper, from_adapter, to_adapter, allow_partial, validate, overwrite,
            {} if metadata is None else metadata, skip_enum_variants, map_indices_contiguous,
            map_indices_except, top_level_key, auto_extension, dedupe_tied, durable,
            max_shard_size, variant,
        )  # fmt: skip
        for name, value in zip(self.__slots__, values, strict=True):
            object.__setattr__(self, name, value)

    @property
    def filter(self) -> PathFilter:
        """Which tensors loads and saves keep; an empty `PathFilter` (keep all) by default."""
        if self._filter is None:
            from weightstore.paths import PathFilter

            object.__setattr__(self, "_filter", PathFilter())
        return cast("PathFilter", self._filter)

    @property
    def remapper(self) -> KeyRemapper:
        """How tensor names are renamed; a `KeyRemapper` without rules by default."""
        if self._remapper is None:
            from weightstore.paths import KeyRemapper

            object.__setattr__(self, "_remapper", KeyRemapper())
        return cast("KeyRemapper", self._remapper)

    def active_filter(self) -> PathFilter | None:
        """The filter when one that drops anything is set, else None (no import, no calls)."""
        kept = self._filter
        return None if kept is None or kept.is_empty else kept

    def active_remapper(self) -> KeyRemapper | None:
        """The remapper when it has rules, else None (no import, no calls)."""
        rules = self._remapper
        return None if rules is None or not rules.rules else rules

    def replace(self, **changes: Any) -> StoreOptions:
        """A copy with the named fields changed (what `dataclasses.replace` did).

        Raises:
            TypeError: a name that is no field.
        """
        # The raw slots: a default filter or remapper not built yet stays unbuilt in the copy.
        raw = (getattr(self, slot) for slot in self.__slots__)
        values = dict(zip(_OPTION_FIELDS, raw, strict=True))
        unknown = changes.keys() - values.keys()
        if unknown:
            raise TypeError(f"StoreOptions has no field {sorted(unknown)[0]!r}")
        values.update(changes)
        return StoreOptions(**values)

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in _OPTION_FIELDS)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: StoreOptions is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: StoreOptions is immutable")

    def __eq__(self, other: object) -> bool:
        if type(other) is not StoreOptions:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in _OPTION_FIELDS)
        return f"StoreOptions({fields})"
