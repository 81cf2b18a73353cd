"""What every store shares: its options, the builder methods that set them, and the pipelines.

A store is immutable: every builder returns a new store with one option changed, and a bad
option (an invalid regex) raises at the builder call. Stores that save into memory share one
mutable `_Output` box across their copies, so ``store.get_bytes()`` works on the store the
caller kept. Loads go: container reader (header only) -> snapshots -> remap -> index mapping
-> from-adapter -> apply. Saves go: model -> collect (filter, to-adapter) -> remap -> writer.
"""

from __future__ import annotations

import dataclasses
import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from weightstore._version import __version__
from weightstore.adapters import Adapter
from weightstore.apply_result import ApplyResult
from weightstore.errors import InvalidOptionError, WeightstoreError
from weightstore.paths import (
    KeyRemapper,
    PathFilter,
    PathPredicate,
    map_indices_contiguous,
    map_indices_contiguous_except,
)
from weightstore.snapshot import TensorSnapshot
from weightstore.transfer import IndexMapper, apply, collect

__all__ = ["LoadFailedError", "Store", "StoreOptions"]

StoreT = TypeVar("StoreT", bound="Store")


class LoadFailedError(WeightstoreError, ValueError):
    """A store load left the model incomplete or inconsistent; `result` has every detail."""

    def __init__(self, result: ApplyResult, hint: str, *, path: str | None = None) -> None:
        self.result = result
        super().__init__(f"the load did not succeed\n{result}\n\nHint: {hint}", path=path)


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """Every setting a store has; defaults differ per store and are set by its constructor."""

    filter: PathFilter = field(default_factory=PathFilter)
    remapper: KeyRemapper = field(default_factory=KeyRemapper)
    from_adapter: Adapter | None = None
    to_adapter: Adapter | None = None
    allow_partial: bool = False
    validate: bool = True
    overwrite: bool = False
    metadata: Mapping[str, str] = field(default_factory=dict)
    skip_enum_variants: bool = False
    map_indices_contiguous: bool = False
    map_indices_except: str | None = None
    top_level_key: str | None = None
    auto_extension: bool = True
    dedupe_tied: bool = False


class _Output:
    """The bytes a memory-backed store saved last; shared by a store and its builder copies."""

    def __init__(self, data: bytes | None) -> None:
        self.data = data


def default_metadata(format_name: str) -> dict[str, str]:
    return {"format": format_name, "producer": "weightstore", "version": __version__}


class Store(ABC):
    """Base of `BurnpackStore`, `SafetensorsStore` and `PytorchStore`.

    Subclasses say how to read snapshots from their source and how to write them.
    """

    format_name = ""

    def __init__(
        self,
        *,
        path: str | None = None,
        output: _Output | None = None,
        static: Any = None,
        options: StoreOptions | None = None,
    ) -> None:
        self._path = path
        self._output = output
        self._static = static
        self._options = options or StoreOptions()
        self._cache: dict[str, TensorSnapshot] | None = None

    # -- builders -------------------------------------------------------------------------------

    def _with(self: StoreT, **changes: Any) -> StoreT:
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone._options = dataclasses.replace(self._options, **changes)
        clone._cache = None
        return clone

    @property
    def options(self) -> StoreOptions:
        return self._options

    def with_regex(self: StoreT, pattern: str) -> StoreT:
        """Keep tensors whose path matches `pattern` (OR with other criteria)."""
        return self._with(filter=self._options.filter.with_regex(pattern))

    def with_regexes(self: StoreT, patterns: Iterable[str]) -> StoreT:
        return self._with(filter=self._options.filter.with_regexes(patterns))

    def with_full_path(self: StoreT, path: str) -> StoreT:
        return self._with(filter=self._options.filter.with_full_path(path))

    def with_full_paths(self: StoreT, paths: Iterable[str]) -> StoreT:
        return self._with(filter=self._options.filter.with_full_paths(paths))

    def with_predicate(self: StoreT, predicate: PathPredicate) -> StoreT:
        """Keep tensors for which ``predicate(path, container_path)`` is true."""
        return self._with(filter=self._options.filter.with_predicate(predicate))

    def filter(self: StoreT, path_filter: PathFilter) -> StoreT:
        """Replace the filter; an empty filter means no filtering."""
        return self._with(filter=path_filter)

    def match_all(self: StoreT) -> StoreT:
        return self._with(filter=self._options.filter.match_all())

    def with_key_remapping(self: StoreT, pattern: str, replacement: str) -> StoreT:
        """Rename tensors matching `pattern`, on load and on save; rules chain in order."""
        return self._with(remapper=self._options.remapper.add_pattern(pattern, replacement))

    def remap(self: StoreT, remapper: KeyRemapper) -> StoreT:
        return self._with(remapper=remapper)

    def allow_partial(self: StoreT, allow: bool = True) -> StoreT:
        """Return the report instead of raising when model tensors are missing from the file."""
        return self._with(allow_partial=allow)

    def validate(self: StoreT, validate: bool = True) -> StoreT:
        """Raise on shape, dtype and load errors (default); off, they are only reported."""
        return self._with(validate=validate)

    def overwrite(self: StoreT, overwrite: bool = True) -> StoreT:
        return self._with(overwrite=overwrite)

    def metadata(self: StoreT, key: str, value: str) -> StoreT:
        """Add a metadata pair to saves (same key replaces)."""
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidOptionError(f"metadata must be str -> str, got {key!r}: {value!r}")
        return self._with(metadata={**self._options.metadata, key: value})

    def clear_metadata(self: StoreT) -> StoreT:
        """Drop every metadata pair, the defaults included."""
        return self._with(metadata={})

    def with_from_adapter(self: StoreT, adapter: Adapter) -> StoreT:
        """Adapter applied to file tensors as they load into the model."""
        return self._with(from_adapter=adapter)

    def with_to_adapter(self: StoreT, adapter: Adapter) -> StoreT:
        """Adapter applied to model tensors as they are saved."""
        return self._with(to_adapter=adapter)

    def skip_enum_variants(self: StoreT, skip: bool = True) -> StoreT:
        return self._with(skip_enum_variants=skip)

    def map_indices_contiguous(self: StoreT, enabled: bool = True) -> StoreT:
        """Renumber list indices 0, 1, 2... on both sides before matching names."""
        return self._with(map_indices_contiguous=enabled, map_indices_except=None)

    def map_indices_contiguous_except(self: StoreT, pattern: str) -> StoreT:
        """Like `map_indices_contiguous`, but lists whose prefix matches `pattern` keep theirs."""
        map_indices_contiguous_except([], pattern)  # compiles now: a bad regex fails here
        return self._with(map_indices_contiguous=True, map_indices_except=pattern)

    def with_top_level_key(self: StoreT, key: str) -> StoreT:
        return self._with(top_level_key=key)

    def auto_extension(self: StoreT, enabled: bool = True) -> StoreT:
        return self._with(auto_extension=enabled)

    def dedupe_tied(self: StoreT, enabled: bool = True) -> StoreT:
        """Save a tensor tied under several names once, under its first name."""
        return self._with(dedupe_tied=enabled)

    # -- direct access --------------------------------------------------------------------------

    @abstractmethod
    def _read_snapshots(self) -> list[TensorSnapshot]:
        """Snapshots as the container names them, before remapping."""

    @abstractmethod
    def _write_snapshots(self, snapshots: Sequence[TensorSnapshot]) -> None:
        """Save snapshots (already filtered, adapted and renamed)."""

    def _index_mapper(self) -> IndexMapper | None:
        if not self._options.map_indices_contiguous:
            return None
        pattern = self._options.map_indices_except
        if pattern is None:
            return map_indices_contiguous
        return lambda paths: map_indices_contiguous_except(paths, pattern)

    def _remapped(self, snapshots: Sequence[TensorSnapshot]) -> list[TensorSnapshot]:
        """Snapshots renamed by the remapper, in order; two landing on one name raise."""
        names = self._options.remapper.remap_names(
            (s.full_path for s in snapshots), path=self._path
        )
        by_old = {s.full_path: s for s in snapshots}
        return [by_old[old].with_name(new) for new, old in names.items()]

    def get_all_snapshots(self) -> dict[str, TensorSnapshot]:
        """Every tensor in the source by name, remapped and (when enabled) with list indices
        renumbered; filters are not applied. Sorted by name."""
        if self._cache is None:
            renamed = {s.full_path: s for s in self._remapped(self._read_snapshots())}
            mapper = self._index_mapper()
            if mapper is not None:  # as in Burn: remap first, then renumber lists
                numbering = mapper(renamed)
                renamed = {numbering[n]: s.with_name(numbering[n]) for n, s in renamed.items()}
            self._cache = dict(sorted(renamed.items()))
        return self._cache

    def keys(self) -> list[str]:
        return list(self.get_all_snapshots())

    def __contains__(self, name: object) -> bool:
        return name in self.get_all_snapshots()

    def get_tensor(self, name: str) -> TensorSnapshot | None:
        return self.get_all_snapshots().get(name)

    # -- pipelines ------------------------------------------------------------------------------

    def collect_from(self, model: object) -> None:
        """Save `model` into this store (file or memory), filtered, adapted and renamed."""
        options = self._options
        snapshots = collect(
            model, options.filter, options.to_adapter, dedupe_tied=options.dedupe_tied
        )
        self._cache = None
        self._write_snapshots(self._remapped(snapshots))

    def apply_to(self, model: object, *, device: Any = None) -> ApplyResult:
        """Load this store into `model`, raising `LoadFailedError` as the options say."""
        options = self._options
        result = apply(
            model,
            list(self.get_all_snapshots().values()),
            options.filter,
            options.from_adapter,
            device=device,
            map_indices=self._index_mapper(),
            skip_enum_variants=options.skip_enum_variants,
            source_path=self._path,
        )
        if options.validate and result.errors:
            raise LoadFailedError(
                result, "fix the shapes or dtypes, or use .validate(False)", path=self._path
            )
        if result.missing and not options.allow_partial:
            raise LoadFailedError(
                result,
                "use .allow_partial(True) on the store to get an ApplyResult with the missing "
                "tensors instead of an error",
                path=self._path,
            )
        return result

    def get_bytes(self) -> bytes:
        """What the last save into a memory-backed store wrote."""
        if self._output is None or self._output.data is None:
            raise InvalidOptionError("this store holds no bytes (it is file-backed or unsaved)")
        return self._output.data

    def _target_path(self, extension: str | None) -> str:
        assert self._path is not None
        if extension and self._options.auto_extension and not os.path.splitext(self._path)[1]:
            return f"{self._path}.{extension}"
        return self._path
