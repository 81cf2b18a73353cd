"""What is at a path: the one resolver every opener asks, and `open_reader` over it.

`locate` answers once, for the stores (`Store.from_file`), `open_reader` and the command line
alike, so all three accept the same inputs: a file of any registered format, a sharded set
(its directory or index, local or at a URL), a `torch.distributed.checkpoint` directory (saved
through `weightstore.dcp`, or by torch's own writer), or nothing yet (a save target). Its
answer is a `Location`: the kind, the format, the index, and the probed first bytes, which the
opener checks instead of reading them again.

The order of the questions is the order a path is read in: torch's own DCP directory (its
``.metadata``), a DCP directory of ours (it holds JSON that would otherwise read as a set's
index), a set (a directory or a name shaped as an index), a directory holding one model of a
format without sets (a GGUF file or split model: its file, or first part, is what is found), a
file (Burn's extension rule included: ``model`` is ``model.bpk`` when only that exists), else
nothing there. A URL is tried as an object first, since telling a folder on an object store
costs a listing; its probe's request is taken over by the reader opened next
(`weightstore.io._remote_source`), and a local file's open is handed to the reader opened over
the same location (`weightstore.io._open.handing_over`). (A folder at a URL is searched for
sets only.)
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from weightstore.base._record import ValueRecord
from weightstore.container._format import PROBE_SIZE, ContainerFormat
from weightstore.errors import FileMissingError, UnsupportedFormatError
from weightstore.formats import FORMATS, detect_format_of_bytes, format_for_path, read_probe
from weightstore.io import is_url
from weightstore.io._local import BROKEN_SYMLINK, DIRECTORY, MISSING, kind_at, unencodable

if TYPE_CHECKING:
    from weightstore.container._format import TensorReader
    from weightstore.io._source import ByteSource

__all__ = ["Kind", "Location", "locate", "open_located", "open_reader", "reading_format"]

# What `kind_at` may find at a candidate file that leaves nothing there to probe (a save
# target); anything else is opened, and the open refuses what is no regular file by name.
_NOTHING_TO_PROBE: Final = frozenset({MISSING, BROKEN_SYMLINK, DIRECTORY})


class Kind(str, enum.Enum):
    """What a path holds. A new kind of input (a GGUF file, a training checkpoint) is one
    member here, one branch in `locate` and one in `open_located`."""

    FILE = "file"  # one container file of a registered format (or of none: `format` is None)
    SET = "set"  # a sharded set: a directory or an index, its shards one format's files
    DCP = "dcp"  # a torch.distributed.checkpoint directory saved through weightstore.dcp
    TORCH_DCP = "torch-dcp"  # one torch's own FileSystemWriter saved (.metadata, *.distcp)
    TRAINING = "training"  # a DeepSpeed ZeRO, Orbax or NeMo checkpoint (weightstore.training)
    MISSING = "missing"  # nothing there yet (a save target), or a directory holding no set


class Location(ValueRecord):
    """What `locate` found at a path.

    Attributes:
        path: the path as resolved: the file found (``model.bpk`` for ``model``; a GGUF
            model's file, or its first part, for the directory holding it), a set's
            directory or index, a DCP directory or index; as given when nothing is there.
        kind: a `Kind`.
        format: the container format of the file, the set's shards or the DCP rank files; for
            nothing there, the format the name's extension names; None when unknown (bytes
            no format recognises, a directory holding no set, a name naming no format).
        is_url: whether `path` is a URL.
        index: the index file of a set or DCP checkpoint; None for a file, a set that is one
            file, or nothing there.
        head: the file's first `PROBE_SIZE` bytes, as probed; b"" when no file was probed.
        size: the probed file's size in bytes; 0 when no file was probed.
    """

    path: str
    kind: Kind
    format: ContainerFormat | None
    is_url: bool
    index: str | None = None
    head: bytes = b""
    size: int = 0

    @property
    def exists(self) -> bool:
        """Whether something readable is there (any kind but `Kind.MISSING`)."""
        return self.kind is not Kind.MISSING

    def require_format(self) -> ContainerFormat:
        """The format, or the error saying why there is none.

        Raises:
            UnsupportedFormatError: a file no format recognises (what it is, or its first
                bytes), a directory holding no set, or a new path naming no format.
        """
        if self.format is not None:
            return self.format
        if self.kind is Kind.FILE:
            detect_format_of_bytes(self.head, self.size, self.path)  # raises: nothing sniffs
        if self.kind is Kind.MISSING and _is_directory(self.path):
            from weightstore.sets._discover import looked_for

            raise UnsupportedFormatError(
                "is a directory holding no checkpoint set, so there is nothing to load (a save "
                "into it needs a declared store: SafetensorsStore, BurnpackStore); " + looked_for(),
                path=self.path,
            )
        raise UnsupportedFormatError(
            "does not exist and its extension names no format; use a declared store "
            "(BurnpackStore, SafetensorsStore) or one of the extensions "
            + ", ".join(sorted({f".{f.extensions[0]}" for f in FORMATS})),
            path=self.path,
        )


def reading_format(location: Location) -> ContainerFormat:
    """The format a reader of `location` reads, for a reader that needs something there.

    Raises:
        FileMissingError: nothing is at the path (a directory holding no set aside).
        UnsupportedFormatError: as `Location.require_format`.
    """
    if location.kind is Kind.MISSING and not _is_directory(location.path):
        raise _missing(location.path)
    return location.require_format()


def locate(
    path_or_url: str | os.PathLike[str],
    storage_options: Mapping[str, Any] | None = None,
    *,
    variant: str | None = None,
) -> Location:
    """What is at `path_or_url`: its kind, format, index and first bytes.

    Args:
        path_or_url: a file, a set's directory or index, a DCP directory, a URL (anything
            fsspec opens; docs/remote.md), or a path not written yet.
        storage_options: for a URL, what its filesystem is opened with.
        variant: for a set, the variant to find (``"fp16"``); None: the plain set, or the
            only one.

    Raises:
        SetError: a set (or DCP index) that breaks the set's rules (several variants and none
            asked for, a bad index), or a directory holding several GGUF models.

    Example:
        >>> locate("model.safetensors").kind  # doctest: +SKIP
        <Kind.FILE: 'file'>
    """
    location, source = _locate(os.fspath(path_or_url), storage_options, variant, keep=False)
    assert source is None
    return location


def open_reader(
    path: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    variant: str | None = None,
    **options: Any,
) -> TensorReader:
    """A reader over whatever `locate` finds at `path`: a file of any format (picked from its
    bytes), a sharded set (its directory or index: a `SetReader`) or a DCP checkpoint
    directory (a `DcpReader`); a directory holding one GGUF model opens that model (a split
    one, by any part or its directory, as one `GgufSplitReader`).

    Every reader follows one protocol: `names()`, `get(name)`, `get_slice(name)`,
    `metadata()`, and use as a context manager. `path` may be a URL (``s3://...``,
    ``https://...``), read by range requests with `storage_options` (docs/remote.md).
    `options` go to the format's reader (``mode="pread"``, ``top_level_key=``, limits).

    Raises:
        FileMissingError: nothing is at `path`.
        UnsupportedFormatError: bytes no format reads, or a directory holding no set.
        SetError: a set or DCP checkpoint that breaks the set's rules, a directory holding
            several GGUF models, or a split GGUF model whose parts disagree.
        SplitPartMissingError: a part of a split GGUF model is missing (a FileMissingError).

    Example:
        >>> with open_reader("model.safetensors") as reader:  # doctest: +SKIP
        ...     weight = reader.get("fc1.weight")
    """
    location, source = _locate(os.fspath(path), storage_options, variant, keep=True)
    return open_located(
        location, storage_options=storage_options, variant=variant, source=source, **options
    )


def open_located(
    location: Location,
    fmt: ContainerFormat | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    variant: str | None = None,
    source: ByteSource | None = None,
    **options: Any,
) -> TensorReader:
    """A reader over `location`, as `fmt`'s (a set or DCP checkpoint of another format is
    refused by its reader); None: the location's own format.

    `source` is the file `locate` opened to probe it (`_locate` with ``keep``): the reader
    takes it instead of opening the file again, and it is closed if the reader does not.

    Raises:
        as `open_reader`.
    """
    path = location.path
    try:
        if location.kind is Kind.MISSING:
            if not location.is_url and os.path.isdir(path):
                if fmt is None:
                    location.require_format()  # the directory holds no set of any format
                _open_set(path, fmt, variant, options, storage_options)  # raises: no set
            raise _missing(path)
        chosen = fmt if fmt is not None else location.require_format()
        if location.kind in (Kind.TORCH_DCP, Kind.TRAINING):
            return _open_training(location, chosen, options)
        if location.kind is Kind.DCP:
            from weightstore.dcp._reader import open_dcp

            kept = {k: v for k, v in options.items() if k in ("mode", "max_index_size")}
            return open_dcp(path, chosen.name, **kept)
        if location.kind is Kind.SET:
            return _open_set(path, chosen, variant, options, storage_options)
        if chosen.open_file is None:
            raise UnsupportedFormatError(f"{chosen.title} files cannot be opened", path=path)
        if location.is_url:
            options = {**options, "storage_options": storage_options}
        from weightstore.io._open import handing_over

        taken, source = source, None
        with handing_over(taken):
            reader: TensorReader = chosen.open_file(path, **options)
        return reader
    finally:
        if source is not None:
            source.close()


def _open_training(
    location: Location, fmt: ContainerFormat, options: dict[str, Any]
) -> TensorReader:
    """A reader over torch's own DCP checkpoint or another training checkpoint (read-only
    sources that `PytorchStore` stands for): a store of another format is refused, naming
    the stores that read it."""
    if location.kind is not Kind.TORCH_DCP:
        what = "a training checkpoint (DeepSpeed ZeRO, Orbax or NeMo)"
    elif location.index is None:
        what = "a directory of torch HuggingFaceStorageWriter shards"
    else:
        what = "a torch.distributed.checkpoint directory of torch.save items"
    if location.format is not None and fmt is not location.format:
        raise UnsupportedFormatError(
            f"is {what}, not {fmt.title} files; open it with the {location.format.title} "
            "store, or Store.from_file, which picks the format",
            path=location.path,
            found=location.kind.value,
        )
    kept = {k: v for k, v in options.items() if k in ("mode", "max_index_size", "weights")}
    if location.kind is Kind.TORCH_DCP and location.index is None:
        from weightstore.dcp._hf_sharded import open_hf_sharded

        return open_hf_sharded(location.path, mode=kept.get("mode", "mmap"))
    if location.kind is Kind.TORCH_DCP:
        from weightstore.dcp._torch_reader import open_torch_dcp

        return open_torch_dcp(location.path, **kept)
    from weightstore.training._open import open_training, training_layout

    layout = training_layout(location.path)
    if layout is None:  # gone since it was located
        raise _missing(location.path)
    reader: TensorReader = open_training(location.path, layout, **kept)
    return reader


def _open_set(
    path: str,
    fmt: ContainerFormat | None,
    variant: str | None,
    options: dict[str, Any],
    storage_options: Mapping[str, Any] | None,
) -> TensorReader:
    from weightstore.sets._reader import open_set

    remote: dict[str, Any] = {"storage_options": storage_options} if is_url(path) else {}
    name = None if fmt is None else fmt.name
    return open_set(path, name, variant=variant, **options, **remote)


# -- finding ------------------------------------------------------------------------------------


def _locate(
    path: str,
    storage_options: Mapping[str, Any] | None,
    variant: str | None,
    *,
    keep: bool,
    known: ContainerFormat | None = None,
    extension_rule: bool = True,
) -> tuple[Location, ByteSource | None]:
    """`locate`, and with `keep` the open source a local file was probed through (for the
    reader opened next; the caller closes it). `known`: the format the caller reads as (a
    declared store), taken for a set or DCP checkpoint without reading its index, whose
    reader checks it; only its extension rule is tried then, and none without
    `extension_rule` (a store that applied it, or turned it off)."""
    candidates = _candidates(path, known, extension_rule)
    if is_url(path):
        return _locate_url(path, storage_options, variant, known, candidates), None
    is_dir = os.path.isdir(path)
    if is_dir or path.endswith(".metadata"):
        from weightstore.dcp._names import TORCH_DCP_METADATA_NAME, is_torch_dcp_checkpoint

        if is_torch_dcp_checkpoint(path):
            from weightstore.pytorch_reader import FORMAT as PYTORCH

            index = path if not is_dir else os.path.join(path, TORCH_DCP_METADATA_NAME)
            return Location(path, Kind.TORCH_DCP, PYTORCH, False, index), None
    if is_dir:
        from weightstore.dcp._hf_sharded import is_hf_sharded_checkpoint

        if is_hf_sharded_checkpoint(path):  # torch's HuggingFaceStorageWriter, sharded
            from weightstore.safetensors import FORMAT as SAFETENSORS

            return Location(path, Kind.TORCH_DCP, SAFETENSORS, False), None
    if is_dir or path.endswith(".nemo"):
        from weightstore.training._open import training_layout

        if training_layout(path) is not None:
            from weightstore.pytorch_reader import FORMAT as PYTORCH

            return Location(path, Kind.TRAINING, PYTORCH, False), None
    if is_dir or path.endswith(".json"):  # every index is named *.json: else no set modules
        from weightstore.dcp._names import is_dcp_checkpoint
        from weightstore.sets._discover import is_index_name

        if is_dcp_checkpoint(path):
            return _dcp_location(path, known, keep), None
        if is_dir or is_index_name(path):
            found = _set_location(path, storage_options, variant, known)
            if found is not None:
                return found, None
            if is_dir:
                model = _model_in_directory(path, known)
                if model is None:
                    return Location(path, Kind.MISSING, None, False), None
                return _probed(model, keep)
    for candidate in candidates:
        if kind_at(candidate) not in _NOTHING_TO_PROBE:  # a FIFO, a loop: the probe refuses it
            return _probed(candidate, keep)
    return Location(path, Kind.MISSING, format_for_path(path), False), None


def _model_in_directory(directory: str, known: ContainerFormat | None) -> str | None:
    """The file that opens the one model a directory holding no set holds, for a format
    whose multi-file models are no set (`ContainerFormat.find_in_directory`: a split GGUF
    model's first part); None when there is none.

    Raises:
        SetError: the directory holds several such models.
    """
    for fmt in FORMATS if known is None else (known,):
        if fmt.find_in_directory is not None:
            found = fmt.find_in_directory(directory)
            if found is not None:
                return found
    return None


def _candidates(path: str, known: ContainerFormat | None, extension_rule: bool) -> list[str]:
    """The files `path` may name, in order: itself, then as the extension rules read it."""
    if not extension_rule:
        return [path]
    rules = FORMATS if known is None else (known,)
    ruled = [fmt.path_for_read(path) for fmt in rules if fmt.default_extension]
    return list(dict.fromkeys([path, *ruled]))


def _probed(path: str, keep: bool) -> tuple[Location, ByteSource | None]:
    """The location of the local file at `path`, from its first bytes; with `keep`, read
    through a mapped source the caller is handed."""
    if not keep:
        head, size = read_probe(path)
        return Location(path, Kind.FILE, _sniffed(head, size), False, None, head, size), None
    from weightstore.io._open import open_source

    source = open_source(path)
    try:
        size = source.size
        head = bytes(source.read(0, min(PROBE_SIZE, size), "the format probe"))
    except BaseException:
        source.close()
        raise
    return Location(path, Kind.FILE, _sniffed(head, size), False, None, head, size), source


def _sniffed(head: bytes, size: int) -> ContainerFormat | None:
    return next((fmt for fmt in FORMATS if fmt.sniff(head, size)), None)


def _dcp_location(path: str, known: ContainerFormat | None, keep: bool = False) -> Location:
    """A DCP checkpoint's location; without `known`, its index tells the rank files' format,
    and with `keep` (an open follows) the parsed index is handed to that open."""
    from weightstore.dcp._names import DCP_INDEX_NAME

    index = path if not os.path.isdir(path) else os.path.join(path, DCP_INDEX_NAME)
    if known is None:
        from weightstore.dcp._index import read_dcp_index
        from weightstore.dcp._reader import container_format

        known = container_format(read_dcp_index(path, hand_over=keep))
    return Location(path, Kind.DCP, known, False, index)


def _set_location(
    path: str,
    storage_options: Mapping[str, Any] | None,
    variant: str | None,
    known: ContainerFormat | None,
) -> Location | None:
    """The set at a directory or index-named `path`; a missing index's name names a format
    for a save; None for a directory (or folder) holding no set.

    Raises:
        SetError: the set cannot be read as one.
    """
    from weightstore.sets._discover import INDEX_NAME, formats_in

    remote = is_url(path)
    name = path.rstrip("/").rsplit("/", 1)[-1] if remote else os.path.basename(path)
    match = INDEX_NAME.fullmatch(name)
    if match is None and not formats_in(path.rstrip("/") if remote else path, storage_options):
        return None
    if match is not None and not remote and not os.path.exists(path):
        return Location(path, Kind.MISSING, format_for_path(f"index.{match['ext']}"), False)
    if known is not None:
        return Location(path, Kind.SET, known, remote, path if match is not None else None)
    from weightstore.sets._reader import located_set

    try:
        fmt, index = located_set(path, storage_options, variant=variant)
    except FileMissingError:
        if match is None or not remote:
            raise
        return Location(path, Kind.MISSING, format_for_path(f"index.{match['ext']}"), True)
    return Location(path, Kind.SET, fmt, remote, index)


def _locate_url(
    url: str,
    storage_options: Mapping[str, Any] | None,
    variant: str | None,
    known: ContainerFormat | None,
    candidates: list[str],
) -> Location:
    """`_locate` for a URL: a set for an index or a folder (``/``), else the object (its first
    bytes, one request the reader takes over), else a folder holding a set (one listing), else
    nothing there (a save target, its format the one its extension names)."""
    folder_like = url.endswith((".json", "/"))
    if folder_like:
        found = _set_location(url, storage_options, variant, known)
        if found is not None:
            return found
    for candidate in candidates:
        if candidate.endswith("/"):
            continue
        try:
            head, size = read_probe(candidate, storage_options)
        except FileMissingError:
            continue
        return Location(candidate, Kind.FILE, _sniffed(head, size), True, None, head, size)
    found = None if folder_like else _set_location(url, storage_options, variant, known)
    if found is not None:
        return found
    return Location(url, Kind.MISSING, format_for_path(url), True)


def _missing(path: str) -> FileMissingError:
    """The error for nothing at `path`, saying why when its name can name no file."""
    return FileMissingError(path, None if is_url(path) else unencodable(path))


def _is_directory(path: str) -> bool:
    return path.endswith("/") if is_url(path) else os.path.isdir(path)
