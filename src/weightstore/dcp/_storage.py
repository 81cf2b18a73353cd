"""torch.distributed.checkpoint (DCP) storage on weightstore files: everything of it that
imports torch.

`BurnpackStorageWriter` and `BurnpackStorageReader` (and the SafeTensors pair, for dtypes
burnpack lacks: fp8, complex64) implement torch 2.13's ``StorageWriter`` and ``StorageReader``,
so ``dcp.save``, ``dcp.async_save`` and ``dcp.load`` keep DCP's planners, resharding and
collectives, and write the layout of `weightstore.dcp._index`: one container per rank, an
index that is the only commit point. What DCP calls, and what happens:

- save, every rank: ``set_up_storage_writer`` (its rank), ``prepare_local_plan`` (create the
  directory, refuse a committed checkpoint unless ``overwrite``);
- save, coordinator: ``prepare_global_plan`` removes leftovers of killed saves and names each
  rank's file, fresh, with a new set id (`weightstore.dcp._commit`);
- save, every rank: ``write_data`` decodes the non-tensor values (``torch.save`` bytes) into
  plain values with weightstore's own pickle machine, refusing anything else by key
  (`weightstore.dcp._values`), then streams its chunks into its file atomically, calling
  ``planner.resolve_data`` for one chunk at a time as the writer reaches it;
- save, coordinator: ``finish`` writes the JSON index (temporary file, fsync, rename, directory
  fsync) and only then removes the files of the checkpoint it replaced;
- load, every rank: ``read_metadata`` reads the index as hostile input and builds DCP's
  ``Metadata`` from it (no pickle); ``read_data`` groups the planner's requests by file, sorts
  them by position, and reads just each request's hyper-rectangle of its chunk through the
  slice reader with ``pread`` (nothing else of the file but its header); stored values are
  re-encoded with ``torch.save`` from the plain values alone for the planner to load.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final

import numpy as np
import torch
from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION
from torch.distributed.checkpoint.metadata import (
    STORAGE_TYPES,
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import (
    LoadItemType,
    LoadPlan,
    LoadPlanner,
    ReadItem,
    SavePlan,
    SavePlanner,
    WriteItem,
    WriteItemType,
)
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
from torch.futures import Future

from weightstore.base._record import ValueRecord
from weightstore.bridge._torch import array_to_torch, torch_to_array
from weightstore.dcp._commit import (
    commit_index,
    plan_rank_files,
    prepare_directory,
    write_rank_file,
)
from weightstore.dcp._index import (
    CHUNKS_KEY,
    MAX_DCP_INDEX_SIZE,
    DcpChunk,
    DcpIndex,
    DcpTensor,
    dcp_index_bytes,
    dcp_index_path,
    locate_rank_files,
    read_dcp_index,
)
from weightstore.dcp._reader import RankFiles, container_format
from weightstore.dcp._values import OpaqueValue, decode_saved_value
from weightstore.dtypes import DType, from_torch
from weightstore.entry import TensorEntry
from weightstore.errors import DTypeError, EntryError, InvalidOptionError, SetError
from weightstore.io import is_url
from weightstore.io._digest import METADATA_KEY as DIGESTS_KEY
from weightstore.sets._index import SET_ID_KEY

if TYPE_CHECKING:
    from weightstore.container._format import ContainerFormat

__all__ = [
    "BurnpackStorageReader",
    "BurnpackStorageWriter",
    "SafetensorsStorageReader",
    "SafetensorsStorageWriter",
]

_DTYPE_HINTS: Final = {"burnpack": "; SafetensorsStorageWriter stores fp8 and complex64 chunks"}
_OPAQUE_REFUSED: Final = (
    "value is stored as opaque torch.save bytes, and handing them to the planner would "
    "unpickle them, running whatever they name; pass allow_opaque_values=True to the storage "
    "reader only if you trust whoever wrote this checkpoint"
)


class _RankPlan(ValueRecord):
    """A rank's part of the save, from the coordinator: the set id and its file (None: it
    writes no tensors)."""

    set_id: str
    file: str | None


class _StoredChunk(ValueRecord):
    """Where a rank put one chunk (a `WriteResult`'s storage data), and its bytes' digest when
    the save writes digests."""

    file: str
    name: str
    digest: str | None = None


class _StoredValue(ValueRecord):
    """A non-tensor value a rank decoded (a `WriteResult`'s storage data)."""

    value: object


def _done(value: Any) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_result(value)
    return future


def _dtype_of(torch_dtype: torch.dtype) -> DType:
    return from_torch(str(torch_dtype))


# -- writing --------------------------------------------------------------------------------------


class _DcpStorageWriter(StorageWriter):
    """A DCP ``StorageWriter`` that writes the rank files in `FORMAT_NAME`'s container."""

    FORMAT_NAME: ClassVar[str]

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        overwrite: bool = False,
        durable: bool = True,
        allow_opaque_values: bool = False,
        metadata: Mapping[str, str] | None = None,
        digests: str | None = None,
    ) -> None:
        super().__init__()
        if digests is not None:
            from weightstore.errors import DigestError
            from weightstore.io._digest import new_hasher

            try:
                new_hasher(digests)
            except DigestError as err:
                raise InvalidOptionError(err.detail, option="digests") from None
        self.digests = digests
        self.path = os.fspath(path)
        self.overwrite = overwrite
        self.durable = durable
        self.allow_opaque_values = allow_opaque_values
        self.metadata = {str(key): str(value) for key, value in (metadata or {}).items()}
        self.save_id = uuid.uuid4().hex
        self._set_id: str | None = None

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        """A new save begins; `checkpoint_id`, when given, is its directory."""
        if checkpoint_id:
            self.path = os.fspath(checkpoint_id)
        self.save_id = uuid.uuid4().hex
        self._set_id = None

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        """Check how DCP runs this save (the coordinator is told its role again by
        `prepare_global_plan`, which only it runs).

        Raises:
            InvalidOptionError: ``use_collectives=False``, whose per-rank metadata files would
                make each rank its own commit point.
        """
        if kwargs.get("use_collectives", True) is False:
            raise InvalidOptionError(
                "use_collectives=False commits each rank's metadata on its own; a weightstore "
                "checkpoint has one index, committed by the coordinator",
                option="use_collectives",
            )

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        """Create the directory; refuse a committed checkpoint there unless `overwrite`.

        Raises:
            DestinationExistsError: a checkpoint is there and `overwrite` is false.
        """
        prepare_directory(self.path, overwrite=self.overwrite, durable=self.durable)
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        """Remove leftovers of killed saves; give each rank writing tensors a fresh file name
        and every rank the save's set id.

        Raises:
            InvalidOptionError: the planner reuses cached plans (``enable_plan_caching``),
                whose file names and set id are an earlier save's; raised before any rank
                writes.
        """
        if not all(plan.usable for plan in plans):
            raise InvalidOptionError(
                "the planner reuses an earlier save's cached plan, whose file names and set id "
                "belong to that save; create the planner with enable_plan_caching=False",
                option="enable_plan_caching",
            )
        fmt = self._format()
        writers = [
            rank
            for rank, plan in enumerate(plans)
            if any(item.type != WriteItemType.BYTE_IO for item in plan.items)
        ]
        set_id, names = plan_rank_files(self.path, writers, fmt.extensions[0])
        self._set_id = set_id
        return [
            dataclasses.replace(plan, storage_data=_RankPlan(set_id, names.get(rank)))
            for rank, plan in enumerate(plans)
        ]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        """Decode this rank's values, then stream its chunks into its file, one at a time.

        Raises:
            SetError: a value that is no plain value (unless `allow_opaque_values`), naming
                its key; raised before the rank's file is written.
            DTypeError: a dtype the container cannot hold, before a byte is written.
            EntryError: the planner resolved a chunk to a tensor of another shape or dtype.
        """
        rank_plan = plan.storage_data
        if not isinstance(rank_plan, _RankPlan):
            raise InvalidOptionError(
                "the save plan carries no weightstore file name: prepare_global_plan did not "
                "run for it (plan caching is not supported)",
                option="enable_plan_caching",
            )
        results = [
            self._value_result(item, planner)
            for item in plan.items
            if item.type == WriteItemType.BYTE_IO
        ]
        chunks = [item for item in plan.items if item.type != WriteItemType.BYTE_IO]
        if chunks:
            assert rank_plan.file is not None  # the coordinator named a file for every writer
            results.extend(self._write_file(rank_plan, chunks, planner))
        return _done(results)

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        """Commit the checkpoint: write the index atomically, then remove the files of the one
        it replaced."""
        assert self._set_id is not None  # prepare_global_plan ran on this (coordinator) writer
        stored = {
            (result.index.fqn, tuple(result.index.offset or ())): result.storage_data
            for rank_results in results
            for result in rank_results
        }
        tensors, values = _checkpoint_contents(metadata, stored)
        paths, planner_data = _planner_fields(metadata.planner_data)
        pairs = self.metadata
        if self.digests is not None:  # every chunk's digest, in the order the index lists them
            pairs = {**pairs, DIGESTS_KEY: _chunk_digests(self.digests, metadata, stored)}
        data = dcp_index_bytes(
            self._set_id,
            tensors,
            values,
            paths=paths,
            planner_data=planner_data,
            metadata=pairs,
            container=self.FORMAT_NAME,
            dcp_version=metadata.version or CURRENT_DCP_VERSION,
        )
        files = frozenset(chunk.file for tensor in tensors.values() for chunk in tensor.chunks)
        commit_index(self.path, data, files, durable=self.durable)

    def storage_meta(self) -> StorageMeta | None:
        """The checkpoint directory and this save's id, for DCP's planners and logs."""
        return StorageMeta(checkpoint_id=self.path, save_id=self.save_id)

    @property
    def checkpoint_id(self) -> str:
        """The checkpoint directory."""
        return self.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        """Whether `checkpoint_id` is a local directory path (URLs are not supported)."""
        return not is_url(checkpoint_id)

    # -- helpers -------------------------------------------------------------------------------

    @classmethod
    def _format(cls) -> ContainerFormat:
        from weightstore.formats import format_named

        return format_named(cls.FORMAT_NAME)

    def _value_result(self, item: WriteItem, planner: SavePlanner) -> WriteResult:
        data = planner.resolve_data(item)
        raw = data.getvalue() if isinstance(data, io.BytesIO) else bytes(data)
        try:
            value: object = decode_saved_value(raw, item.index.fqn, path=self.path)
        except SetError:
            if not self.allow_opaque_values:
                raise
            value = OpaqueValue(raw)
        return WriteResult(
            index=item.index, size_in_bytes=len(raw), storage_data=_StoredValue(value)
        )

    def _write_file(
        self, rank_plan: _RankPlan, items: Sequence[WriteItem], planner: SavePlanner
    ) -> list[WriteResult]:
        fmt = self._format()
        names = _chunk_names(items)
        chunks = {
            name: {"fqn": item.index.fqn, "offsets": list(_offsets(item))}
            for item, name in zip(items, names, strict=True)
        }
        pairs = {**self.metadata, SET_ID_KEY: rank_plan.set_id, CHUNKS_KEY: json.dumps(chunks)}
        pairs.pop(DIGESTS_KEY, None)  # a rank file's digests are its own, or none
        assert fmt.writer is not None  # both containers are writable
        digests: dict[str, str] = {}
        try:
            entries = [_entry(item, name, planner) for item, name in zip(items, names, strict=True)]
            if self.digests is not None:  # a first pass: the metadata precedes the data
                from weightstore.io._digest import encode_digests, tensor_digests

                digests = tensor_digests(self.digests, entries)
                pairs[DIGESTS_KEY] = encode_digests(self.digests, digests)
            writer = fmt.writer(entries, pairs)
        except DTypeError as err:
            hint = _DTYPE_HINTS.get(self.FORMAT_NAME, "")
            raise DTypeError(f"{err.detail}{hint}", path=self.path, tensor=err.tensor) from err
        assert rank_plan.file is not None
        write_rank_file(self.path, rank_plan.file, writer.write_to, durable=self.durable)
        return [
            WriteResult(
                index=item.index,
                size_in_bytes=entry.nbytes,
                storage_data=_StoredChunk(rank_plan.file, entry.name, digests.get(entry.name)),
            )
            for item, entry in zip(items, entries, strict=True)
        ]


def _offsets(item: WriteItem) -> tuple[int, ...]:
    assert item.tensor_data is not None  # a tensor or shard item
    return tuple(item.tensor_data.chunk.offsets)


def _chunk_names(items: Sequence[WriteItem]) -> list[str]:
    """Each chunk's name in the rank file: its fully qualified name, or for a second chunk of
    one name ``<fqn>@<offsets>`` (then ``#<n>`` until the name is free)."""
    taken: set[str] = set()
    names = []
    for item in items:
        name = item.index.fqn
        if name in taken:
            name = f"{name}@{','.join(map(str, _offsets(item)))}"
        base, number = name, 1
        while name in taken:
            name, number = f"{base}#{number}", number + 1
        taken.add(name)
        names.append(name)
    return names


def _entry(item: WriteItem, name: str, planner: SavePlanner) -> TensorEntry:
    """A writer entry whose data is the planner's tensor for `item`, resolved only when the
    writer reaches it and checked against what the plan declared."""
    assert item.tensor_data is not None
    try:
        dtype = _dtype_of(item.tensor_data.properties.dtype)
    except DTypeError as err:  # a dtype weightstore has no row for (quantized, ...)
        raise DTypeError(err.detail, tensor=name) from None
    shape = tuple(item.tensor_data.chunk.sizes)

    def produce() -> np.ndarray[Any, Any]:
        tensor = planner.resolve_data(item)
        if not isinstance(tensor, torch.Tensor):
            raise EntryError(
                f"the planner resolved a chunk to a {type(tensor).__name__}", tensor=name
            )
        if tuple(tensor.shape) != shape or _dtype_of(tensor.dtype) != dtype:
            raise EntryError(
                f"the planner resolved a chunk to {tensor.dtype} {list(tensor.shape)}, but its "
                f"plan declared {item.tensor_data.properties.dtype} {list(shape)}",  # type: ignore[union-attr]
                tensor=name,
            )
        return torch_to_array(tensor.detach())

    return TensorEntry(name, dtype, shape, produce)


def _checkpoint_contents(
    metadata: Metadata, stored: Mapping[tuple[str, tuple[int, ...]], object]
) -> tuple[dict[str, DcpTensor], dict[str, object]]:
    """The index's tensors and values: DCP's global metadata, joined with where ranks put
    each chunk and what each value decoded to."""
    tensors: dict[str, DcpTensor] = {}
    values: dict[str, object] = {}
    for fqn, entry in metadata.state_dict_metadata.items():
        if isinstance(entry, TensorStorageMetadata):
            chunks = []
            for chunk in entry.chunks:
                place = stored.get((fqn, tuple(chunk.offsets)))
                if not isinstance(place, _StoredChunk):
                    raise EntryError("no rank wrote a chunk the plan lists", tensor=fqn)
                chunks.append(DcpChunk(place.file, place.name, chunk.offsets, chunk.sizes))
            tensors[fqn] = DcpTensor(_dtype_of(entry.properties.dtype), entry.size, chunks)
        else:
            saved = stored.get((fqn, ()))
            if not isinstance(saved, _StoredValue):
                raise EntryError("no rank wrote a value the plan lists", tensor=fqn)
            values[fqn] = saved.value
    return tensors, values


def _chunk_digests(
    algorithm: str, metadata: Metadata, stored: Mapping[tuple[str, tuple[int, ...]], object]
) -> str:
    """The index's ``weightstore.digests`` value: per tensor, its chunks' digests in the order
    the index lists the chunks (docs/integrity.md)."""
    from weightstore.io._digest import encode_digests

    chunks: dict[str, list[str | None]] = {}
    for fqn, entry in metadata.state_dict_metadata.items():
        if isinstance(entry, TensorStorageMetadata):
            chunks[fqn] = [
                getattr(stored.get((fqn, tuple(chunk.offsets))), "digest", None)
                for chunk in entry.chunks
            ]
    value = json.loads(encode_digests(algorithm))
    value["chunks"] = chunks
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _planner_fields(
    planner_data: object,
) -> tuple[dict[str, tuple[str | int, ...]] | None, object]:
    """DCP's default planners record each key's object path (``fqn -> ("model", "fc", 0)``):
    those go to the index's ``paths``; any other planner data is kept as a plain value."""
    if isinstance(planner_data, dict) and all(
        isinstance(key, str)
        and isinstance(parts, tuple)
        and all(type(part) in (str, int) for part in parts)
        for key, parts in planner_data.items()
    ):
        return {key: tuple(parts) for key, parts in planner_data.items()}, None
    return None, planner_data


# -- reading --------------------------------------------------------------------------------------


class _DcpStorageReader(StorageReader):
    """A DCP ``StorageReader`` over a checkpoint in weightstore's layout (either container)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        allow_opaque_values: bool = False,
        max_index_size: int = MAX_DCP_INDEX_SIZE,
    ) -> None:
        super().__init__()
        self.path = os.fspath(path)
        self.allow_opaque_values = allow_opaque_values
        self.max_index_size = max_index_size
        self.load_id = uuid.uuid4().hex
        self._index: DcpIndex | None = None
        self._paths: dict[str, str] = {}

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        """A new load begins; `checkpoint_id`, when given, is its directory."""
        if checkpoint_id:
            self.path = os.fspath(checkpoint_id)
        self.load_id = uuid.uuid4().hex
        self._index = None

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """Read and check the index, and build DCP's metadata from it; unpickles nothing.

        Raises:
            SetError: the index or a rank file's size breaks the layout's rules
                (`weightstore.dcp._index`); LimitExceeded: the index is too large.
        """
        index = read_dcp_index(self.path, max_index_size=self.max_index_size)
        container_format(index)  # the rank files' format is one we read
        self._paths = locate_rank_files(index)
        self._index = index
        return _metadata_of(index, self.path, self.load_id)

    def set_up_storage_reader(
        self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any
    ) -> None:
        """Make sure the index is read (DCP calls `read_metadata` first on every rank)."""
        if self._index is None:
            self.read_metadata()

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        """The planner's plan, unchanged: reads are grouped and ordered in `read_data`."""
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        """The planners' plans, unchanged."""
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        """Hand the planner each value, re-encoded from its plain form, and copy into each
        target the part of a chunk it asks for, reading only those bytes.

        Raises:
            SetError: the plan asks for a chunk or region the checkpoint does not hold, or
                for an opaque value without `allow_opaque_values`; a rank file disagrees with
                the index.
        """
        index = self._loaded_index()
        files = RankFiles(index, self._paths, container_format(index), mode="pread")
        try:
            by_file: dict[str, list[tuple[ReadItem, DcpTensor, DcpChunk]]] = {}
            for item in plan.items:
                if item.type == LoadItemType.BYTE_IO:
                    planner.load_bytes(item, io.BytesIO(self._value_bytes(index, item)))
                    continue
                tensor, chunk = _chunk_of(index, item)
                by_file.setdefault(chunk.file, []).append((item, tensor, chunk))
            for file in sorted(by_file):
                _read_file(files, file, by_file[file], planner)
        finally:
            files.close()
        return _done(None)

    @property
    def checkpoint_id(self) -> str:
        """The checkpoint directory."""
        return self.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        """Whether `checkpoint_id` is a directory (or index) holding a weightstore checkpoint."""
        return not is_url(checkpoint_id) and os.path.isfile(dcp_index_path(checkpoint_id))

    def _loaded_index(self) -> DcpIndex:
        if self._index is None:
            self.read_metadata()
        assert self._index is not None
        return self._index

    def _value_bytes(self, index: DcpIndex, item: ReadItem) -> bytes:
        """``torch.save`` of the stored plain value, made here from plain values only."""
        fqn = item.storage_index.fqn
        if fqn not in index.values:
            raise SetError(
                "the planner asks for a value the checkpoint does not hold",
                path=index.path,
                tensor=fqn,
            )
        value = index.values[fqn]
        if isinstance(value, OpaqueValue):
            if not self.allow_opaque_values:
                raise SetError(_OPAQUE_REFUSED, path=index.path, tensor=fqn)
            return value.data
        buffer = io.BytesIO()
        torch.save(value, buffer)
        return buffer.getvalue()


def _metadata_of(index: DcpIndex, path: str, load_id: str) -> Metadata:
    """DCP's ``Metadata`` for the checkpoint `index` describes."""
    entries: dict[str, STORAGE_TYPES] = {}
    storage: dict[MetadataIndex, _StoredChunk] = {}
    for fqn, tensor in index.tensors.items():
        assert tensor.dtype.torch is not None  # every dtype a container holds has a torch name
        properties = TensorProperties(dtype=getattr(torch, tensor.dtype.torch))
        chunks = [
            ChunkStorageMetadata(torch.Size(chunk.offsets), torch.Size(chunk.sizes))
            for chunk in tensor.chunks
        ]
        entries[fqn] = TensorStorageMetadata(properties, torch.Size(tensor.shape), chunks)
        for chunk in tensor.chunks:
            storage[MetadataIndex(fqn, chunk.offsets)] = _StoredChunk(chunk.file, chunk.name)
    for fqn in index.values:
        entries[fqn] = BytesStorageMetadata()
    planner_data = index.paths if index.paths is not None else index.planner_data
    return Metadata(
        state_dict_metadata=entries,
        planner_data=planner_data,
        storage_data=storage,
        storage_meta=StorageMeta(checkpoint_id=path, save_id=index.set_id, load_id=load_id),
        version=index.metadata.get("dcp_version"),
    )


def _chunk_of(index: DcpIndex, item: ReadItem) -> tuple[DcpTensor, DcpChunk]:
    """The stored chunk a read asks for, its region checked to lie inside it."""
    fqn = item.storage_index.fqn
    tensor = index.tensors.get(fqn)
    offsets = tuple(item.storage_index.offset or ())
    chunk = None
    if tensor is not None:
        chunk = next((c for c in tensor.chunks if c.offsets == offsets), None)
    if tensor is None or chunk is None:
        raise SetError(
            f"the planner asks for a chunk at {list(offsets)} that the checkpoint does not hold",
            path=index.path,
            tensor=fqn,
        )
    region = zip(item.storage_offsets, item.lengths, chunk.sizes, strict=True)
    if any(start < 0 or length < 0 or start + length > size for start, length, size in region):
        raise SetError(
            f"the planner asks for {list(item.lengths)} elements from {list(item.storage_offsets)}"
            f" of a chunk of shape {list(chunk.sizes)}",
            path=index.path,
            tensor=fqn,
        )
    return tensor, chunk


def _read_file(
    files: RankFiles,
    file: str,
    reads: list[tuple[ReadItem, DcpTensor, DcpChunk]],
    planner: LoadPlanner,
) -> None:
    """Serve every read of one rank file, in the order its bytes lie."""
    reader = files.reader(file)

    def position(read: tuple[ReadItem, DcpTensor, DcpChunk]) -> tuple[int, tuple[int, ...]]:
        item, _, chunk = read
        start = getattr(reader.descriptor(chunk.name), "data_offsets", (0, 0))[0]
        return start, tuple(item.storage_offsets)

    for item, tensor, chunk in sorted(reads, key=position):
        region = tuple(
            slice(start, start + length)
            for start, length in zip(item.storage_offsets, item.lengths, strict=True)
        )
        array = np.asarray(reader.get_slice(chunk.name)[region])  # a 0-d read is a scalar
        source = array_to_torch(array, tensor.dtype)
        target = planner.resolve_tensor(item).detach()
        if target.size() != source.size():
            raise SetError(
                f"the planner's target is {list(target.size())}, but the read is "
                f"{list(source.size())}",
                path=files.index.path,
                tensor=item.dest_index.fqn,
            )
        target.copy_(source)
        planner.commit_tensor(item, target)


# -- the public classes ---------------------------------------------------------------------------


class BurnpackStorageWriter(_DcpStorageWriter):
    """Saves a DCP checkpoint as one burnpack file per rank and a JSON index.

    Pass it as ``storage_writer=`` to ``dcp.save`` or ``dcp.async_save``; every rank creates
    one with the same directory.

    Args:
        path: the checkpoint directory (created if missing).
        overwrite: replace a committed checkpoint there (old or new survives any crash).
        durable: fsync files and directory before the commit; false keeps only atomicity.
        allow_opaque_values: keep a non-tensor value that is no plain value as its
            ``torch.save`` bytes, marked opaque (loading it then needs the same opt-in),
            instead of refusing it.
        metadata: string pairs for the index and every rank file.
        digests: an algorithm (``"sha256"``, ``"xxh3_128"``, docs/integrity.md): every rank
            file carries its chunks' digests, which loads check as they read, and the index
            every chunk's (``weightstore.digests``: tensor -> digests in chunk order).

    Example:
        >>> dcp.save(state, storage_writer=BurnpackStorageWriter("ckpt"))  # doctest: +SKIP
    """

    FORMAT_NAME = "burnpack"


class SafetensorsStorageWriter(_DcpStorageWriter):
    """Saves a DCP checkpoint as one SafeTensors file per rank and a JSON index: for dtypes
    burnpack lacks (fp8, complex64). Arguments as `BurnpackStorageWriter`'s."""

    FORMAT_NAME = "safetensors"


class BurnpackStorageReader(_DcpStorageReader):
    """Loads a DCP checkpoint in weightstore's layout (burnpack or SafeTensors rank files).

    Pass it as ``storage_reader=`` to ``dcp.load``; DCP's planner reshards as it does for
    torch's own files, and each rank reads only the bytes of the chunk parts it needs.

    Args:
        path: the checkpoint directory (or its ``dcp.index.json``).
        allow_opaque_values: hand the planner values stored as opaque ``torch.save`` bytes,
            which it unpickles: only for checkpoints whose author you trust.
        max_index_size: refuse a larger index before reading it (default
            `MAX_DCP_INDEX_SIZE`, 1 GiB: twice a 405B training checkpoint's on 1,024 ranks).

    Example:
        >>> dcp.load(state, storage_reader=BurnpackStorageReader("ckpt"))  # doctest: +SKIP
    """


class SafetensorsStorageReader(_DcpStorageReader):
    """The same reader as `BurnpackStorageReader` (either reads both containers), named to
    pair with `SafetensorsStorageWriter`."""
