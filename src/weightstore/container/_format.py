"""What a container format says about itself, once: the `ContainerFormat` record.

Each container package (`burnpack`, `safetensors`, `pytorch_reader`) builds one record, its
``FORMAT``: its names, how to recognise its bytes, its extension rule, how to open a reader or
build a writer, which store options it can honour, how its sharded sets are named, what
``inspect`` calls on it, and what its files hold beyond tensors. Everything above the
containers (the format registry, sets, stores, the CLI) asks the record instead of keeping its
own copy of a fact, so changing a rule of one format touches one folder.

The extension rule lives here because it is the same shape for every format and differs only
in its data: a format with a `default_extension` (burnpack, as in Burn) gives extensionless
paths that extension; the others take paths as written.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Protocol

from weightstore.base._record import Record
from weightstore.container._set_layout import SetLayout  # a field's type, given with it

if TYPE_CHECKING:  # an annotation only: the dtype tables load with the first reader
    from weightstore.dtypes import DType

__all__ = [
    "LOAD_OPTIONS",
    "PROBE_SIZE",
    "SAVE_OPTIONS",
    "ContainerFormat",
    "SetLayout",
    "TensorInfo",
    "TensorReader",
    "path_for_read",
    "path_for_write",
]

PROBE_SIZE: Final = 512  # bytes a sniffer sees: enough for a tar header's "ustar" at 257

# Store options every readable format honours: they act on names and the model, not on bytes;
# `variant` picks which of a directory's sharded sets (``fp16``) is read, and written.
LOAD_OPTIONS: Final = frozenset({
    "filter", "remapper", "from_adapter", "allow_partial", "validate", "skip_enum_variants",
    "map_indices_contiguous", "map_indices_except", "variant", "verify_digests", "dequantize",
    "tied_weights", "io",
})  # fmt: skip
# Store options that only make sense for a format weightstore can write; `max_shard_size`
# makes saves write a sharded set (`weightstore.sets`).
SAVE_OPTIONS: Final = frozenset({
    "to_adapter", "overwrite", "metadata", "dedupe_tied", "durable", "max_shard_size",
    "digests", "index_tensor_digests",
})  # fmt: skip


class TensorInfo(Protocol):
    """What a reader says about one tensor before reading it."""

    @property
    def dtype(self) -> DType:
        """The stored element type."""
        ...

    @property
    def shape(self) -> tuple[int, ...]:
        """Dimensions, outermost first."""
        ...

    @property
    def param_id(self) -> int | None:
        """Burn's parameter id where the format records one, else None."""
        ...


class TensorReader(Protocol):
    """The one protocol every container reader follows, so callers need not know which they
    hold. Readers open with their format's ``from_file`` (`ContainerFormat.open_file`)."""

    def names(self) -> list[str]:
        """Every tensor name (burnpack, SafeTensors: sorted; PyTorch: pickle order)."""
        ...

    def names_in_file_order(self) -> list[str]:
        """Tensor names in the order their bytes lie: reading in this order streams the file."""
        ...

    def descriptor(self, name: str) -> TensorInfo:
        """Dtype, shape and param id of one tensor, read from the header only."""
        ...

    def get(self, name: str) -> Any:
        """One tensor as a NumPy array, a zero-copy view where the bytes allow."""
        ...

    def get_slice(self, name: str) -> Any:
        """An object to index like an array (``[a:b, ::2]``), returning a NumPy array."""
        ...

    def metadata(self) -> Mapping[str, object]:
        """What the file says about itself (string pairs; PyTorch: its layout's facts)."""
        ...

    def close(self) -> None:
        """Release the file; arrays already handed out stay valid."""
        ...

    def __contains__(self, name: object) -> bool: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[str]: ...
    def __enter__(self) -> Any: ...
    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...


Sniff = Callable[[bytes, int], bool]  # (first bytes, total size) -> is it this format?


def path_for_read(path: str | os.PathLike[str], default_extension: str | None) -> str:
    """The file a read of `path` opens: Burn's rule, ``.<ext>`` appended to a path that has no
    extension and does not exist; any other path as written."""
    filename = os.fspath(path)
    if default_extension is None or os.path.splitext(filename)[1] or os.path.exists(filename):
        return filename
    return f"{filename}.{default_extension}"


def path_for_write(path: str | os.PathLike[str], default_extension: str | None) -> str:
    """The file a save to `path` writes: ``.<ext>`` appended when the name has no extension."""
    filename = os.fspath(path)
    if default_extension is None or os.path.splitext(filename)[1]:
        return filename
    return f"{filename}.{default_extension}"


class ContainerFormat(Record):
    """One container format, described once; immutable. Every fact about a format that code
    outside its folder needs is a field here, so adding a format is one folder and one line in
    the registry, and nothing else compares format names.

    Attributes:
        name: the short name used in code, JSON output and ``--format`` (``"safetensors"``).
        title: how messages spell it (``"SafeTensors"``).
        extensions: file suffixes it is written with, without the dot, the usual one first.
        sniff: tells the format from a file's first `PROBE_SIZE` bytes and its total size.
        open_file: opens a reader on a path (keyword options passed through).
        default_extension: appended to extensionless paths (`path_for_read`/`path_for_write`),
            or None to take paths as written.
        open_bytes: opens a reader on bytes held in memory, or None if the format cannot.
        open_static: opens a reader viewing a caller's buffer in place, or None.
        writer: builds a writer from ``(entries, metadata)`` for a store save, or None for a
            read-only format.
        store_options: the store options this format honours; a store refuses the others.
        set_layout: how its sharded sets are named (`SetLayout`), or None for a format that
            has no sets; `weightstore.sets` finds and writes sets through these.
        find_in_directory: for a format whose multi-file models are no set (GGUF's split
            parts name each other, with no index), ``(directory) -> path or None``: the file
            that opens the one model a directory holding no set holds (GGUF: its one file,
            or its split model's first part), None when it holds none, `SetError` for
            several; `weightstore.locate` asks it. None for the other formats.
        summarizer: ``"module:function"`` of what ``weightstore inspect`` calls on one file
            of this format, ``(path, options) -> FileReport``; resolved on first use
            (`load_summarizer`), so listing the formats imports no summarizer.
        holds_foreign_objects: whether its files can hold objects that name code to import
            (a pickle's globals: PyTorch), so ``inspect`` and ``verify`` scan for them.
        carries_framework_metadata: whether its ``format`` metadata names the framework the
            tensors are for (SafeTensors' ``format: pt``; transformers refuses other values),
            so a save writes the source's framework there. False where ``format`` names the
            container (burnpack, as Burn writes it) or the format has no metadata pairs.
        native_framework: the framework every file of the format comes from (``"pt"``: a
            PyTorch checkpoint is ``torch.save``'s), which a model-free save passes on; None
            for a format many frameworks write, whose files may say (`carries_framework_metadata`).
        reader_releases_pages: whether its file reader has ``release(name)``, which lets a
            tensor's mapped pages go once it is used, so a conversion streams a file larger
            than memory (the PyTorch reader's); the others keep their mapping to the end.
        typed_metadata: whether its metadata values are typed (GGUF's integers, floats,
            bools, arrays), so a store's metadata may hold such values and a save keeps them;
            False where metadata is string pairs.

    A `Record`, compared by identity (each format has one). Every argument is a required
    keyword: a record cannot leave a fact unset (tests/container/test_format_record.py checks
    that none is empty).
    """

    name: str
    title: str
    extensions: tuple[str, ...]
    sniff: Sniff
    open_file: Callable[..., TensorReader]
    default_extension: str | None
    open_bytes: Callable[[bytes], TensorReader] | None
    open_static: Callable[[Any], TensorReader] | None
    writer: Callable[[Iterable[Any], Mapping[str, str]], Any] | None
    store_options: frozenset[str]
    set_layout: SetLayout | None
    find_in_directory: Callable[[str], str | None] | None
    summarizer: str
    holds_foreign_objects: bool
    carries_framework_metadata: bool
    native_framework: str | None
    reader_releases_pages: bool
    typed_metadata: bool

    def __init__(
        self,
        *,
        name: str,
        title: str,
        extensions: tuple[str, ...],
        sniff: Sniff,
        open_file: Callable[..., TensorReader],
        default_extension: str | None,
        open_bytes: Callable[[bytes], TensorReader] | None,
        open_static: Callable[[Any], TensorReader] | None,
        writer: Callable[[Iterable[Any], Mapping[str, str]], Any] | None,
        store_options: frozenset[str],
        set_layout: SetLayout | None,
        find_in_directory: Callable[[str], str | None] | None,
        summarizer: str,
        holds_foreign_objects: bool,
        carries_framework_metadata: bool,
        native_framework: str | None,
        reader_releases_pages: bool,
        typed_metadata: bool,
    ) -> None:
        super().__init__(
            name, title, extensions, sniff, open_file, default_extension, open_bytes,
            open_static, writer, store_options, set_layout, find_in_directory, summarizer,
            holds_foreign_objects, carries_framework_metadata, native_framework,
            reader_releases_pages, typed_metadata,
        )  # fmt: skip

    def load_summarizer(self) -> Callable[[str, dict[str, Any]], Any]:
        """The `summarizer` function, its module imported now (a command's first use)."""
        module_name, _, function = self.summarizer.partition(":")
        summarize: Callable[[str, dict[str, Any]], Any] = getattr(
            importlib.import_module(module_name), function
        )
        return summarize

    @property
    def writable(self) -> bool:
        """Whether weightstore can write this format."""
        return self.writer is not None

    def path_for_read(self, path: str | os.PathLike[str]) -> str:
        """The file a read of `path` opens under this format's extension rule."""
        return path_for_read(path, self.default_extension)

    def path_for_write(self, path: str | os.PathLike[str]) -> str:
        """The file a save to `path` writes under this format's extension rule."""
        return path_for_write(path, self.default_extension)

    def __repr__(self) -> str:
        return f"<ContainerFormat {self.name}>"
