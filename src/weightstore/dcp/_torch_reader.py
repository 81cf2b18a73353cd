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

import os
from typing import TYPE_CHECKING, Any

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
from weightstore.io._source import ByteSource, MemorySource, MmapSource, PreadSource, ReadMode

if TYPE_CHECKING:
    import numpy as np

__all__ = ["TorchDcpReader", "open_torch_dcp"]


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
            source = MmapSource(path) if self.mode == "mmap" else PreadSource(path)
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
        from weightstore.pytorch_reader._layout import DEFAULT_LIMITS
        from weightstore.pytorch_reader._tensors import LazyTensor
        from weightstore.pytorch_reader._zip import load_zip

        files = self._files
        item = files.index.items[name]
        fqn, _, number = name.rpartition("#")
        chunk = files.index.tensors[fqn].chunks[int(number)]
        where = f"{files.paths[self._file]} (item at byte {item.offset:,})"
        window = MemorySource(files.item_bytes(item, fqn), name=where)
        loaded = load_zip(window, DEFAULT_LIMITS, window)
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
            array: np.ndarray[Any, Any] = root.with_name(fqn).to_numpy()
            return array
        finally:
            loaded.close()

    def get_slice(self, name: str) -> np.ndarray[Any, Any]:
        """The chunk, to index: an archive's storage is read whole, so a slice of a chunk
        costs the chunk (a rank reads only the chunks its slice crosses)."""
        return self.get(name)

    def _fail(self, detail: str, fqn: str) -> SetError:
        detail = f"{detail} (in {self._file})"
        return SetError(detail, path=self._files.index.path, tensor=fqn, shard=self._file)
