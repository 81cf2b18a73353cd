"""Reading a DCP checkpoint directory in one process, with no process group and no torch.

`open_dcp` reads and checks the index (`_dcp_index`), stats every rank file, and opens nothing
else. `DcpReader` follows the `TensorReader` protocol over the whole tensors: `get` puts a
tensor together from its chunks (one chunk covering it all is handed out as the file's own
view), `get_slice` reads only the parts of the chunks an index selects. So a store opens a
checkpoint directory as it opens a set (``BurnpackStore.from_file("ckpt")``), and
``weightstore convert ckpt model.safetensors`` writes the whole tensors out.

`RankFiles` opens rank files for both this reader and the torch storage reader: a file is
opened once, on first use, and checked against the index then (its set id, and each chunk the
index puts in it present with the index's dtype and shape), so a file from another save, or
one that lies about a chunk, is refused before a byte of it is used.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from weightstore.base._lazy import import_on_first_use
from weightstore.base._record import Record, ValueRecord
from weightstore.base._render import bounded_repr
from weightstore.dcp._index import (
    CONTAINER_KEY,
    FORMAT_KEY,
    MAX_DCP_INDEX_SIZE,
    DcpChunk,
    DcpIndex,
    DcpTensor,
    locate_rank_files,
    read_dcp_index,
)
from weightstore.dtypes import DType
from weightstore.errors import (
    SetError,
    SetMismatchError,
    SliceError,
    TensorNotFoundError,
    UnsupportedFormatError,
)
from weightstore.io._source import ReadMode
from weightstore.sets._index import SET_ID_KEY

if TYPE_CHECKING:
    import numpy as np

    from weightstore.container._format import ContainerFormat, TensorReader
else:
    np = import_on_first_use("numpy", globals(), "np")

__all__ = ["DcpReader", "RankFiles", "TensorInfo", "container_format", "open_dcp"]

_SHOWN: Final = 60  # characters of a file-supplied name in a message
_LAYOUT_KEYS: Final = frozenset({FORMAT_KEY, CONTAINER_KEY, SET_ID_KEY})  # `metadata` omits them


class TensorInfo(ValueRecord):
    """What `DcpReader.descriptor` says of a whole tensor."""

    dtype: DType
    shape: tuple[int, ...]
    param_id: int | None

    def __init__(self, dtype: DType, shape: tuple[int, ...], param_id: int | None = None) -> None:
        super().__init__(dtype, shape, param_id)


def container_format(index: DcpIndex) -> ContainerFormat:
    """The container format of the index's rank files (its `CONTAINER_KEY`), each file's
    extension checked against it.

    Raises:
        SetError: the key names no format with readable files, or a file's extension is
            another format's.
    """
    from weightstore.formats import format_for_path, format_named

    name = index.metadata.get(CONTAINER_KEY, "")
    try:
        fmt = format_named(name)
        if fmt.writer is None:  # rank files are written by weightstore: burnpack, SafeTensors
            raise UnsupportedFormatError(f"{fmt.title} files are never rank files")
    except (KeyError, ValueError, UnsupportedFormatError):
        shown = bounded_repr(name, limit=_SHOWN)
        raise SetError(
            f"rank files' format {shown} is no format weightstore reads", path=index.path
        ) from None
    for file in index.files():
        if format_for_path(file) is not fmt:
            raise SetError(
                f"rank file is not named as a {fmt.title} file", path=index.path, shard=file
            )
    return fmt


class RankFiles:
    """The rank files of one checkpoint, each opened on first use and checked then.

    Args:
        index: the checkpoint's index.
        paths: file name -> path (`locate_rank_files`).
        fmt: their container format (`container_format`).
        mode: ``"mmap"`` (views of the mapped files) or ``"pread"`` (each read a copy of
            exactly the bytes asked for: what a rank of a distributed load uses).
    """

    def __init__(
        self,
        index: DcpIndex,
        paths: dict[str, str],
        fmt: ContainerFormat,
        mode: ReadMode = "mmap",
    ) -> None:
        self.index, self.paths, self.format, self.mode = index, paths, fmt, mode
        self._readers: dict[str, TensorReader] = {}
        self._chunks: dict[str, list[tuple[str, DcpTensor, DcpChunk]]] = {}
        for fqn, tensor in index.tensors.items():
            for chunk in tensor.chunks:
                self._chunks.setdefault(chunk.file, []).append((fqn, tensor, chunk))

    def reader(self, file: str) -> TensorReader:
        """The open reader of rank file `file`, checked against the index.

        Raises:
            SetMismatchError: the file carries another save's set id.
            SetError: the file lacks a chunk the index puts in it, or holds it with another
                dtype or shape.
            FormatError: the file's own bytes are damaged (its reader says how).
        """
        reader = self._readers.get(file)
        if reader is None:
            assert self.format.open_file is not None  # a format with writable files reads them
            reader = self.format.open_file(self.paths[file], mode=self.mode)
            try:
                self._check(file, reader)
            except BaseException:
                reader.close()
                raise
            self._readers[file] = reader
        return reader

    def _check(self, file: str, reader: TensorReader) -> None:
        found = reader.metadata().get(SET_ID_KEY)
        if found != self.index.set_id:
            shown = bounded_repr(found, limit=_SHOWN)
            raise SetMismatchError(
                f"rank file carries set id {shown}, not the index's {self.index.set_id}: it "
                "belongs to another save",
                path=self.index.path,
                shard=file,
            )
        for fqn, tensor, chunk in self._chunks.get(file, ()):
            if chunk.name not in reader:
                raise SetError(
                    f"rank file lacks chunk {bounded_repr(chunk.name, limit=_SHOWN)} that the "
                    "index puts in it",
                    path=self.index.path,
                    tensor=fqn,
                    shard=file,
                )
            info = reader.descriptor(chunk.name)
            if info.dtype != tensor.dtype or tuple(info.shape) != chunk.sizes:
                raise SetError(
                    f"rank file holds chunk {bounded_repr(chunk.name, limit=_SHOWN)} as "
                    f"{info.dtype.name} {list(info.shape)}, but the index says "
                    f"{tensor.dtype.name} {list(chunk.sizes)}",
                    path=self.index.path,
                    tensor=fqn,
                    shard=file,
                )

    def close(self) -> None:
        """Close every opened file; arrays already handed out stay valid."""
        readers, self._readers = self._readers, {}
        for reader in readers.values():
            reader.close()


def open_dcp(
    path: str,
    format_name: str | None = None,
    *,
    mode: ReadMode = "mmap",
    max_index_size: int = MAX_DCP_INDEX_SIZE,
) -> DcpReader:
    """Open the checkpoint at `path` (its directory or its index) to read whole tensors.

    Args:
        path: the checkpoint directory, or ``<directory>/dcp.index.json``.
        format_name: refuse a checkpoint whose rank files are not this format's.
        mode: how rank files are read (`RankFiles`).
        max_index_size: refuse a larger index before reading it (default
            `MAX_DCP_INDEX_SIZE`, 1 GiB: twice a 405B training checkpoint's on 1,024 ranks).

    Raises:
        SetError: a bad index (`read_dcp_index`), or a rank file missing, outside the
            directory or too small (`locate_rank_files`).
        UnsupportedFormatError: `format_name` is given and the files are another format's.

    Example:
        >>> with open_dcp("ckpt") as reader:  # doctest: +SKIP
        ...     weight = reader.get("model.fc1.weight")  # put together from every rank's chunk
    """
    index = read_dcp_index(path, max_index_size=max_index_size)
    fmt = container_format(index)
    if format_name is not None and fmt.name != format_name:
        from weightstore.formats import format_named

        raise UnsupportedFormatError(
            f"is a checkpoint of {fmt.title} files, not {format_named(format_name).title} "
            "ones; open it with that format's store, or Store.from_file, which picks the format",
            path=index.path,
            found=fmt.name,
        )
    return DcpReader(_Opened(index, locate_rank_files(index), fmt, mode))


class _Opened(Record):
    """What an opened checkpoint knows before any rank file is opened."""

    index: DcpIndex
    paths: dict[str, str]
    fmt: ContainerFormat
    mode: ReadMode

    def __init__(
        self, index: DcpIndex, paths: dict[str, str], fmt: ContainerFormat, mode: ReadMode
    ) -> None:
        super().__init__(index, paths, fmt, mode)


class DcpReader:
    """An open checkpoint directory: the `TensorReader` protocol over its whole tensors.

    Open one with `open_dcp`. Attributes:
        path: the index.
        index: the parsed `DcpIndex`.
        format: the rank files' `ContainerFormat`.
    """

    def __init__(self, opened: _Opened, selection: Iterable[str] | None = None) -> None:
        self._opened = opened
        self.path = opened.index.path
        self.index = opened.index
        self.format = opened.fmt
        tensors = opened.index.tensors
        chosen = set(tensors if selection is None else selection)
        self._names = [name for name in tensors if name in chosen]  # the index's order
        self._files = self._chunk_files(opened)

    def _chunk_files(self, opened: _Opened) -> Any:
        """What reads the chunks: each rank file's reader, by file (`RankFiles`); a torch
        DCP checkpoint reads its ``torch.save`` items instead (`_torch_reader`)."""
        return RankFiles(opened.index, opened.paths, opened.fmt, opened.mode)

    # -- the checkpoint ------------------------------------------------------------------------

    def restricted(self, names: Iterable[str]) -> DcpReader:
        """A reader over `names` alone (others dropped); it opens only their rank files."""
        return DcpReader(self._opened, names)

    def listed_names(self) -> list[str]:
        """The tensor names of this reader, sorted; opens no file."""
        return sorted(self._names)

    def values(self) -> dict[str, object]:
        """The checkpoint's non-tensor values (a step count, a learning rate) as plain values,
        by fully qualified name."""
        return dict(self.index.values)

    # -- the reader protocol -------------------------------------------------------------------

    def names(self) -> list[str]:
        """Every tensor's fully qualified name, sorted."""
        return sorted(self._names)

    def names_in_file_order(self) -> list[str]:
        """Tensor names by the rank file holding their first chunk, then the index's order."""
        tensors = self.index.tensors
        return sorted(self._names, key=lambda name: _first_file(tensors[name]))

    def tensor_infos(self) -> list[tuple[str, DType, tuple[int, ...], int | None]]:
        """Name, dtype, shape and param id (None) of every tensor, in `names_in_file_order`."""
        tensors = self.index.tensors
        return [
            (name, tensors[name].dtype, tensors[name].shape, None)
            for name in self.names_in_file_order()
        ]

    def descriptor(self, name: str) -> TensorInfo:
        """Global dtype and shape of tensor `name`, from the index."""
        tensor = self._tensor(name)
        return TensorInfo(tensor.dtype, tensor.shape)

    def get(self, name: str) -> np.ndarray[Any, Any]:
        """Tensor `name`, whole: its one chunk's array when one covers it, else a new array
        filled from every chunk (the index proved they tile it).

        Raises:
            TensorNotFoundError: no such tensor.
            SetError, SetMismatchError: a rank file disagrees with the index (`RankFiles`).
        """
        tensor = self._tensor(name)
        readers = [self._files.reader(chunk.file) for chunk in tensor.chunks]  # checked first
        if len(tensor.chunks) == 1:
            whole: np.ndarray[Any, Any] = readers[0].get(tensor.chunks[0].name)
            return whole
        assert tensor.dtype.numpy is not None  # the index admits only dtypes NumPy holds
        result = np.empty(tensor.shape, tensor.dtype.numpy)
        for chunk, reader in zip(tensor.chunks, readers, strict=True):
            if chunk.numel:
                result[chunk.region()] = reader.get(chunk.name)
        return result

    def get_slice(self, name: str) -> ChunkedSlice:
        """Tensor `name` to index like an array; reads only the selected part of each chunk."""
        return ChunkedSlice(self, name, self._tensor(name))

    def metadata(self) -> dict[str, str]:
        """The index's metadata pairs (``total_size``, ``dcp_version``, the saver's own) less
        those naming its files' layout (format, container, set id), which a conversion must
        not carry into a file of another layout. `index` has them all."""
        return {k: v for k, v in self.index.metadata.items() if k not in _LAYOUT_KEYS}

    def close(self) -> None:
        """Close the rank files opened so far; arrays already handed out stay valid."""
        self._files.close()

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __len__(self) -> int:
        return len(self._names)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __enter__(self) -> DcpReader:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DcpReader({self.path!r}, {len(self._names)} tensors)"

    def _tensor(self, name: str) -> DcpTensor:
        if name not in self._names:
            raise TensorNotFoundError(name, path=self.path, known=len(self._names))
        return self.index.tensors[name]

    def _chunk_slice(self, chunk: DcpChunk) -> Any:
        return self._files.reader(chunk.file).get_slice(chunk.name)


def _first_file(tensor: DcpTensor) -> str:
    return tensor.chunks[0].file if tensor.chunks else ""


class ChunkedSlice:
    """A tensor of a checkpoint, not yet read: index it to read the selected part of each
    chunk it crosses (``reader.get_slice("embed.weight")[1000:2000]``)."""

    def __init__(self, reader: DcpReader, name: str, tensor: DcpTensor) -> None:
        self._reader, self._name, self._tensor = reader, name, tensor

    @property
    def shape(self) -> tuple[int, ...]:
        """The whole tensor's dimensions."""
        return self._tensor.shape

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __getitem__(self, key: object) -> np.ndarray[Any, Any]:
        """The selected part as an array, as NumPy would select it from the whole tensor.

        Raises:
            SliceError: an index `weightstore.container._slice.normalize_key` refuses.
        """
        from weightstore.container._slice import _InvalidIndex, normalize_key

        try:
            selection = normalize_key(key, self.shape)
        except _InvalidIndex as err:
            raise SliceError(str(err), path=self._reader.path, tensor=self._name) from None
        ranges = [range(s, s + 1) if isinstance(s, int) else s for s in selection]
        dtype = self._tensor.dtype.numpy
        assert dtype is not None  # the index admits only dtypes NumPy holds
        result = np.empty([len(r) for r in ranges], dtype)
        for chunk in self._tensor.chunks:
            parts = [
                _within(r, offset, offset + size)
                for r, offset, size in zip(ranges, chunk.offsets, chunk.sizes, strict=True)
            ]
            if all(part is not None for part in parts):
                placed = [part for part in parts if part is not None]
                local = tuple(part[1] for part in placed)
                result[tuple(part[0] for part in placed)] = self._reader._chunk_slice(chunk)[local]
        kept = [len(r) for r, s in zip(ranges, selection, strict=True) if not isinstance(s, int)]
        return result.reshape(kept)


def _within(selected: range, low: int, high: int) -> tuple[slice, slice] | None:
    """The part of `selected` (indices of one axis) inside ``[low, high)``: where it goes in
    the result, and the same indices relative to `low`; None when none is inside."""
    step = selected.step
    if step > 0:
        first = max(0, -((selected.start - low) // step))  # ceil((low - start) / step)
        stop = min(len(selected), max(0, -((selected.start - high) // step)))
    else:
        first = max(0, (selected.start - high) // -step + 1)
        stop = min(len(selected), max(0, (selected.start - low) // -step + 1))
    if first >= stop:
        return None
    part = selected[first:stop]
    local = range(part.start - low, part.stop - low, step)
    return slice(first, stop), slice(local.start, local.stop if local.stop >= 0 else None, step)
