"""One store over the format registry: its options, the builders that set them, the pipelines.

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
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar, cast

from weightstore.base._gc import collector_paused
from weightstore.base._version import __version__
from weightstore.container._format import PROBE_SIZE, ContainerFormat
from weightstore.errors import (
    FileMissingError,
    InvalidOptionError,
    PathIsDirectoryError,
    UnsupportedFormatError,
    WeightstoreError,
)
from weightstore.formats import (
    FORMATS,
    detect_format,
    detect_format_of_bytes,
    format_for_name,
    read_probe,
    what_it_is,
)
from weightstore.io import is_url
from weightstore.stores._options import StoreOptions

if TYPE_CHECKING:
    # At run time each of these is imported by the one method that needs it (a load, a save,
    # a builder), so ``from weightstore import SafetensorsStore`` loads the store alone: the
    # model-walking, snapshot, adapter and writing machinery load with the first use.
    from weightstore.adapters import Adapter
    from weightstore.paths import KeyRemapper, PathFilter, PathPredicate
    from weightstore.report import ApplyResult
    from weightstore.sets._reader import SetReport
    from weightstore.snapshot import TensorSnapshot
    from weightstore.transfer._apply import IndexMapper

__all__ = ["Store", "StoreOptions"]

StoreT = TypeVar("StoreT", bound="Store")
Buffer = bytes | bytearray | memoryview


def _checked_top_level_key(store: Store, result: ApplyResult) -> str | None:
    """The top-level key `result`'s prefix change points at, if `store` can read a
    checkpoint under one and this file opens under that key; else None."""
    change = result.prefix_change()
    key = None if change is None else change.top_level_key
    options_ok = "top_level_key" in store.format.store_options
    if key is None or not options_ok or store.options.top_level_key is not None:
        return None
    try:
        reader = store.with_top_level_key(key)._open()
    except WeightstoreError:  # not a key of the top-level dict: the remapping is the fix
        return None
    reader.close()
    return key


class _Output:
    """The bytes a memory-backed store saved last; shared by a store and its builder copies, so
    ``store.get_bytes()`` works on the store the caller kept."""

    def __init__(self, data: bytes | None) -> None:
        self.data = data


def default_metadata(format_name: str) -> dict[str, str]:
    """The metadata every save carries unless cleared: the format, producer and version."""
    return {"format": format_name, "producer": "weightstore", "version": __version__}


_STORE_FOR_FORMAT: dict[str, type[Store]] = {}


class Store:
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
        self._options = options if options is not None else self._defaults()
        self._cache: dict[str, TensorSnapshot] | None = None

    # -- constructors ---------------------------------------------------------------------------

    @classmethod
    def _defaults(cls) -> StoreOptions:
        """The options a new store of this format starts with."""
        fmt = cls._format()
        metadata = default_metadata(fmt.name) if fmt.writable else {}
        return StoreOptions(metadata=metadata)

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
            fmt = _format_of_path(filename, storage_options)
            store = _new_store(cast(type[StoreT], _STORE_FOR_FORMAT[fmt.name]), path=filename)
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
            fmt = _format_of_bytes(data)
            return cast(StoreT, _STORE_FOR_FORMAT[fmt.name].from_bytes(data))
        fmt = cls._format()
        if fmt.open_bytes is None:
            raise InvalidOptionError(
                f"{fmt.title} stores read files only; use {cls.__name__}.from_file",
                format=fmt.name,
            )
        return _new_store(cls, output=_Output(None if data is None else bytes(data)))

    @classmethod
    def from_static(cls: type[StoreT], buffer: Buffer) -> StoreT:
        """A read-only store viewing the caller's buffer in place: tensors are views of it and
        nothing is copied, so the buffer must outlive them and stay unchanged.

        Raises:
            InvalidOptionError: the format cannot view a buffer in place.
        """
        fmt = _format_of_bytes(buffer) if cls.FORMAT is None else cls._format()
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
        return clone

    @property
    def format(self) -> ContainerFormat:
        """The format this store reads and writes."""
        return self._format()

    @property
    def options(self) -> StoreOptions:
        """The store's settings, as the builders left them."""
        return self._options

    def with_regex(self: StoreT, pattern: str) -> StoreT:
        """Keep tensors whose path matches `pattern` (OR with the other criteria)."""
        return self._with(filter=self._options.filter.with_regex(pattern))

    def with_regexes(self: StoreT, patterns: Iterable[str]) -> StoreT:
        """Keep tensors whose path matches any of `patterns`."""
        return self._with(filter=self._options.filter.with_regexes(patterns))

    def with_full_path(self: StoreT, path: str) -> StoreT:
        """Keep the tensor named exactly `path`."""
        return self._with(filter=self._options.filter.with_full_path(path))

    def with_full_paths(self: StoreT, paths: Iterable[str]) -> StoreT:
        """Keep the tensors named exactly as in `paths`."""
        return self._with(filter=self._options.filter.with_full_paths(paths))

    def with_predicate(self: StoreT, predicate: PathPredicate) -> StoreT:
        """Keep tensors for which ``predicate(path, container_path)`` is true."""
        return self._with(filter=self._options.filter.with_predicate(predicate))

    def filter(self: StoreT, path_filter: PathFilter) -> StoreT:
        """Replace the filter; an empty filter means no filtering."""
        return self._with(filter=path_filter)

    def match_all(self: StoreT) -> StoreT:
        """Keep every tensor (a filter that matches everything)."""
        return self._with(filter=self._options.filter.match_all())

    def with_key_remapping(self: StoreT, pattern: str, replacement: str) -> StoreT:
        """Rename tensors matching `pattern`, on load and on save; rules chain in order."""
        return self._with(remapper=self._options.remapper.add_pattern(pattern, replacement))

    def remap(self: StoreT, remapper: KeyRemapper) -> StoreT:
        """Replace the remapping rules with `remapper`'s."""
        return self._with(remapper=remapper)

    def allow_partial(self: StoreT, allow: bool = True) -> StoreT:
        """Return the report instead of raising when model tensors are missing from the file."""
        return self._with(allow_partial=allow)

    def validate(self: StoreT, validate: bool = True) -> StoreT:
        """Raise on shape, dtype and load errors (default); off, they are only reported."""
        return self._with(validate=validate)

    def overwrite(self: StoreT, overwrite: bool = True) -> StoreT:
        """Let a save replace an existing file (atomically); off, it raises instead."""
        return self._with(overwrite=overwrite)

    def durable(self: StoreT, durable: bool = True) -> StoreT:
        """Fsync a saved file and its directory so the save survives power loss (default).

        ``durable(False)`` skips both fsyncs and keeps the atomic scratch-file-then-rename: a
        crashed process still leaves the old file or the whole new one, but after a power
        loss the new name may hold bytes that never reached the disk. For files that can be
        written again, such as checkpoints of a run that is itself lost with the machine.
        """
        return self._with(durable=durable)

    def with_metadata(self: StoreT, key: str, value: str) -> StoreT:
        """Add a metadata pair to saves (the same key replaces the earlier value).

        Raises:
            InvalidOptionError: the key or value is not a `str`.
        """
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidOptionError(
                f"metadata must be str -> str, got {key!r}: {value!r}", option="metadata"
            )
        return self._with(metadata={**self._options.metadata, key: value})

    def metadata(self: StoreT, key: str, value: str) -> StoreT:
        """Alias of `with_metadata`, the name Burn's store uses."""
        return self.with_metadata(key, value)

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
        """Match file paths without their Burn enum-variant segments (``feature.BaseConv.w`` is
        looked up as ``feature.w``); two file tensors that would meet then raise."""
        return self._with(skip_enum_variants=skip)

    def map_indices_contiguous(self: StoreT, enabled: bool = True) -> StoreT:
        """Renumber list indices 0, 1, 2... on both sides before matching names."""
        return self._with(map_indices_contiguous=enabled, map_indices_except=None)

    def map_indices_contiguous_except(self: StoreT, pattern: str) -> StoreT:
        """Like `map_indices_contiguous`, but lists whose prefix matches `pattern` keep theirs."""
        from weightstore.paths import map_indices_contiguous_except

        map_indices_contiguous_except([], pattern)  # compiles now: a bad regex fails here
        return self._with(map_indices_contiguous=True, map_indices_except=pattern)

    def with_top_level_key(self: StoreT, key: str) -> StoreT:
        """Read the tensors under `key` of a checkpoint's top-level dict (``"state_dict"``)."""
        return self._with(top_level_key=key)

    def auto_extension(self: StoreT, enabled: bool = True) -> StoreT:
        """Give extensionless paths the format's extension (``model`` -> ``model.bpk``)."""
        return self._with(auto_extension=enabled)

    def dedupe_tied(self: StoreT, enabled: bool = True) -> StoreT:
        """Save a tensor tied under several names once, under its first name."""
        return self._with(dedupe_tied=enabled)

    def max_shard_size(self: StoreT, size: int | str) -> StoreT:
        """Save a sharded set into the store's path, a directory (created if missing), with at
        most `size` bytes of tensor data per shard: an int, or decimal text as the Hugging Face
        tools write it (``"5GB"`` = 5 * 10**9 bytes; ``"5GiB"`` = 5 * 2**30). A tensor larger
        than `size` gets a shard of its own; a model that fits in one shard is saved as the
        single file (``model.safetensors``), as huggingface_hub does.

        A save to a path that is an existing directory writes a set without this option, in
        shards of at most "5GB".

        Raises:
            InvalidOptionError: `size` is no size (``"5Gb"``, 0, ...), or the store is in memory.
        """
        from weightstore.sets._size import parse_size

        nbytes = parse_size(size)
        if self._path is None:
            raise InvalidOptionError(
                "a sharded set is a directory of files; open the store with from_file",
                option="max_shard_size",
            )
        return self._with(max_shard_size=nbytes)

    def variant(self: StoreT, name: str | None) -> StoreT:
        """Read and write a sharded set's variant, as transformers' ``variant=`` names it:
        ``model.fp16-00001-of-00002.safetensors`` and ``model.safetensors.index.fp16.json``
        (``model.fp16.safetensors`` when unsharded); None for the plain names. A directory
        holding several variants is read as the one named here.

        Raises:
            InvalidOptionError: `name` is not letters, digits and underscores.
        """
        from weightstore.sets._layout import layout_for

        if name is not None:
            try:  # the layout owns the naming rule
                layout_for(self._format().name).single_name(name)
            except (ValueError, TypeError):
                raise InvalidOptionError(
                    f"a variant is letters, digits and underscores, not {name!r}",
                    option="variant",
                ) from None
        return self._with(variant=name)

    # -- reading --------------------------------------------------------------------------------

    def _file_path(self, for_write: bool) -> str:
        assert self._path is not None
        fmt = self._format()
        if "auto_extension" in fmt.store_options and not self._options.auto_extension:
            return self._path
        return fmt.path_for_write(self._path) if for_write else fmt.path_for_read(self._path)

    def _open(self) -> Any:
        """A reader over the store's source, after checking the bytes are this format's."""
        fmt = self._format()
        if self._path is not None:
            if is_url(self._path) and self._options.auto_extension:
                # Burn's rule reads `model` as `model.bpk` only when `model` does not exist,
                # which for a URL only a request tells: the reader tries both, in that order.
                return self._open_path(self._path)
            return self._open_path(self._file_path(for_write=False))
        if self._static is not None:
            assert fmt.open_static is not None
            view = memoryview(self._static).cast("B")
            self._refuse_foreign(bytes(view[:PROBE_SIZE]), view.nbytes, None)
            return fmt.open_static(self._static)
        if self._output is None or self._output.data is None:
            raise InvalidOptionError("this store has no bytes to read from (save into it first)")
        assert fmt.open_bytes is not None
        data = self._output.data
        self._refuse_foreign(data[:PROBE_SIZE], len(data), None)
        return fmt.open_bytes(data)

    def _open_path(self, filename: str) -> Any:
        """`_open` for a file, opened once: the reader first, then the format check on the
        bytes it already holds. A reader that refuses the file gives way to the check, so a
        foreign or missing file raises exactly what checking first would have raised."""
        fmt = self._format()
        options: dict[str, Any] = {}
        if self._options.top_level_key is not None:
            options["top_level_key"] = self._options.top_level_key
        remote = is_url(filename)
        storage = self._storage_options
        if remote:
            options["storage_options"] = storage
        # A URL is tried as a file first: telling a folder on an object store costs a listing.
        if filename.endswith(".json") or (not remote and os.path.isdir(filename)):
            from weightstore.stores._sets import open_store_set  # sets load with the first set

            set_reader = open_store_set(fmt, filename, self._options, options)
            if set_reader is not None:
                return set_reader
        try:
            reader = fmt.open_file(filename, **options)
        except FileMissingError:
            if not remote:
                head, size = _probe(filename)  # raises what a probe of the path raises
                self._refuse_foreign(head, size, filename)
                raise
            from weightstore.stores._sets import open_store_set  # no object: a folder?

            set_reader = open_store_set(fmt, filename, self._options, options)
            if set_reader is not None:
                return set_reader
            raise
        except Exception:
            head, size = _probe(filename, storage) if remote else _probe(filename)
            self._refuse_foreign(head, size, filename)
            raise  # the file is this format's (or no one's): the reader's error says why
        try:
            found = _head_of(reader)
            if found is None and not remote:  # a URL's reader proved its format by opening
                found = _probe(filename)
            if found is not None:
                self._refuse_foreign(*found, filename)
        except BaseException:
            reader.close()
            raise
        return reader

    def _refuse_foreign(self, head: bytes, size: int, path: str | None) -> None:
        """Name the real format when the bytes are another's: otherwise a SafeTensors store on
        a ``.pt`` file would report a 578 PB header and advise raising the limit."""
        fmt = self._format()
        if fmt.sniff(head, size):
            return
        for other, store_type in _STORE_FOR_FORMAT.items():
            if other != fmt.name and store_type._format().sniff(head, size):
                raise UnsupportedFormatError(
                    f"is a {store_type._format().title} file, not a {fmt.title} file; open it "
                    f"with {store_type.__name__} or Store.from_file, which picks the format",
                    path=path,
                    found=other,
                )
        what = what_it_is(head, size)
        if what is not None:  # recognised, but by nobody that reads it as one file
            raise UnsupportedFormatError(
                f"is {what}, not a {fmt.title} file", path=path, found="json"
            )

    def _read_snapshots(self) -> list[TensorSnapshot]:
        """Snapshots as the container names them, in file order, before remapping."""
        from weightstore.snapshot import reader_snapshots  # the first read loads snapshots

        return reader_snapshots(self._open())

    def read_metadata(self) -> dict[str, str]:
        """The source's metadata as strings (PyTorch: the layout's facts; a sharded set: its
        index's, ``total_size`` included)."""
        return {key: str(value) for key, value in self._open().metadata().items()}

    def set_report(self) -> SetReport | None:
        """What a store over a sharded set leaves out: files in the directory that are not the
        set's (a stale single file, stray shards, other variants or formats) and tensors the
        index and the shards disagree on. Reads every shard's header. None when the store is
        one file or in memory. Loads also warn (`SetWarning`) about a stale single file,
        stray shards and shards that disagree with the index."""
        if self._path is None:
            return None
        from weightstore.stores._sets import read_set_report

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
        return {new: _renamed(by_old[old], new) for new, old in names.items()}

    def get_all_snapshots(self) -> dict[str, TensorSnapshot]:
        """Every tensor in the source by name, remapped and (when enabled) with list indices
        renumbered; filters are not applied. Sorted by name."""
        if self._cache is None:
            self._cache = self._snapshots_by_name(self._read_snapshots())
        return self._cache

    def _snapshots_by_name(self, snapshots: list[TensorSnapshot]) -> dict[str, TensorSnapshot]:
        """`get_all_snapshots` from the container's own snapshots."""
        with collector_paused():  # a snapshot per tensor: no garbage, but collections to trigger
            renamed = self._remapped_by_name(snapshots)
            mapper = self._index_mapper()
            if mapper is not None:  # as in Burn: remap first, then renumber lists
                numbering = mapper(renamed)
                renamed = {numbering[n]: s.with_name(numbering[n]) for n, s in renamed.items()}
            return dict(sorted(renamed.items()))

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
        self._cache = None
        return self._write_snapshots(self._remapped(snapshots), framework=source.framework)

    def _write_snapshots(
        self, snapshots: Sequence[TensorSnapshot], *, framework: str | None = None
    ) -> str | None:
        """Write `snapshots` as this store's format; the path written, or None for memory.
        `framework` (``"pt"``) replaces the default ``format`` metadata where the format
        names frameworks there (`_FRAMEWORK_FORMATS`)."""
        fmt = self._format()
        if fmt.writer is None:
            raise InvalidOptionError(
                f"saving to {fmt.title} format is not supported; save with BurnpackStore or "
                "SafetensorsStore",
                format=fmt.name,
            )
        from weightstore.entry import TensorEntry
        from weightstore.io._atomic import write_atomic

        entries = [
            TensorEntry(s.full_path, s.dtype, s.shape, s.to_numpy, s.param_id) for s in snapshots
        ]
        metadata = _save_metadata(self._options.metadata, fmt, framework)
        directory = self._set_directory()
        if directory is not None:
            return self._write_set(directory, entries, metadata)
        if self._options.variant is not None:
            raise InvalidOptionError(
                "a variant names the files of a sharded set; save into a directory or set "
                "max_shard_size",
                option="variant",
            )
        writer = fmt.writer(entries, metadata)
        if self._path is not None:
            # The store has already applied the extension rule (or auto_extension(False)).
            target = self._file_path(for_write=True)
            options = self._options
            write_atomic(
                target,
                writer.write_to,
                overwrite=options.overwrite,
                durable=options.durable,
                storage_options=self._storage_options,
            )
            return target
        if self._output is not None:
            self._output.data = writer.to_bytes()
            return None
        raise InvalidOptionError("a static buffer store is read-only")

    def _set_directory(self) -> str | None:
        """The directory a save writes a sharded set into: the path as given when
        `max_shard_size` is set, else the path (after the extension rule) when it is an
        existing directory; None for a single-file or memory save. A URL is a directory
        when it ends with ``/`` or its prefix holds objects."""
        if self._path is None:
            return None
        if self._options.max_shard_size is not None:
            return self._path

        if is_url(self._path):
            from weightstore.io._remote_write import is_directory

            if self._path.endswith("/"):  # before the extension rule would add ".bpk"
                return self._path
            target = self._file_path(for_write=True)
            return target if is_directory(target, self._storage_options) else None
        target = self._file_path(for_write=True)
        return target if os.path.isdir(target) else None

    def _write_set(self, directory: str, entries: Sequence[Any], metadata: dict[str, str]) -> str:
        """Save `entries` as a sharded set (`weightstore.sets.write_set`); the index path, or
        the single file's when everything fits in one shard."""
        from weightstore.sets._layout import layout_for
        from weightstore.sets._writer import DEFAULT_MAX_SHARD_SIZE, write_set

        fmt, options = self._format(), self._options
        size = options.max_shard_size
        return write_set(
            directory,
            layout_for(fmt.name),
            fmt,
            entries,
            max_shard_size=DEFAULT_MAX_SHARD_SIZE if size is None else size,
            metadata=metadata,
            overwrite=options.overwrite,
            durable=options.durable,
            variant=options.variant,
            storage_options=self._storage_options,
        )

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
        """
        restricted = self._restricted_set_snapshots()
        if restricted is None:
            return self._apply_snapshots(model, list(self.get_all_snapshots().values()), device)
        snapshots, dropped = restricted
        return self._apply_snapshots(model, snapshots, device, unused=dropped)

    def _restricted_set_snapshots(self) -> tuple[list[TensorSnapshot], list[str]] | None:
        """For a load from a sharded set whose filter decides by name alone: the snapshots of
        the tensors the filter keeps, read through a reader that never opens the shards
        holding none of them, and the names left out; else None (the whole store loads)."""
        if self._path is None or self._cache is not None:
            return None
        filename = self._file_path(for_write=False)
        if not (filename.endswith(".json") or os.path.isdir(filename)):
            return None
        from weightstore.snapshot import reader_snapshots
        from weightstore.stores._sets import restricted_for_load

        whole = self._open()
        restriction = restricted_for_load(whole, self._options, filename)
        if restriction is None:
            self._cache = self._snapshots_by_name(reader_snapshots(whole))
            return None
        reader, dropped = restriction
        with collector_paused():
            snapshots = list(self._remapped_by_name(reader_snapshots(reader)).values())
        return snapshots, dropped

    def _apply_snapshots(
        self,
        model: object,
        snapshots: Sequence[TensorSnapshot],
        device: Any,
        unused: Sequence[str] = (),
    ) -> ApplyResult:
        """`apply_to` with `snapshots` in place of the store's own (`weightstore.distributed`
        passes a rank's slices of them); the store's options, report and failures as there.
        `unused` names source tensors left out before the load, reported as unused."""
        from weightstore.transfer._apply import apply
        from weightstore.transfer._plan import LoadRules

        options = self._options
        path = None if self._path is None else self._file_path(for_write=False)
        if path is not None and is_url(path):  # fetch what the load reads in large batches
            from weightstore.stores._remote_plan import plan_reads_for_load

            plan_reads_for_load(snapshots, options, path)
        rules = LoadRules(validate=options.validate, allow_partial=options.allow_partial)
        with collector_paused():  # no garbage to find, and a full pass over torch's objects costs
            result = apply(
                model,
                snapshots,
                options.active_filter(),
                options.from_adapter,
                device=device,
                map_indices=self._index_mapper(),
                skip_enum_variants=options.skip_enum_variants,
                source_path=path,
                rules=rules,
            )
            if unused:
                result.unused = sorted([*result.unused, *unused])
            result.top_level_key = _checked_top_level_key(self, result)
        failure = result.refused or rules.failure(result)
        if failure is None:
            return result
        from weightstore.stores._load_failure import LoadFailedError, store_fix  # failures only

        raise LoadFailedError(result, failure, store_fix(result, failure), path=path)

    def get_bytes(self) -> bytes:
        """What the last save into a memory-backed store wrote.

        Raises:
            InvalidOptionError: the store is file-backed or nothing was saved yet.
        """
        if self._output is None or self._output.data is None:
            raise InvalidOptionError("this store holds no bytes (it is file-backed or unsaved)")
        return self._output.data

    def __repr__(self) -> str:
        source = self._path if self._path is not None else "<memory>"
        return f"{type(self).__name__}({source!r})"


def _renamed(snapshot: TensorSnapshot, name: str) -> TensorSnapshot:
    """`snapshot` under `name`; itself when that changes nothing, as for every tensor of a
    store without remapping (`with_name` copies a dataclass: a tenth of a meta load's time)."""
    if snapshot.path == tuple(name.split(".")):
        return snapshot
    return snapshot.with_name(name)


def _format_of_path(path: str, storage_options: Mapping[str, Any] | None = None) -> ContainerFormat:
    """The format of an existing file (from its bytes; Burn's extension rule included), or the
    one its extension names when it does not exist yet; for a directory or an index, its set's
    format. A URL is probed with one request, which the reader opened next takes over."""
    if is_url(path):
        return _format_of_url(path, storage_options)
    if path.endswith(".json") or os.path.isdir(path):
        from weightstore.stores._sets import set_format  # sets load with the first set

        found = set_format(path)
        if found is not None:
            return found
        if os.path.isdir(path):
            raise UnsupportedFormatError(
                "is a directory holding no checkpoint set, so its format is unknown; to save a "
                "set into it, use a declared store (SafetensorsStore, BurnpackStore)",
                path=path,
            )
    candidates = [path] + [
        fmt.path_for_read(path) for fmt in FORMATS if fmt.default_extension is not None
    ]
    for candidate in candidates:
        if os.path.isfile(candidate):
            return detect_format(candidate)
    return _format_for_new(path)


def _format_of_url(url: str, storage_options: Mapping[str, Any] | None) -> ContainerFormat:
    """`_format_of_path` for a URL: a set's format for an index or a folder (a prefix on an
    object store), else the object's (its first bytes), else the one its extension names."""
    from weightstore.stores._sets import set_format

    if url.endswith((".json", "/")):
        found = set_format(url, storage_options)
        if found is not None:
            return found
    candidates = dict.fromkeys(
        [url] + [fmt.path_for_read(url) for fmt in FORMATS if fmt.default_extension is not None]
    )
    for candidate in candidates:
        if candidate.endswith("/"):
            continue
        try:
            head, size = read_probe(candidate, storage_options)
        except FileMissingError:
            continue
        return detect_format_of_bytes(head, size, candidate)
    # No object: a folder holding a set (a prefix, one listing), else a save target.
    found = None if url.endswith((".json", "/")) else set_format(url, storage_options)
    return found if found is not None else _format_for_new(url)


def _format_for_new(path: str) -> ContainerFormat:
    """The format a path that does not exist yet names by its extension (a save target)."""
    fmt = format_for_name(path)
    if fmt is None:
        raise UnsupportedFormatError(
            "does not exist and its extension names no format; use a declared store "
            "(BurnpackStore, SafetensorsStore) or one of the extensions "
            + ", ".join(sorted({f".{f.extensions[0]}" for f in FORMATS})),
            path=path,
        )
    return fmt


def _format_of_bytes(data: Buffer) -> ContainerFormat:
    view = memoryview(data).cast("B")
    return detect_format_of_bytes(bytes(view[:PROBE_SIZE]), view.nbytes)


# Formats whose ``format`` metadata names the framework the tensors are for, not the container:
# SafeTensors (transformers refuses a file whose ``format`` is not pt, tf, flax or mlx).
# Burnpack's keeps Burn's meaning, the container's name.
_FRAMEWORK_FORMATS: Final = frozenset({"safetensors"})


class _DefaultFormat(str):
    """The ``format`` metadata value a new store starts with (the container's name), marked
    so a save can tell it from one set with `with_metadata`: only this one is replaced by the
    source's framework (`_save_metadata`). Equal to, and written as, the plain string."""

    __slots__ = ()


def _new_store(store_type: type[StoreT], **source: Any) -> StoreT:
    """A new store of `store_type` over `source` (``path=``, ``output=`` or ``static=``), with
    the format's default options and the default ``format`` value marked (`_DefaultFormat`)."""
    options = store_type._defaults()
    value = options.metadata.get("format")
    if value is not None:
        metadata = {**options.metadata, "format": _DefaultFormat(value)}
        options = options.replace(metadata=metadata)
    return store_type(options=options, **source)


def _save_metadata(
    metadata: Mapping[str, str], fmt: ContainerFormat, framework: str | None
) -> dict[str, str]:
    """The pairs a save writes: the store's, with a default ``format`` replaced by the
    source's framework where the format reads ``format`` so (`_FRAMEWORK_FORMATS`). Values
    become plain strings."""
    pairs = {key: str(value) for key, value in metadata.items()}
    default = isinstance(metadata.get("format"), _DefaultFormat)
    if default and framework is not None and fmt.name in _FRAMEWORK_FORMATS:
        pairs["format"] = framework
    return pairs


def _head_of(reader: object) -> tuple[bytes, int] | None:
    """What `read_probe` would return, from an open container reader's own source (no second
    open of the file); None for readers without one (PyTorch's)."""
    from weightstore.container._reader import ContainerReader  # loaded by then: the reader's base

    if not isinstance(reader, ContainerReader):
        return None
    source = reader._source
    size = source.size
    return bytes(source.read(0, min(PROBE_SIZE, size), "the format probe")), size


def _probe(filename: str, storage_options: Mapping[str, Any] | None = None) -> tuple[bytes, int]:
    """`read_probe`, with a missing file or a directory raised as our typed errors."""
    try:
        return read_probe(filename, storage_options)
    except (FileMissingError, PathIsDirectoryError):
        raise
    except FileNotFoundError as err:
        raise FileMissingError(filename) from err
    except IsADirectoryError as err:
        raise PathIsDirectoryError(filename) from err
