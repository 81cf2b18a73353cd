"""One store over the format registry: its source, its reader and the pipelines (the builders
that set its options are `_builders.StoreBuilders`, which it inherits).

A store is a format (a `ContainerFormat` record from the registry), a source (a file, bytes it
owns, or a caller's buffer viewed in place) and immutable options. Every builder returns a new
store with one option changed and checks it at once: a bad regex, or an option the format
cannot honour (`ContainerFormat.store_options`), raises `InvalidOptionError` at the builder
call, never at load time. `BurnpackStore`, `SafetensorsStore` and `PytorchStore` only declare
their format and defaults (`_declared.py`).

Loads go: container reader (header only) -> snapshots -> remap -> index mapping ->
from-adapter -> apply. Saves go: source (a model, or a store, reader, state dict or snapshots)
-> collect (filter, to-adapter) -> remap -> writer, one tensor read at a time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from weightstore.base._gc import collector_paused
from weightstore.container._format import ContainerFormat
from weightstore.errors import InvalidOptionError
from weightstore.io import is_url
from weightstore.stores._builders import StoreBuilders
from weightstore.stores._groups import (
    carry_group_renames,
    source_snapshots,
    source_view,
)
from weightstore.stores._load import (
    apply_snapshots,
    plan_load,
    restricted_load_snapshots,
    verify_before_load,
)
from weightstore.stores._options import StoreOptions
from weightstore.stores._save import default_metadata, marked_defaults, write_snapshots
from weightstore.stores._sets import read_set_report
from weightstore.stores._source import (
    READER_OPTIONS,
    STORE_NAMES,
    OpenReader,
    Output,
    file_path,
    format_of_bytes,
    is_set_source,
    located,
    open_store_reader,
)

if TYPE_CHECKING:
    # At run time each of these is imported by the one method that needs it (a load, a save,
    # a builder), so ``from weightstore import SafetensorsStore`` loads the store alone: the
    # model-walking, snapshot, adapter and writing machinery load with the first use.
    from weightstore.adapters import Adapter, LayoutPlan
    from weightstore.io._engine import IoChoice
    from weightstore.io._source import ByteSource
    from weightstore.locate import Location
    from weightstore.quantized import QuantizedGroup
    from weightstore.report import ApplyResult
    from weightstore.sets._reader import SetReport
    from weightstore.snapshot import TensorSnapshot
    from weightstore.transfer._apply import IndexMapper

__all__ = ["Store", "StoreOptions"]

StoreT = TypeVar("StoreT", bound="Store")
Buffer = bytes | bytearray | memoryview


_STORE_FOR_FORMAT: dict[str, type[Store]] = {}


class Store(StoreBuilders):
    """Where a model's tensors are saved to and loaded from, in any registered format.

    Use a declared store (`BurnpackStore`, `SafetensorsStore`, `PytorchStore`) to fix the
    format, or `Store.from_file` to pick it from the file's content.

    Example:
        >>> store = Store.from_file("model.safetensors").with_regex("^encoder")  # doctest: +SKIP
        >>> result = store.allow_partial().apply_to(model)
    """

    FORMAT: ClassVar[ContainerFormat | None] = None  # set by each declared store
    format_name: ClassVar[str] = ""  # the format's short name, ``"burnpack"``; from FORMAT
    # For a URL, what its filesystem is opened with (`Store.from_file`); None otherwise.
    _storage_options: Mapping[str, Any] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.FORMAT is not None:
            cls.format_name = cls.FORMAT.name
            _STORE_FOR_FORMAT[cls.FORMAT.name] = cls
            STORE_NAMES[cls.FORMAT.name] = cls.__name__

    def __init__(
        self,
        *,
        path: str | None = None,
        output: Output | None = None,
        static: Any = None,
        options: StoreOptions | None = None,
        reading: OpenReader | None = None,
    ) -> None:
        self._path = path
        self._output = output if output is not None else Output()
        self._static = static
        self._options = options if options is not None else self._defaults()
        self._cache: dict[str, TensorSnapshot] | None = None
        # With the cache: each name the list renumbering changed -> the name before it, so
        # that a report names the file's tensors as the file does.
        self._renumbered: dict[str, str] = {}
        self._reading = reading if reading is not None else OpenReader()

    # -- constructors ---------------------------------------------------------------------------

    @classmethod
    def _defaults(cls) -> StoreOptions:
        """The options a new store of this format starts with."""
        fmt = cls._format()
        # GGUF's typed keys describe the model (general.*, llama.*); its writers add no pairs
        # of their own, and neither does a GGUF store.
        marks = fmt.writable and not fmt.typed_metadata
        return StoreOptions(metadata=default_metadata(fmt.name) if marks else {})

    @classmethod
    def _format(cls) -> ContainerFormat:
        if cls.FORMAT is None:
            raise InvalidOptionError("the base Store has no format; use Store.from_file")
        return cls.FORMAT

    @classmethod
    def from_file(
        cls: type[StoreT],
        path: str | os.PathLike[str],
        *,
        storage_options: Mapping[str, Any] | None = None,
    ) -> StoreT:
        """A store over the file at `path`, to load from or save to.

        `path` may be a URL (``s3://bucket/model.safetensors``, ``https://...``, anything
        fsspec opens; docs/remote.md): reads then fetch only the byte ranges they need, and
        `storage_options` go to its filesystem (``{"endpoint_url": ..., "anon": True}``).

        On a declared store the format is the store's. On `Store` itself it is picked from the
        file's first bytes when the file exists, else from its extension (a save target).

        A directory, or an index file (``model.safetensors.index.json``), is a sharded set
        (docs/sharded.md): loads read the set the directory holds, and `Store.from_file` picks
        the format from it.

        A missing file is no error here, since the path may be a save target: reading it
        (`keys`, a load, `read_metadata`) raises `FileMissingError`.

        Raises:
            UnsupportedFormatError: `Store.from_file` on a file no format recognises, on a
                new path whose extension names no format, or on a directory holding no set.
            SetError: `Store.from_file` on a set whose index or shards break the set's rules.
        """
        filename = os.fspath(path)
        if cls.FORMAT is not None:
            store = _new_store(cls, path=filename)
        else:
            location, probe = located(filename, storage_options)
            store_type = cast(type[StoreT], _STORE_FOR_FORMAT[location.require_format().name])
            store = _new_store(store_type, path=filename, reading=OpenReader(location, probe))
        if storage_options is not None:
            store._storage_options = dict(storage_options)
        return store

    @classmethod
    def from_bytes(cls: type[StoreT], data: Buffer | None = None) -> StoreT:
        """A store over bytes to load (copied once if mutable), or with None an empty one to
        save into (`get_bytes` then returns what was saved).

        Raises:
            InvalidOptionError: the format cannot be read from memory (PyTorch checkpoints are
                read from files), or `Store.from_bytes` with no bytes to tell the format by.
            UnsupportedFormatError: `Store.from_bytes` on bytes no format recognises.
        """
        if cls.FORMAT is None:
            if data is None:
                raise InvalidOptionError("Store.from_bytes needs bytes to tell the format by")
            fmt = format_of_bytes(data)
            return cast(StoreT, _STORE_FOR_FORMAT[fmt.name].from_bytes(data))
        fmt = cls._format()
        if fmt.open_bytes is None:
            raise InvalidOptionError(
                f"{fmt.title} stores read files only; use {cls.__name__}.from_file",
                format=fmt.name,
            )
        data = None if data is None else bytes(data)
        return _new_store(cls, output=Output(data, in_memory=True))

    @classmethod
    def from_static(cls: type[StoreT], buffer: Buffer) -> StoreT:
        """A read-only store viewing the caller's buffer in place: tensors are views of it and
        nothing is copied, so the buffer must outlive them and stay unchanged.

        Raises:
            InvalidOptionError: the format cannot view a buffer in place.
        """
        fmt = format_of_bytes(buffer) if cls.FORMAT is None else cls._format()
        store_type = _STORE_FOR_FORMAT[fmt.name]
        if fmt.open_static is None:
            raise InvalidOptionError(
                f"{fmt.title} stores cannot view a buffer in place", format=fmt.name
            )
        return cast(StoreT, _new_store(store_type, static=buffer))

    # -- builders -------------------------------------------------------------------------------

    def _with(self: StoreT, **changes: Any) -> StoreT:
        fmt = self._format()
        for option in changes:
            if option not in fmt.store_options:
                raise InvalidOptionError(
                    f"{fmt.title} stores have no option {option!r}: the format cannot honour it",
                    option=option,
                    format=fmt.name,
                )
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone._options = self._options.replace(**changes)
        clone._cache = None
        clone._renumbered = {}
        reread = READER_OPTIONS & changes.keys()
        if any(getattr(self._options, name) != changes[name] for name in reread):
            clone._reading = OpenReader()  # the copy reads the source another way
        return clone

    @property
    def format(self) -> ContainerFormat:
        """The format this store reads and writes."""
        return self._format()

    @property
    def options(self) -> StoreOptions:
        """The store's settings, as the builders left them."""
        return self._options

    # -- reading --------------------------------------------------------------------------------

    def io_choice(self) -> IoChoice | None:
        """How the store's source file was read and why (`with_io`), once it has been opened;
        None before, in memory and at a URL."""
        return self._reading.io_choice

    def quantized_groups(self) -> list[QuantizedGroup]:
        """The source's quantized tensors (`weightstore.quantized.QuantizedGroup`: layout,
        codes, companions, logical shape, block, the rule that recognised it), under the
        names the file gives, in file order."""
        view = source_view(self._open(), self._source_path())
        return [] if view is None else view.groups()

    def _source_path(self) -> str | None:
        """The path the source is read from, after the extension rule; None in memory."""
        return None if self._path is None else self._file_path(for_write=False)

    def _file_path(self, for_write: bool) -> str:
        assert self._path is not None
        return file_path(self._format(), self._path, self._options, for_write=for_write)

    def reader(self) -> Any:
        """The container reader open over the store's source (a `SetReader` for a set), opened
        on first use and shared with the store's builder copies that read the source the same
        way; `close` closes it. Loads, `keys` and `read_metadata` read through it.

        Raises:
            FileMissingError: nothing is at the path.
            UnsupportedFormatError: the file is another format's (named), or no one's.
        """
        return self._reading.get(self._output, self._open_new)

    _open = reader  # the name the pipelines use

    def _open_new(self, location: Location | None, probe: ByteSource | None) -> Any:
        return open_store_reader(
            self._format(), self._options, path=self._path, static=self._static,
            output=self._output, storage_options=self._storage_options, location=location,
            probe=probe, on_io=self._reading.record_io,
        )  # fmt: skip

    def close(self) -> None:
        """Close the reader the store (and its copies) opened; a later read opens it again."""
        self._reading.close()

    def __enter__(self: StoreT) -> StoreT:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _read_snapshots(self) -> list[TensorSnapshot]:
        """Snapshots as the container names them, in file order, before remapping."""
        return source_snapshots(self._open(), self._source_path(), self._options.dequantize)

    def read_metadata(self) -> dict[str, str]:
        """The source's metadata as strings (PyTorch: the layout's facts; a sharded set: its
        index's, ``total_size`` included, merged with the pairs every shard carries alike:
        `SetReader.metadata`)."""
        return {key: str(value) for key, value in self.reader().metadata().items()}

    def read_typed_metadata(self) -> dict[str, Any]:
        """The source's metadata with its types, for a format that types it (GGUF:
        `weightstore.gguf.GgufValue` values, arrays decoded now); the strings of
        `read_metadata` for the others."""
        reader = self.reader()
        typed = getattr(reader, "metadata_typed", None)
        if not self._format().typed_metadata or typed is None:
            return self.read_metadata()
        values: dict[str, Any] = typed()
        return values

    def set_report(self) -> SetReport | None:
        """What a store over a sharded set leaves out: files in the directory that are not the
        set's (a stale single file, stray shards, other variants or formats) and tensors the
        index and the shards disagree on. Reads every shard's header. None when the store is
        one file or in memory. Loads also warn (`SetWarning`) about a stale single file,
        stray shards and shards that disagree with the index."""
        if self._path is None:
            return None
        options: dict[str, Any] = {}
        if self._options.top_level_key is not None:
            options["top_level_key"] = self._options.top_level_key
        path = self._file_path(for_write=False)
        if is_url(path):
            options["storage_options"] = self._storage_options
        return read_set_report(self._format(), path, self._options, options)

    def _index_mapper(self) -> IndexMapper | None:
        if not self._options.map_indices_contiguous:
            return None
        from weightstore.paths import map_indices_contiguous, map_indices_contiguous_except

        pattern = self._options.map_indices_except
        if pattern is None:
            return map_indices_contiguous
        return lambda paths: map_indices_contiguous_except(paths, pattern)

    def _remapped(self, snapshots: Sequence[TensorSnapshot]) -> list[TensorSnapshot]:
        """Snapshots renamed by the remapper, in order; two landing on one name raise."""
        return list(self._remapped_by_name(snapshots).values())

    def _remapped_by_name(self, snapshots: Sequence[TensorSnapshot]) -> dict[str, TensorSnapshot]:
        """`_remapped`, keyed by the new names (in order)."""
        olds = [s.full_path for s in snapshots]
        remapper = self._options.active_remapper()
        if remapper is None:  # no rule renames, so no two names meet and none changes
            return dict(zip(olds, snapshots, strict=True))
        names = remapper.remap_names(olds, path=self._path)
        by_old = dict(zip(olds, snapshots, strict=True))
        if any(s.group is not None for s in snapshots):  # a group's parts move together
            names = carry_group_renames(names, by_old, self._path)
        return {new: by_old[old].with_name(new) for new, old in names.items()}

    def get_all_snapshots(self) -> dict[str, TensorSnapshot]:
        """Every tensor in the source by name, remapped and (when enabled) with list indices
        renumbered; filters are not applied. Sorted by name."""
        if self._cache is None:
            return self._fill_cache(self._read_snapshots())
        return self._cache

    def _fill_cache(self, snapshots: list[TensorSnapshot]) -> dict[str, TensorSnapshot]:
        """`get_all_snapshots` from the container's own snapshots, cached, with the names the
        renumbering changed remembered (`_renumbered`)."""
        with collector_paused():  # a snapshot per tensor: no garbage, but collections to trigger
            renamed = self._remapped_by_name(snapshots)
            mapper = self._index_mapper()
            self._renumbered = {}
            if mapper is not None:  # as in Burn: remap first, then renumber lists
                numbering = mapper(renamed)
                self._renumbered = {new: old for old, new in numbering.items() if new != old}
                renamed = {numbering[n]: s.with_name(numbering[n]) for n, s in renamed.items()}
            self._cache = dict(sorted(renamed.items()))
            return self._cache

    def keys(self) -> list[str]:
        """The source's tensor names as a load sees them (remapped, renumbered), sorted."""
        return list(self.get_all_snapshots())

    def __contains__(self, name: object) -> bool:
        return name in self.get_all_snapshots()

    def get_tensor(self, name: str) -> TensorSnapshot | None:
        """The lazy snapshot of one tensor by its (remapped) name, or None."""
        return self.get_all_snapshots().get(name)

    # -- pipelines ------------------------------------------------------------------------------

    def collect_from(self, model: object) -> str | None:
        """Save `model`, or any other source, into this store (file or memory), filtered,
        adapted and renamed by this store's options; one tensor is read at a time.

        Args:
            model: a torch module or a dict of NumPy arrays; or a model-free source: another
                store (its tensors as `get_all_snapshots` gives them), a container reader, a
                state dict (names -> torch tensors, NumPy arrays or `TensorSnapshot`s), an
                iterable of `TensorSnapshot`s.

        Returns:
            The path written (after the extension rule: ``model`` -> ``model.bpk``), or None
            for a memory store (`get_bytes` has the file).

        Raises:
            InvalidOptionError: the format is read-only, the store views a static buffer,
                `model` is no source, or the to-adapter needs module types the source lacks.
            DestinationExistsError: the file exists and `overwrite` is off.
        """
        from weightstore.bridge import source_for
        from weightstore.transfer._apply import collect

        options = self._options
        source = source_for(model)
        snapshots = collect(
            source, options.filter, options.to_adapter, dedupe_tied=options.dedupe_tied
        )
        return self._write_snapshots(self._remapped(snapshots), framework=source.framework)

    def _write_snapshots(
        self, snapshots: Sequence[TensorSnapshot], *, framework: str | None = None
    ) -> str | None:
        """Write `snapshots` as this store's format (`_save.write_snapshots`); the path
        written, or None for memory. Readers opened before now are stale."""
        try:
            return write_snapshots(
                snapshots, fmt=self._format(), options=self._options, path=self._path,
                output=self._output, storage_options=self._storage_options, framework=framework,
            )  # fmt: skip
        finally:
            self._cache = None
            self._renumbered = {}
            self._output.saves += 1

    def apply_to(self, model: object, *, device: Any = None) -> ApplyResult:
        """Load this store into `model`, raising `LoadFailedError` as the options say.

        The load is judged before anything is written (`transfer.apply` with `LoadRules`), so
        a load that fails for certain leaves the model unchanged; what only the model's own
        load code or the data can tell is judged after (the error then says the model is
        partly loaded).

        Raises:
            LoadFailedError: shape, dtype or load errors (unless ``validate(False)``); model
                tensors missing from the source (unless ``allow_partial()``); and, whatever
                the options, a load that writes nothing into a model that has tensors. Its
                message names the fix (a key remapping when the names differ by a prefix).
            DigestMismatchError: a tensor's bytes differ from the digest the file carries
                (checked for every tensor before any is written; `verify_digests(False)`
                skips it); the model is unchanged.
        """
        restricted = self._restricted_set_snapshots()
        if restricted is None:
            snapshots = list(self.get_all_snapshots().values())
            verify_before_load(self._open())
            return self._apply_snapshots(model, snapshots, device)
        snapshots, dropped = restricted
        return self._apply_snapshots(model, snapshots, device, unused=dropped)

    def plan(self, model: object, layout: Adapter | None = None) -> LayoutPlan:
        """What a load into `model` through `layout` (default: the layouts of the store's
        from-adapter) would make, without reading any data: which rule makes which model
        tensor from which source tensors, the problems it would meet, and the model tensors
        nothing provides. ``plan.inverse()`` is the layout that saves such a model back to
        this source's names and shapes (docs/layouts.md).

        Raises:
            InvalidOptionError: no layout given, and the from-adapter holds none.
        """
        adapter = self._options.from_adapter if layout is None else layout
        return plan_load(model, list(self.get_all_snapshots().values()), adapter)

    def _restricted_set_snapshots(self) -> tuple[list[TensorSnapshot], list[str]] | None:
        """For a load from a sharded set whose filter decides by name alone: the snapshots of
        the tensors the filter keeps, read through a reader that never opens the shards
        holding none of them, and the names left out; else None (the whole store loads)."""
        if self._path is None or self._cache is not None:
            return None
        filename = self._file_path(for_write=False)
        if not is_set_source(filename):
            return None
        found = restricted_load_snapshots(self._open(), self._options, filename, self._remapped)
        if isinstance(found, list):  # the whole set loads
            self._fill_cache(found)
            return None
        return found

    def _apply_snapshots(
        self,
        model: object,
        snapshots: Sequence[TensorSnapshot],
        device: Any,
        unused: Sequence[str] = (),
        before_reads: Callable[[Sequence[TensorSnapshot]], None] | None = None,
    ) -> ApplyResult:
        """`apply_to` with `snapshots` in place of the store's own (`weightstore.distributed`
        passes a rank's slices of them); the store's options, report and failures as there.
        `unused` names source tensors left out before the load, reported as unused; the report
        names unused tensors as the file does (before list renumbering)."""
        path = None if self._path is None else self._file_path(for_write=False)
        file_names = self._renumbered if self._cache is not None else {}
        choice = self._reading.io_choice
        return apply_snapshots(
            model, snapshots, device, fmt=self._format(), options=self._options, path=path,
            map_indices=self._index_mapper(), opens_under=self._opens_under, unused=unused,
            file_names=file_names, io=None if choice is None else str(choice),
            before_reads=before_reads,
        )  # fmt: skip

    def _opens_under(self, key: str) -> bool:
        """Whether the source opens under top-level key `key` (what a failed load's fix may
        name); the copy's reader is closed again."""
        clone = self.with_top_level_key(key)
        clone.reader()
        clone.close()
        return True

    def get_bytes(self) -> bytes:
        """What the last save into a memory-backed store wrote.

        Raises:
            InvalidOptionError: the store is file-backed or nothing was saved yet.
        """
        if not self._output.in_memory or self._output.data is None:
            raise InvalidOptionError("this store holds no bytes (it is file-backed or unsaved)")
        return self._output.data

    def __repr__(self) -> str:
        source = self._path if self._path is not None else "<memory>"
        return f"{type(self).__name__}({source!r})"


def _new_store(store_type: type[StoreT], **source: Any) -> StoreT:
    """A new store of `store_type` over `source` (``path=``, ``output=`` or ``static=``), with
    the format's default options and the default ``format`` value marked (`_DefaultFormat`)."""
    return store_type(options=marked_defaults(store_type._defaults()), **source)
