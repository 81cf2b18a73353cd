"""`StoreOptions`: every setting a store has, as one immutable value.

Its own module so that what reads a store's settings (the set and remote-read planners, the
pipelines) imports the settings, not the store.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, cast

from weightstore.base._record import ValueRecord, field

if TYPE_CHECKING:
    from weightstore.adapters import Adapter
    from weightstore.paths import KeyRemapper, PathFilter

__all__ = ["StoreOptions", "typed_metadata_value"]

_NO_METADATA: Final[Mapping[str, str]] = MappingProxyType({})  # the default, shared read-only


class StoreOptions(ValueRecord):
    """Every setting a store has, immutable. Field names are the option names that
    `ContainerFormat.store_options` lists; defaults differ per store (`Store._defaults`).

    A `ValueRecord` (equality and hash by value, assignment refused, `replace`) whose
    `filter` and `remapper` are properties over two private fields: None until first asked
    for, so a plain load never imports `weightstore.paths` (its regex machinery costs ~1 ms).
    """

    _filter: PathFilter | None = field(default=None, compare=False)
    _remapper: KeyRemapper | None = field(default=None, compare=False)
    from_adapter: Adapter | None = None
    to_adapter: Adapter | None = None
    allow_partial: bool = False
    validate: bool = True
    overwrite: bool = False
    metadata: Mapping[str, Any] = _NO_METADATA  # str values, or typed ones for GGUF
    skip_enum_variants: bool = False
    map_indices_contiguous: bool = False
    map_indices_except: str | None = None
    top_level_key: str | None = None
    auto_extension: bool = True
    dedupe_tied: bool = False
    durable: bool = True
    max_shard_size: int | None = None  # bytes per shard; set: saves write a sharded set
    variant: str | None = None  # a set's variant ("fp16"): model.fp16-00001-of-00002.safetensors
    allow_objects: bool = False  # PyTorch: read a pickle naming globals that would run code
    digests: str | None = None  # saves write digests of this algorithm (docs/integrity.md)
    index_tensor_digests: bool = False  # a set's index lists every tensor's digest too
    verify_digests: bool = True  # reads check the digests a file carries
    quantize: str | None = None  # GGUF saves: quantize float tensors to this ggml type
    dequantize: str | None = None  # quantized groups read as one tensor of this dtype name
    tied_weights: Mapping[str, str] | None = None  # model path -> source name; None: config.json
    weights_from: str | None = None  # a ZeRO checkpoint's "fp32" (default) or "model-states"
    io: str = "auto"  # how local files are read: auto, mmap, pread, direct (io._engine)

    def __init__(
        self,
        filter: PathFilter | None = None,  # None: a new empty `PathFilter` (no filtering)
        remapper: KeyRemapper | None = None,  # None: a new `KeyRemapper` without rules
        from_adapter: Adapter | None = None,
        to_adapter: Adapter | None = None,
        allow_partial: bool = False,
        validate: bool = True,
        overwrite: bool = False,
        metadata: Mapping[str, Any] | None = None,  # None: no pairs
        skip_enum_variants: bool = False,
        map_indices_contiguous: bool = False,
        map_indices_except: str | None = None,
        top_level_key: str | None = None,
        auto_extension: bool = True,
        dedupe_tied: bool = False,
        durable: bool = True,
        max_shard_size: int | None = None,
        variant: str | None = None,
        allow_objects: bool = False,
        digests: str | None = None,
        index_tensor_digests: bool = False,
        verify_digests: bool = True,
        quantize: str | None = None,
        dequantize: str | None = None,
        tied_weights: Mapping[str, str] | None = None,
        weights_from: str | None = None,
        io: str = "auto",
    ) -> None:
        super().__init__(
            filter, remapper, from_adapter, to_adapter, allow_partial, validate, overwrite,
            {} if metadata is None else metadata, skip_enum_variants,
            map_indices_contiguous, map_indices_except, top_level_key, auto_extension,
            dedupe_tied, durable, max_shard_size, variant, allow_objects, digests,
            index_tensor_digests, verify_digests, quantize, dequantize,
            None if tied_weights is None else dict(tied_weights), weights_from, io,
        )  # fmt: skip

    @property
    def filter(self) -> PathFilter:
        """Which tensors loads and saves keep; an empty `PathFilter` (keep all) by default."""
        if self._filter is None:
            from weightstore.paths import PathFilter

            self._set("_filter", PathFilter())
        return cast("PathFilter", self._filter)

    @property
    def remapper(self) -> KeyRemapper:
        """How tensor names are renamed; a `KeyRemapper` without rules by default."""
        if self._remapper is None:
            from weightstore.paths import KeyRemapper

            self._set("_remapper", KeyRemapper())
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
        """A copy with the named fields changed; a default filter or remapper not built yet
        stays unbuilt in the copy.

        Raises:
            TypeError: a name that is no field.
        """
        for public in ("filter", "remapper"):
            if public in changes:
                changes[f"_{public}"] = changes.pop(public)
        return super().replace(**changes)

    # `filter` and `remapper` compare by what they are, built if need be, as they always did:
    # an unbuilt default equals an empty one given.
    def __eq__(self, other: object) -> bool:
        same = super().__eq__(other)
        if same is not True:
            return same
        assert isinstance(other, StoreOptions)
        return self.filter == other.filter and self.remapper == other.remapper

    def __hash__(self) -> int:
        return super().__hash__()  # without filter and remapper: equal values, equal hashes


def typed_metadata_value(value: object) -> bool:
    """A value a typed-metadata format can hold: a scalar, a list of them, or a value that
    carries its own type (`GgufValue`, which the writer checks)."""
    if isinstance(value, (str, bool, int, float)):
        return True
    if isinstance(value, (list, tuple)):
        return all(typed_metadata_value(item) for item in value)
    return hasattr(value, "type") and hasattr(value, "value")
