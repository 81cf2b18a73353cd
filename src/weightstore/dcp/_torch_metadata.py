"""torch's own DCP checkpoint index: the ``.metadata`` pickle that ``FileSystemWriter`` writes,
read by the symbolic pickle machine into plain records. Nothing the file names is imported or
called; torch's ``FileSystemReader`` runs ``pickle.load`` on the same bytes.

The pickle is a ``torch.distributed.checkpoint.metadata.Metadata``: for each fully qualified
name, a ``TensorStorageMetadata`` (dtype, global size, the chunks: offsets and sizes) or a
``BytesStorageMetadata`` (a non-tensor value); and ``storage_data``, where each item lies: a
``MetadataIndex`` (name, chunk offsets) -> ``_StorageInfo`` (rank file ``__R_I.distcp``, byte
offset, length). Each item is a ``torch.save`` archive of the chunk (or of the value) at that
offset. The classes are taken only where torch puts them, each by its fields; a global outside
them anywhere in the value is refused, as `CodeObjectError` when it would run code under
``pickle.load``. The chunks of every tensor must tile it (`_tiling`), each item must lie in a
file of the directory and hold at least its chunk's bytes (checked when the files are found,
`_torch_reader`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Final

from weightstore.base._record import Record, ValueRecord
from weightstore.base._render import bounded_repr
from weightstore.dcp._index import DcpChunk, DcpTensor
from weightstore.dcp._tiling import CornerBudget, first_miscovered
from weightstore.dtypes import DType
from weightstore.errors import (
    CodeObjectError,
    DTypeError,
    LimitExceeded,
    SetError,
)
from weightstore.io._source import open_readable

__all__ = [
    "MAX_TORCH_METADATA_SIZE",
    "TORCH_DCP_CLASSES",
    "StoredItem",
    "TorchDcpIndex",
    "read_torch_metadata",
]

MAX_TORCH_METADATA_SIZE: Final = 1 << 30
"""Bytes of a ``.metadata`` read at most (1 GiB); a 405B model's on 1,024 ranks is far less."""
MAX_CHUNK_DIMS: Final = 64
"""Dimensions a chunk's offsets or sizes may have (torch's own limit is 64)."""

_METADATA: Final = "torch.distributed.checkpoint.metadata"
TORCH_DCP_CLASSES: Final = frozenset({
    f"{_METADATA}.{name}" for name in (
        "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
        "TensorProperties", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING",
    )
} | {
    "torch.distributed.checkpoint.filesystem._StorageInfo", "torch.serialization._get_layout",
    "pathlib.PosixPath", "pathlib.WindowsPath", "pathlib.PurePosixPath",
    "pathlib.PureWindowsPath",
})  # fmt: skip
"""The globals a ``.metadata`` of torch 2.x names (beside ``torch.Size`` and dtypes, which the
machine knows): its own records, and the ``pathlib`` class of the checkpoint id it keeps."""


class StoredItem(ValueRecord):
    """Where one item of the checkpoint lies: ``length`` bytes at ``offset`` of ``file``."""

    file: str
    offset: int
    length: int


class TorchDcpIndex(Record):
    """A decoded, checked torch DCP ``.metadata``.

    Attributes:
        path: the ``.metadata`` file.
        tensors: fully qualified name -> `DcpTensor` (its chunks named ``name#i``), in the
            file's order.
        items: chunk name -> the `StoredItem` holding its ``torch.save`` archive.
        values: fully qualified name of each non-tensor value -> its `StoredItem`.
        paths: fully qualified name -> the planner's path into the saved state dict.
        version: the metadata's ``version`` (``"1.0.0"``), or None.
    """

    path: str
    tensors: dict[str, DcpTensor]
    items: dict[str, StoredItem]
    values: dict[str, StoredItem]
    paths: dict[str, tuple[str | int, ...]]
    version: str | None

    def files(self) -> list[str]:
        """Every rank file an item lies in, sorted."""
        return sorted({item.file for item in (*self.items.values(), *self.values.values())})


def read_torch_metadata(path: str, *, max_size: int = MAX_TORCH_METADATA_SIZE) -> TorchDcpIndex:
    """The index of the checkpoint whose ``.metadata`` is at `path`, decoded and checked.

    Raises:
        LimitExceeded: the file is larger than `max_size`.
        CodeObjectError: the pickle names a global that would run code under ``pickle.load``.
        SetError: a global other than torch's DCP records, a record without the fields torch
            writes, chunks that leave their tensor or overlap or leave holes, an item that is
            not a file of the directory, or a chunk without its item.
        PickleError, TruncatedError: bytes the pickle machine cannot run.
    """
    from weightstore.pytorch_reader._machine import run_pickle

    with open_readable(path) as file:
        size = os.fstat(file.fileno()).st_size
        if size > max_size:
            raise LimitExceeded("torch DCP .metadata bytes", size, max_size, path=path)
        data = file.read()
    value, _, _ = run_pickle(data, path=path)
    _refuse_foreign_globals(value, path)
    return _Decoder(path).index(value)


def _refuse_foreign_globals(value: object, path: str) -> None:
    from weightstore.pytorch_reader._policy import runs_code, scan_globals

    scan = scan_globals(value, every=True)
    found = [g for g in (*scan.suspicious, *scan.classes) if g.qualname not in TORCH_DCP_CLASSES]
    code = [g for g in found if runs_code(g.module, g.name)]
    if code or not scan.complete:
        raise CodeObjectError(
            tuple(g.qualname for g in code), code[0].where if code else "",
            complete=scan.complete, path=path,
        )  # fmt: skip
    if found:
        raise SetError(
            f"the DCP metadata names {bounded_repr(found[0].qualname, limit=80)} at "
            f"{bounded_repr(found[0].where, limit=80)}, which is none of torch's checkpoint "
            "records (nothing ran)",
            path=path,
        )


class _Decoder:
    """Turns the machine's inert records into an index, naming the field at fault."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, detail: str, tensor: str | None = None) -> SetError:
        return SetError(f"torch DCP metadata: {detail}", path=self.path, tensor=tensor)

    def fields(self, value: object, cls: str, where: str) -> dict[str, object]:
        """The attributes of a record of class `cls` (in torch's DCP modules)."""
        from weightstore.pytorch_reader._objects import GlobalRef, InertObject

        callee = value.callee if isinstance(value, InertObject) else None
        if not isinstance(callee, GlobalRef) or callee.name != cls:
            shown = value.class_name if isinstance(value, InertObject) else type(value).__name__
            raise self.fail(f"{where} is {bounded_repr(shown, limit=80)}, not a {cls}")
        assert isinstance(value, InertObject)
        return value.attributes

    def index(self, root: object) -> TorchDcpIndex:
        meta = self.fields(root, "Metadata", "the root")
        entries = self.mapping(meta.get("state_dict_metadata"), "state_dict_metadata")
        stored = self.storage_data(meta.get("storage_data"))
        tensors: dict[str, DcpTensor] = {}
        items: dict[str, StoredItem] = {}
        values: dict[str, StoredItem] = {}
        budget = CornerBudget()
        for fqn, entry in entries.items():
            if not isinstance(fqn, str):
                raise self.fail(f"a name is {type(fqn).__name__}, not str")
            kind = getattr(getattr(entry, "callee", None), "name", None)
            if kind == "BytesStorageMetadata":
                item = stored.get((fqn, None))
                if item is None:
                    raise self.fail("a value has no item in storage_data", tensor=fqn)
                values[fqn] = item
                continue
            tensor, chunk_items = self.tensor(fqn, entry, stored, budget)
            tensors[fqn] = tensor
            items.update(chunk_items)
        version = meta.get("version")
        return TorchDcpIndex(
            self.path, tensors, items, values, self.planner_paths(meta.get("planner_data")),
            version if isinstance(version, str) else None,
        )  # fmt: skip

    def mapping(self, value: object, where: str) -> Mapping[object, object]:
        if not isinstance(value, dict):
            raise self.fail(f"{where} is {type(value).__name__}, not a dict")
        return value

    def storage_data(self, value: object) -> dict[tuple[str, tuple[int, ...] | None], StoredItem]:
        found: dict[tuple[str, tuple[int, ...] | None], StoredItem] = {}
        for key, info in self.mapping(value, "storage_data").items():
            index = self.fields(key, "MetadataIndex", "a storage_data key")
            fqn = index.get("fqn")
            if not isinstance(fqn, str):
                raise self.fail("a storage_data key has no fqn")
            offset = index.get("offset")
            at = None if offset is None else self.ints(offset, "an item's offset", fqn)
            found[(fqn, at)] = self.stored(info, fqn)
        return found

    def stored(self, value: object, fqn: str) -> StoredItem:
        info = self.fields(value, "_StorageInfo", "a storage_data value")
        file, offset, length = (info.get(k) for k in ("relative_path", "offset", "length"))
        if info.get("transform_descriptors"):
            shown = bounded_repr(info["transform_descriptors"], limit=80)
            raise self.fail(f"its item is stored through transforms {shown} (compressed or "
                            "by an extension), which are not read", tensor=fqn)  # fmt: skip
        if not isinstance(file, str) or not _plain_name(file):
            raise self.fail(
                f"its item's file {bounded_repr(file, limit=80)} is no file name inside the "
                "checkpoint directory", tensor=fqn,
            )  # fmt: skip
        if not _count(offset) or not _count(length):
            raise self.fail(f"its item lies at {offset!r}, {length!r} bytes", tensor=fqn)
        assert isinstance(offset, int) and isinstance(length, int)
        return StoredItem(file, offset, length)

    def tensor(
        self,
        fqn: str,
        entry: object,
        stored: Mapping[tuple[str, tuple[int, ...] | None], StoredItem],
        budget: CornerBudget,
    ) -> tuple[DcpTensor, dict[str, StoredItem]]:
        fields = self.fields(entry, "TensorStorageMetadata", f"the entry of {fqn!r}")
        dtype = self.dtype(self.properties_dtype(fields.get("properties")), fqn)
        shape = self.ints(fields.get("size"), "its size", fqn)
        chunks_value = fields.get("chunks")
        if not isinstance(chunks_value, list):
            raise self.fail("its chunks are no list", tensor=fqn)
        chunks: list[DcpChunk] = []
        items: dict[str, StoredItem] = {}
        for i, chunk_value in enumerate(chunks_value):
            chunk = self.fields(chunk_value, "ChunkStorageMetadata", "a chunk")
            offsets = self.ints(chunk.get("offsets"), "a chunk's offsets", fqn)
            sizes = self.ints(chunk.get("sizes"), "a chunk's sizes", fqn)
            if (
                len(offsets) != len(shape)
                or len(sizes) != len(shape)
                or any(o + s > d for o, s, d in zip(offsets, sizes, shape, strict=True))
            ):
                raise self.fail(
                    f"chunk at {list(offsets)} of {list(sizes)} leaves the tensor's "
                    f"{list(shape)}", tensor=fqn,
                )  # fmt: skip
            item = stored.get((fqn, offsets))
            if item is None:
                raise self.fail(f"chunk at {list(offsets)} has no item in storage_data", fqn)
            if item.length < dtype.nbytes(sizes):
                raise self.fail(
                    f"chunk at {list(offsets)} needs {dtype.nbytes(sizes):,} bytes, but its "
                    f"item is {item.length:,}", tensor=fqn,
                )  # fmt: skip
            name = f"{fqn}#{i}"
            chunks.append(DcpChunk(item.file, name, offsets, sizes))
            items[name] = item
        boxes = [(c.offsets, c.sizes) for c in chunks]
        wrong = first_miscovered(shape, boxes, budget, path=self.path, tensor=fqn)
        if wrong is not None:
            point, holders = wrong
            what = "no chunk holds" if holders == 0 else f"{holders} chunks hold"
            raise self.fail(f"{what} element {list(point)}: its chunks do not tile it", fqn)
        return DcpTensor(dtype, shape, chunks), items

    def properties_dtype(self, value: object) -> object:
        """The dtype of a ``TensorProperties``: its state is a tuple, dtype first (torch's
        ``__getstate__``), or its fields."""
        from weightstore.pytorch_reader._objects import InertObject

        fields = self.fields(value, "TensorProperties", "its properties")
        assert isinstance(value, InertObject)
        if isinstance(value.state, tuple) and value.state:
            return value.state[0]
        return fields.get("dtype")

    def dtype(self, value: object, fqn: str) -> DType:
        from weightstore.pytorch_reader._objects import TorchDType

        if not isinstance(value, TorchDType):
            raise self.fail(f"its dtype is {bounded_repr(value, limit=80)}", tensor=fqn)
        try:
            dtype = value.dtype
        except DTypeError as err:
            detail = f"its dtype torch.{value.name} is not read ({err.detail})"
            raise self.fail(detail, fqn) from err
        if dtype.numpy is None:
            raise self.fail(f"its dtype torch.{value.name} has no NumPy array type", fqn)
        return dtype

    def ints(self, value: object, what: str, fqn: str) -> tuple[int, ...]:
        if not isinstance(value, tuple | list) or len(value) > MAX_CHUNK_DIMS:
            raise self.fail(f"{what} is {bounded_repr(value, limit=80)}", tensor=fqn)
        if not all(_count(v) for v in value):
            raise self.fail(f"{what} holds {bounded_repr(value, limit=80)}", tensor=fqn)
        ints = tuple(int(v) for v in value)
        if math.prod(ints) > 1 << 62:
            raise self.fail(f"{what} {list(ints)} has more elements than any tensor", fqn)
        return ints

    def planner_paths(self, value: object) -> dict[str, tuple[str | int, ...]]:
        """The planner's object path of each name (``("model", "fc.weight")``); entries of
        other shapes are left out (a custom planner's data is its own)."""
        if not isinstance(value, dict):
            return {}
        return {
            fqn: tuple(path)
            for fqn, path in value.items()
            if isinstance(fqn, str)
            and isinstance(path, tuple)
            and all(isinstance(part, str | int) for part in path)
        }


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _plain_name(name: str) -> bool:
    """A file name of the directory itself: no separator, no parent, nothing absolute."""
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name
