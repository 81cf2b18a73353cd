"""The sharded output of torch's ``HuggingFaceStorageWriter`` (``save_distributed=True``),
consolidated on read.

Each rank writes ``shard-<rank>-model-<k>-of-<n>.safetensors``: SafeTensors files holding its
local chunk of each tensor under the tensor's own name, and in their metadata
``DCP_SHARDING_INFO``, a JSON map from each name to ``{"saved_offsets": [...]}``, where the
chunk starts in the whole tensor. The whole tensor's shape is where its chunks end; the chunks
must tile it (`_tiling`) and share one dtype. The reader is `DcpReader` over that index, each
chunk read through its file's SafeTensors reader, so a slice reads only the bytes it selects.
(With ``enable_consolidation=True`` the writer also writes a plain Hugging Face set beside,
which weightstore reads as any set.)
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Final

from weightstore.base._render import bounded_repr
from weightstore.dcp._index import DcpChunk, DcpIndex, DcpTensor
from weightstore.dcp._reader import DcpReader, _Opened
from weightstore.dcp._tiling import CornerBudget, first_miscovered
from weightstore.errors import SetError
from weightstore.io._source import ReadMode

__all__ = ["SHARD_NAME", "HfShardedReader", "is_hf_sharded_checkpoint", "open_hf_sharded"]

SHARD_NAME: Final = re.compile(r"shard-\d{5}-model-\d{5}-of-\d{5}\.safetensors")
"""A shard file's name: the writing rank, then the file's place among the model's files."""
_SHARDING_KEY: Final = "DCP_SHARDING_INFO"


def is_hf_sharded_checkpoint(path: str) -> bool:
    """Whether directory `path` holds the writer's shard files; reads names only."""
    try:
        with os.scandir(path) as entries:
            return any(SHARD_NAME.fullmatch(entry.name) for entry in entries)
    except OSError:
        return False


def open_hf_sharded(path: str, *, mode: ReadMode = "mmap") -> HfShardedReader:
    """Open the writer's shards in directory `path` as one checkpoint of whole tensors.

    Raises:
        SetError: a shard without sharding info, or whose info is not the writer's JSON; a
            tensor whose chunks disagree on dtype or rank, or do not tile it.
        FormatError: a shard's own SafeTensors errors.
    """
    from weightstore.safetensors import FORMAT, SafetensorsReader

    files = sorted(name for name in os.listdir(path) if SHARD_NAME.fullmatch(name))
    paths = {name: os.path.join(path, name) for name in files}
    pieces: dict[str, list[tuple[str, Any, tuple[int, ...], tuple[int, ...]]]] = {}
    for file, file_path in paths.items():
        with SafetensorsReader.from_file(file_path) as reader:
            offsets = _sharding_info(reader.metadata(), file_path)
            for name in reader.names():
                info = reader.descriptor(name)
                start = offsets.get(name)
                if start is None or len(start) != len(info.shape):
                    raise SetError(
                        f"its sharding info gives tensor {bounded_repr(name)} no offsets of "
                        f"its {len(info.shape)} dims",
                        path=file_path, tensor=name,
                    )  # fmt: skip
                pieces.setdefault(name, []).append((file, info.dtype, start, tuple(info.shape)))
    tensors = {name: _tensor(name, found, path) for name, found in pieces.items()}
    index = DcpIndex(path, "", {}, tensors, {}, None, None)
    return HfShardedReader(_Opened(index, paths, FORMAT, mode))


def _sharding_info(metadata: dict[str, str], path: str) -> dict[str, tuple[int, ...]]:
    text = metadata.get(_SHARDING_KEY)
    if text is None:
        raise SetError(f"the shard's metadata has no {_SHARDING_KEY}", path=path)
    try:
        value = json.loads(text)
    except ValueError as err:
        raise SetError(f"{_SHARDING_KEY} is no JSON: {err}", path=path) from None
    found: dict[str, tuple[int, ...]] = {}
    for name, entry in value.items() if isinstance(value, dict) else ():
        offsets = entry.get("saved_offsets") if isinstance(entry, dict) else None
        if not isinstance(offsets, list) or not all(
            isinstance(o, int) and not isinstance(o, bool) and 0 <= o < 1 << 62 for o in offsets
        ):
            raise SetError(f"{_SHARDING_KEY} gives {bounded_repr(entry)}", path=path, tensor=name)
        found[name] = tuple(offsets)
    return found


def _tensor(
    name: str, pieces: list[tuple[str, Any, tuple[int, ...], tuple[int, ...]]], path: str
) -> DcpTensor:
    dtypes = {dtype for _, dtype, _, _ in pieces}
    if len(dtypes) != 1:
        shown = sorted(dtype.name for dtype in dtypes)
        raise SetError(f"its chunks are of dtypes {shown}", path=path, tensor=name)
    shape = tuple(
        max(start[d] + size[d] for _, _, start, size in pieces) for d in range(len(pieces[0][2]))
    )
    chunks = [DcpChunk(file, name, start, size) for file, _, start, size in pieces]
    wrong = first_miscovered(
        shape, [(c.offsets, c.sizes) for c in chunks], CornerBudget(), path=path, tensor=name
    )
    if wrong is not None:
        point, holders = wrong
        what = "no chunk holds" if holders == 0 else f"{holders} chunks hold"
        raise SetError(f"{what} element {list(point)}: its chunks do not tile it", path=path,
                       tensor=name)  # fmt: skip
    return DcpTensor(dtypes.pop(), shape, chunks)


class HfShardedReader(DcpReader):
    """The shards as one checkpoint: `DcpReader`'s protocol over the whole tensors."""

    def _chunk_files(self, opened: _Opened) -> Any:
        return _ShardReaders(opened.paths, opened.mode)

    def restricted(self, names: Any) -> HfShardedReader:
        return HfShardedReader(self._opened, names)

    def __repr__(self) -> str:
        return f"HfShardedReader({self.path!r}, {len(self._names)} tensors)"


class _ShardReaders:
    """Each shard's SafeTensors reader, opened on first use."""

    def __init__(self, paths: dict[str, str], mode: ReadMode) -> None:
        self.paths, self.mode = paths, mode
        self._readers: dict[str, Any] = {}

    def reader(self, file: str) -> Any:
        from weightstore.safetensors import SafetensorsReader

        reader = self._readers.get(file)
        if reader is None:
            reader = SafetensorsReader.from_file(self.paths[file], mode=self.mode)
            self._readers[file] = reader
        return reader

    def close(self) -> None:
        readers, self._readers = self._readers, {}
        for reader in readers.values():
            reader.close()
