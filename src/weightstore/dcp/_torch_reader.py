"""Reading a checkpoint directory that torch's own ``FileSystemWriter`` wrote (``.metadata`` and
``__R_I.distcp`` files), with no torch and no pickle run.

The index comes from `_torch_metadata`; the reader is `DcpReader` over it, so whole tensors,
slices (reading only the chunks a selection crosses), stores and the command line behave as
for weightstore's own DCP checkpoints. What differs is a chunk's bytes: each is a
``torch.save`` archive at an offset of a ``.distcp`` file, opened by the PyTorch reader's zip
layout over just those bytes and checked to hold one tensor of the chunk's dtype and shape.
Non-tensor values (a step, a learning rate) are ``torch.save`` archives too; `values` decodes
the plain ones and keeps the rest (RNG states, schedulers) as `OpaqueValue` bytes.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from weightstore.base._lazy import import_on_first_use
from weightstore.base._render import bounded_int, bounded_repr
from weightstore.dcp._index import DcpIndex
from weightstore.dcp._names import TORCH_DCP_METADATA_NAME
from weightstore.dcp._reader import DcpReader, _Opened
from weightstore.dcp._torch_metadata import (
    MAX_TORCH_METADATA_SIZE,
    StoredItem,
    TorchDcpIndex,
    read_torch_metadata,
)
from weightstore.dcp._values import OpaqueValue, decode_saved_value
from weightstore.errors import SetError
from weightstore.io._open import open_source
from weightstore.io._source import ByteSource, MmapSource, ReadMode, WindowSource

if TYPE_CHECKING:
    import numpy as np

    from weightstore.pytorch_reader._tensors import LazyTensor
else:
    np = import_on_first_use("numpy", globals(), "np")

__all__ = ["TorchDcpReader", "open_torch_dcp"]

_RECORD_CHUNK_SIZE: Final = 4096
"""Bytes a chunk's archive is read by while its directory and pickle are found: a one-tensor
``torch.save`` archive's records take about 1 KB, so a rank reading part of a chunk reads
little more than that part."""


def open_torch_dcp(
    path: str, *, mode: ReadMode = "mmap", max_index_size: int = MAX_TORCH_METADATA_SIZE
) -> TorchDcpReader:
    """Open the torch DCP checkpoint at `path` (its directory, or its ``.metadata``).

    Raises:
        SetError: a bad ``.metadata`` (`read_torch_metadata`), or a ``.distcp`` file missing,
            outside the directory, or shorter than the items it is said to hold.
        CodeObjectError: the ``.metadata`` names globals that would run code.
    """
    metadata = path if not os.path.isdir(path) else os.path.join(path, TORCH_DCP_METADATA_NAME)
    torch_index = read_torch_metadata(metadata, max_size=max_index_size)
    paths = _located_files(torch_index)
    version = {} if torch_index.version is None else {"dcp_version": torch_index.version}
    index = DcpIndex(
        metadata, "", version, torch_index.tensors, {}, torch_index.paths, None
    )  # the values are read when asked for (`TorchDcpReader.values`)
    from weightstore.pytorch_reader import FORMAT

    return TorchDcpReader(_Opened(index, paths, FORMAT, mode), torch_index)


def _located_files(index: TorchDcpIndex) -> dict[str, str]:
    """Each ``.distcp`` file's path, checked as a set's shards are (a file, inside the
    directory) and long enough for every item said to lie in it."""
    from weightstore.sets._index import SetIndex, locate_shards

    items = [*index.items.items(), *index.values.items()]
    first: dict[str, str] = {}
    for name, item in items:
        first.setdefault(item.file, name)
    weight_map = {f"{n}@{f}": f for f, n in first.items()}
    located = locate_shards(SetIndex(index.path, weight_map, {}, None))
    for name, item in items:
        size = os.path.getsize(located[item.file])
        if item.offset + item.length > size:
            raise SetError(
                f"its item in {item.file} lies at bytes {bounded_int(item.offset)} to "
                f"{bounded_int(item.offset + item.length)}, past the end of the "
                f"{bounded_int(size)}-byte file",
                path=index.path, tensor=name.partition("#")[0], shard=item.file,
            )  # fmt: skip
    return located


class TorchDcpReader(DcpReader):
    """An open torch DCP checkpoint: `DcpReader`'s protocol over its whole tensors."""

    def __init__(self, opened: _Opened, torch_index: TorchDcpIndex, selection: Any = None) -> None:
        self.torch_index = torch_index
        super().__init__(opened, selection)

    def _chunk_files(self, opened: _Opened) -> Any:
        return _DistcpFiles(self.torch_index, opened.paths, opened.mode)

    def restricted(self, names: Any) -> TorchDcpReader:
        """A reader over `names` alone (others dropped); it opens only their files."""
        return TorchDcpReader(self._opened, self.torch_index, names)

    def values(self) -> dict[str, object]:
        """The checkpoint's non-tensor values by fully qualified name: each plain one (a
        step, a learning rate, a name) decoded from its ``torch.save`` bytes without
        unpickling, any other (an RNG state, a scheduler) as the `OpaqueValue` of its bytes."""
        files = self._files
        assert isinstance(files, _DistcpFiles)
        found: dict[str, object] = {}
        for fqn, item in self.torch_index.values.items():
            data = bytes(files.item_bytes(item, fqn))
            try:
                found[fqn] = decode_saved_value(data, fqn, path=files.paths[item.file])
            except SetError:
                found[fqn] = OpaqueValue(data)
        return found

    def release(self, name: str) -> None:
        """Drop the mapped pages of tensor `name`'s items from resident memory, once they are
        written out (`MmapSource.release`): a conversion then holds about one tensor resident
        rather than every page it has read. Arrays already handed out stay valid."""
        files = self._files
        assert isinstance(files, _DistcpFiles)
        for chunk in self._tensor(name).chunks:
            files.release(self.torch_index.items[chunk.name])

    def __repr__(self) -> str:
        return f"TorchDcpReader({self.path!r}, {len(self._names)} tensors)"


class _DistcpFiles:
    """The ``.distcp`` files, each opened on first use; `reader` gives the chunks in one."""

    def __init__(self, index: TorchDcpIndex, paths: dict[str, str], mode: ReadMode) -> None:
        self.index, self.paths, self.mode = index, paths, mode
        self._sources: dict[str, ByteSource] = {}

    def source(self, file: str) -> ByteSource:
        source = self._sources.get(file)
        if source is None:
            path = self.paths[file]
            source = MmapSource(path) if self.mode == "mmap" else open_source(path, self.mode)
            self._sources[file] = source
        return source

    def item_bytes(self, item: StoredItem, name: str) -> memoryview:
        return self.source(item.file).read(item.offset, item.length, "DCP item", name)

    def release(self, item: StoredItem) -> None:
        source = self._sources.get(item.file)
        if isinstance(source, MmapSource):
            source.release(item.offset, item.length)

    def reader(self, file: str) -> _ChunkArchives:
        return _ChunkArchives(self, file)

    def close(self) -> None:
        sources, self._sources = self._sources, {}
        for source in sources.values():
            source.close()


class _ChunkArchives:
    """The chunks one ``.distcp`` file holds, by chunk name, as `DcpReader` asks for them."""

    def __init__(self, files: _DistcpFiles, file: str) -> None:
        self._files, self._file = files, file

    def get(self, name: str) -> np.ndarray[Any, Any]:
        """The chunk's values, from its ``torch.save`` archive, checked against the index.

        Raises:
            SetError: the item holds no single tensor, or one of another dtype or shape.
            FormatError: the archive's own bytes are damaged (the zip layout says how).
        """
        with self._opened(name) as (root, _):
            array: np.ndarray[Any, Any] = root.to_numpy()
            return array

    def get_slice(self, name: str) -> _ChunkRows:
        """The chunk, to index: a box of unit-step ranges of a contiguous chunk reads only its
        bytes (a rank of another world size reads its part of each chunk it crosses); any
        other selection reads the chunk."""
        return _ChunkRows(self, name)

    @contextlib.contextmanager
    def _opened(self, name: str) -> Iterator[tuple[LazyTensor, ByteSource]]:
        """The chunk's archive opened in place (a window of the rank file: its directory and
        pickle read, no storage), its one tensor checked; and the window."""
        from weightstore.pytorch_reader._layout import DEFAULT_LIMITS
        from weightstore.pytorch_reader._tensors import LazyTensor
        from weightstore.pytorch_reader._zip import load_zip

        files = self._files
        item = files.index.items[name]
        fqn, _, number = name.rpartition("#")
        chunk = files.index.tensors[fqn].chunks[int(number)]
        where = f"{files.paths[self._file]} (item at byte {item.offset:,})"
        window = WindowSource(files.source(item.file), item.offset, item.length, where)
        loaded = load_zip(window, DEFAULT_LIMITS, window, chunk_size=_RECORD_CHUNK_SIZE)
        try:
            root = loaded.root
            dtype = files.index.tensors[fqn].dtype
            if not isinstance(root, LazyTensor):
                found = type(root).__name__
                raise self._fail(f"its item holds a {bounded_repr(found)}, not a tensor", fqn)
            if root.dtype != dtype or tuple(root.shape) != chunk.sizes:
                raise self._fail(
                    f"its item holds {root.dtype.name} {list(root.shape)}, but the metadata "
                    f"says {dtype.name} {list(chunk.sizes)} at {list(chunk.offsets)}",
                    fqn,
                )
            yield root.with_name(fqn), window
        finally:
            loaded.close()

    def region(self, name: str, box: list[tuple[int, int]]) -> np.ndarray[Any, Any] | None:
        """The box ``[start, stop)`` per dim of the chunk, reading only its bytes: one run per
        index of the dims before the last one the box cuts (a row range is one run, a column
        range one run per row); None when the chunk is not a contiguous tensor over one stored
        storage (then it is read whole)."""
        with self._opened(name) as (root, window):
            storage = root.storage
            spans = getattr(storage.source, "stored_span", None) if storage else None
            span = spans(storage.key) if storage is not None and callable(spans) else None
            if span is None or storage is None or storage.view is not None or root.conj:
                return None
            if root.neg or root.stride != _row_major(root.shape):
                return None
            shape, dtype = root.shape, root.numpy_dtype
            if root.storage_offset * dtype.itemsize + dtype.itemsize * math.prod(shape) > span[1]:
                return None  # the storage is short: the whole read says how
            cut = max((d for d, (a, b) in enumerate(box) if (a, b) != (0, shape[d])), default=0)
            inner = math.prod(shape[cut + 1 :])  # elements of the dims after the cut: whole
            strides = _row_major(shape)
            result = np.empty([b - a for a, b in box], dtype)
            flat = result.reshape(-1, (box[cut][1] - box[cut][0]) * inner) if result.size else None
            if flat is None:
                return result
            for number, index in enumerate(itertools.product(*(range(a, b) for a, b in box[:cut]))):
                first = root.storage_offset + sum(
                    i * s for i, s in zip(index, strides, strict=False)
                )
                first += box[cut][0] * strides[cut]
                run = flat.shape[1] * dtype.itemsize
                data = window.read(span[0] + first * dtype.itemsize, run, "chunk part", root.name)
                flat[number] = np.frombuffer(data, dtype)
            return result

    def _fail(self, detail: str, fqn: str) -> SetError:
        detail = f"{detail} (in {self._file})"
        return SetError(detail, path=self._files.index.path, tensor=fqn, shard=self._file)


class _ChunkRows:
    """One chunk to index: a box of unit-step ranges is read as its bytes only (`region`)."""

    def __init__(self, archives: _ChunkArchives, name: str) -> None:
        fqn, _, number = name.rpartition("#")
        self._archives, self._name = archives, name
        self._sizes = archives._files.index.tensors[fqn].chunks[int(number)].sizes

    def __getitem__(self, key: Any) -> np.ndarray[Any, Any]:
        parts = key if isinstance(key, tuple) else (key,)
        sizes = self._sizes
        boxed = len(parts) <= len(sizes) and all(
            isinstance(p, slice) and p.step in (None, 1) for p in parts
        )
        if sizes and boxed:
            box = [p.indices(size)[:2] for p, size in zip(parts, sizes, strict=False)]
            box += [(0, size) for size in sizes[len(parts) :]]
            box = [(a, max(a, b)) for a, b in box]
            region = self._archives.region(self._name, box)
            if region is not None:
                return region
        whole: np.ndarray[Any, Any] = self._archives.get(self._name)[key]
        return whole


def _row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))
