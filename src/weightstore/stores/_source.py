"""A store's source: where its bytes are, the one reader open over them, and the format check.

A store is immutable and every builder returns a copy, so what must not be copied lives in
small mutable holders the copies share. `Output` is shared by a store and all its copies: the
bytes a memory-backed store saved last, and a count of saves (a reader opened before a save
reads what is no longer there). `OpenReader` is shared by the copies that read the source the
same way: the reader is opened once, on first use, through `weightstore.locate` (the one
place that tells what is at a path), and closed with the store. A builder that changes how
the source is read (`READER_OPTIONS`: a top-level key, a variant, Burn's extension rule)
gives its copy a holder of its own.

Opening checks the format before the reader parses anything: a SafeTensors store on a ``.pt``
file says it is a PyTorch file, not that its header claims 578 PB (`refuse_foreign`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from weightstore.base._cause import refuse_not_weights
from weightstore.container._format import PROBE_SIZE, ContainerFormat
from weightstore.errors import InvalidOptionError, UnsupportedFormatError
from weightstore.formats import FORMATS, detect_format_of_bytes, what_it_is
from weightstore.io import is_url

if TYPE_CHECKING:
    from weightstore.io._engine import IoChoice
    from weightstore.io._source import ByteSource
    from weightstore.locate import Location
    from weightstore.stores._options import StoreOptions

__all__ = [
    "READER_OPTIONS",
    "STORE_NAMES",
    "OpenReader",
    "Output",
    "file_path",
    "format_of_bytes",
    "is_set_source",
    "located",
    "open_store_reader",
    "refuse_foreign",
]

READER_OPTIONS: Final = frozenset(
    {
        "top_level_key",
        "variant",
        "auto_extension",
        "allow_objects",
        "verify_digests",
        "weights_from",
        "io",
    }
)
"""Store options that change which bytes the reader reads: a copy changing one reads anew."""

STORE_NAMES: dict[str, str] = {}
"""Format name -> the declared store's class name, for the messages that name it (filled
as each declared store is defined)."""


class Output:
    """What saves change, shared by a store and every builder copy of it: the bytes a
    memory-backed store saved last (`in_memory`), and how many saves there have been."""

    __slots__ = ("data", "in_memory", "saves")

    def __init__(self, data: bytes | None = None, *, in_memory: bool = False) -> None:
        self.data = data
        self.in_memory = in_memory
        self.saves = 0


class OpenReader:
    """The reader a store and its copies share: opened on first use, again after a save into
    the store (the old one is closed), and closed with the store (`close`).

    A generic `Store.from_file` seeds it with what it located, and the open file it probed,
    so the first read neither locates nor opens the file again."""

    __slots__ = ("_io", "_location", "_probe", "_reader", "_saves")

    def __init__(self, location: Location | None = None, probe: ByteSource | None = None) -> None:
        self._location = location
        self._probe = probe
        self._reader: Any = None
        self._saves = 0
        self._io: IoChoice | None = None

    @property
    def io_choice(self) -> IoChoice | None:
        """How the open reader reads its file (`weightstore.io._engine.choose_io`)."""
        return self._io

    def record_io(self, choice: IoChoice | None) -> None:
        """Note how the reader being opened reads its file."""
        self._io = choice

    def get(
        self,
        output: Output,
        open_new: Callable[[Location | None, ByteSource | None], Any],
    ) -> Any:
        """The open reader, opened by ``open_new(location, probe)`` when there is none or a
        save came after it (`location` and `probe`: the seed, for the first open only)."""
        if self._reader is not None and self._saves == output.saves:
            return self._reader
        stale, self._reader = self._reader, None
        if stale is not None:
            stale.close()
        location, probe = self._location, self._probe
        self._location = self._probe = None
        if output.saves:  # the seed describes the source before the save
            if probe is not None:
                probe.close()
            location = probe = None
        self._reader = open_new(location, probe)
        self._saves = output.saves
        return self._reader

    def close(self) -> None:
        """Close the reader (a later read opens a new one) and any probe not taken yet."""
        reader, self._reader = self._reader, None
        probe, self._probe = self._probe, None
        if probe is not None:
            probe.close()
        if reader is not None:
            reader.close()


def file_path(fmt: ContainerFormat, path: str, options: StoreOptions, *, for_write: bool) -> str:
    """`path` after the format's extension rule (``model`` -> ``model.bpk``), unless the
    store turned it off (`auto_extension(False)`)."""
    if "auto_extension" in fmt.store_options and not options.auto_extension:
        return path
    return fmt.path_for_write(path) if for_write else fmt.path_for_read(path)


def open_store_reader(
    fmt: ContainerFormat,
    options: StoreOptions,
    *,
    path: str | None,
    static: Any,
    output: Output,
    storage_options: Mapping[str, Any] | None,
    location: Location | None = None,
    probe: ByteSource | None = None,
    on_io: Callable[[IoChoice | None], None] | None = None,
) -> Any:
    """A new reader over a store's source, after checking the bytes are `fmt`'s; `on_io` is
    told how a local file is read (`weightstore.io._engine.choose_io`), None otherwise.

    Raises:
        FileMissingError: nothing is at the path.
        UnsupportedFormatError: the bytes are another format's (named), or a JSON file.
        InvalidOptionError: a memory-backed store nothing was saved into.
    """
    reader = _open_source(
        fmt, options, path, static, output, storage_options, location, probe, on_io
    )
    if not options.verify_digests:
        switch = getattr(reader, "check_digests", None)
        if switch is not None:
            switch(False)
    return reader


def _open_source(
    fmt: ContainerFormat,
    options: StoreOptions,
    path: str | None,
    static: Any,
    output: Output,
    storage_options: Mapping[str, Any] | None,
    location: Location | None,
    probe: ByteSource | None,
    on_io: Callable[[IoChoice | None], None] | None,
) -> Any:
    if path is not None:
        return _open_path(fmt, options, path, storage_options, location, probe, on_io)
    if static is not None:
        assert fmt.open_static is not None
        view = memoryview(static).cast("B")
        refuse_foreign(fmt, bytes(view[:PROBE_SIZE]), view.nbytes, None)
        return fmt.open_static(static)
    if output.data is None:
        raise InvalidOptionError("this store has no bytes to read from (save into it first)")
    assert fmt.open_bytes is not None
    data = output.data
    refuse_foreign(fmt, data[:PROBE_SIZE], len(data), None)
    return fmt.open_bytes(data)


def _open_path(
    fmt: ContainerFormat,
    options: StoreOptions,
    path: str,
    storage_options: Mapping[str, Any] | None,
    location: Location | None,
    probe: ByteSource | None,
    on_io: Callable[[IoChoice | None], None] | None,
) -> Any:
    """`open_store_reader` for a path: located once (the seed, or `_locate`), checked on the
    probed bytes, opened over the probe's own open file, read as the I/O engine chooses for
    a local file (told to `on_io`)."""
    from weightstore.locate import Kind, _locate, open_located

    try:
        if location is None:
            # Burn's rule reads `model` as `model.bpk` only when `model` does not exist,
            # which for a URL only a request tells: the resolver tries both, in that order.
            rule = "auto_extension" not in fmt.store_options or options.auto_extension
            remote = is_url(path)
            target = path if remote else file_path(fmt, path, options, for_write=False)
            location, probe = _locate(
                target, storage_options, options.variant, keep=True, known=fmt,
                extension_rule=remote and rule,
            )  # fmt: skip
        if location.kind is Kind.FILE:
            refuse_foreign(fmt, location.head, location.size, location.path)
    except BaseException:
        if probe is not None:
            probe.close()
        raise
    reader_options: dict[str, Any] = {}
    if options.top_level_key is not None:
        reader_options["top_level_key"] = options.top_level_key
    if "allow_objects" in fmt.store_options and location.kind in (Kind.FILE, Kind.SET):
        reader_options["refuse_code"] = not options.allow_objects
    if options.weights_from is not None:
        if location.kind is not Kind.TRAINING:
            if probe is not None:
                probe.close()
            raise InvalidOptionError(
                "with_weights_from applies to a DeepSpeed ZeRO checkpoint; "
                f"{path} is {location.kind.value}",
                option="weights_from",
            )
        reader_options["weights"] = options.weights_from
    choice, probe = engine_mode(location, options.io, reader_options, probe)
    if on_io is not None:
        on_io(choice)
    return open_located(
        location, fmt, storage_options=storage_options, variant=options.variant, source=probe,
        **reader_options,
    )  # fmt: skip


_ENGINE_KINDS: Final = frozenset({"file", "set", "dcp", "torch-dcp", "training"})
"""The `Kind` values whose readers read local files by the I/O engine's mode."""


def engine_mode(
    location: Location, io: str, reader_options: dict[str, Any], probe: ByteSource | None
) -> tuple[IoChoice | None, ByteSource | None]:
    """How the I/O engine reads what is at `location` with `io` asked
    (`weightstore.io._engine.choose_io`), and the probe left to hand the reader: a mode other
    than mmap goes into `reader_options`, and the mapping opened to probe the file is closed,
    since the reader opens the file its own way. No choice for a URL, nor where the readers
    read their own way (an Orbax checkpoint, through tensorstore).

    Raises:
        InvalidOptionError: `io` is no mode.
    """
    from weightstore.io._engine import check_io_mode, choose_io

    mode = check_io_mode(io)
    if location.is_url or location.kind.value not in _ENGINE_KINDS or _own_io(location):
        return None, probe
    choice = choose_io(location.path, mode)
    if choice.mode != "mmap":
        reader_options["mode"] = choice.mode
        if probe is not None:
            probe.close()
            probe = None
    return choice, probe


def _own_io(location: Location) -> bool:
    """An Orbax checkpoint: tensorstore reads its files itself, whatever the engine says."""
    if location.kind.value != "training":
        return False
    from weightstore.training._open import training_layout

    return training_layout(location.path) == "orbax"


def refuse_foreign(fmt: ContainerFormat, head: bytes, size: int, path: str | None) -> None:
    """Name the real format when the bytes are another's: otherwise a SafeTensors store on a
    ``.pt`` file would report a 578 PB header and advise raising the limit. Bytes no format
    recognises pass: the reader's own error says what is wrong with them.

    Raises:
        UnsupportedFormatError: the bytes are another format's, or a JSON file.
    """
    if fmt.sniff(head, size):
        return
    for other in FORMATS:
        if other is not fmt and other.sniff(head, size):
            store_name = STORE_NAMES.get(other.name, "Store")
            raise UnsupportedFormatError(
                f"is a {other.title} file, not a {fmt.title} file; open it with {store_name} "
                "or Store.from_file, which picks the format",
                path=path,
                found=other.name,
            )
    refuse_not_weights(head, size, path)  # a git-lfs pointer, an HTML page, ...
    what = what_it_is(head, size)
    if what is not None:  # recognised, but by nobody that reads it as one file
        raise UnsupportedFormatError(f"is {what}, not a {fmt.title} file", path=path, found="json")


def is_set_source(path: str) -> bool:
    """Whether a local store path may be a set or DCP checkpoint (a directory or a JSON
    index), so a load may read only part of it; a URL's set is read whole."""
    return path.endswith(".json") or os.path.isdir(path)


def located(
    path: str, storage_options: Mapping[str, Any] | None
) -> tuple[Location, ByteSource | None]:
    """What is at `path` (`weightstore.locate`), and the open file it was probed through,
    which the store's first reader takes over."""
    from weightstore.locate import _locate

    return _locate(path, storage_options, None, keep=True)


def format_of_bytes(data: bytes | bytearray | memoryview) -> ContainerFormat:
    """The format `data`'s first bytes name (`detect_format_of_bytes`)."""
    view = memoryview(data).cast("B")
    return detect_format_of_bytes(bytes(view[:PROBE_SIZE]), view.nbytes)
