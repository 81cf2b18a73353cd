"""A torch.distributed.checkpoint (DCP) directory in weightstore's layout, and its index, read
as hostile input.

torch's own DCP file backend pickles its ``.metadata`` (loading a stranger's checkpoint runs
their code) and rewrites fixed file names in place (a crash mid-save leaves a silent mix of old
and new). Here a checkpoint is a directory like a sharded set (docs/sharded.md)::

    ckpt/
        dcp.index.json                  the index: the only commit point
        rank-00000.1f2e3d4c.bpk         one container per rank that wrote tensors (burnpack or
        rank-00001.1f2e3d4c.bpk         SafeTensors), tagged with the save's set id, so a save
                                        never overwrites a file the committed index names

Each rank file is an ordinary container holding that rank's chunks, named by their fully
qualified name (``model.fc1.weight``; a second chunk of one name on one rank gets
``@<offsets>`` appended), with the set id and every chunk's global offsets in its metadata
(`CHUNKS_KEY`), so it reads on its own. The index is JSON in the sharded-set index's family::

    {"metadata": {"weightstore.format": "torch.distributed.checkpoint",
                  "weightstore.container": "burnpack",  # or "safetensors"
                  "weightstore.set_id": "<32 lowercase hex>", "total_size": 1234,
                  "dcp_version": "1.0.0", ...},
     "tensors": {"<fqn>": {"dtype": "F32", "shape": [8, 6],
                           "chunks": [{"file": "rank-00000.1f2e3d4c.bpk", "name": "<fqn>",
                                       "offsets": [0, 0], "sizes": [4, 6]}, ...]}},
     "values": {"<fqn>": <plain value in tagged JSON (`_dcp_values`)>},
     "paths": {"<fqn>": ["model", "fc1", "weight"]},     # the planner's object paths
     "planner_data": <plain value>}                       # only for a planner with other data

Checks before any rank file is opened: the file's size against a limit; UTF-8 JSON with no key
given twice and no nesting past `MAX_DCP_INDEX_DEPTH`; the shape above; the format key and a
set id; known dtypes; shapes NumPy can make an array of, even an empty one (`MAX_DIM_SIZE`,
`validate_shape`), so every number checked after stays small; file names that stay in the
directory (the set index's rule); every tensor's chunks inside its shape and tiling it exactly
(no gap, no overlap; `_tiling`, near-linear in the chunks), so a tensor put together from its
chunks never holds bytes no file gave; each (file, name) pair used once; no
key both a tensor and a value; values in the tagged form. `locate_rank_files` then checks each
named file is in the directory and large enough for the chunks claimed in it, which bounds
what a load allocates by what is on disk.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from operator import add, gt
from typing import Any, Final

from weightstore.base._gc import collector_paused
from weightstore.base._record import Record, ValueRecord
from weightstore.base._render import bounded_int, bounded_repr
from weightstore.container._reader import validate_shape

# The set index's rules, shared: key uniqueness, nesting, metadata pairs, file-name confinement.
from weightstore.dcp._names import DCP_INDEX_NAME, is_dcp_checkpoint
from weightstore.dcp._tiling import CornerBudget, first_miscovered
from weightstore.dcp._values import from_json, to_json
from weightstore.dtypes import DType, from_name
from weightstore.errors import DTypeError, LimitExceeded, SetError
from weightstore.io._source import open_readable
from weightstore.sets._index import (
    _SET_ID,
    SET_ID_KEY,
    SetIndex,
    _kind,
    _parse_metadata,
    decode_json,
    locate_shards,
    validate_shard_name,
)

__all__ = [
    "CHUNKS_KEY",
    "CONTAINER_KEY",
    "DCP_INDEX_NAME",
    "FORMAT_KEY",
    "FORMAT_VALUE",
    "MAX_DCP_INDEX_DEPTH",
    "MAX_DCP_INDEX_SIZE",
    "MAX_DIMS",
    "MAX_DIM_SIZE",
    "RANK_FILE",
    "DcpChunk",
    "DcpIndex",
    "DcpTensor",
    "dcp_index_bytes",
    "dcp_index_path",
    "is_dcp_checkpoint",
    "locate_rank_files",
    "parse_dcp_index",
    "rank_file_name",
    "read_dcp_index",
]

FORMAT_KEY: Final = "weightstore.format"
"""The index metadata key saying what the index describes (`FORMAT_VALUE`)."""
FORMAT_VALUE: Final = "torch.distributed.checkpoint"
"""`FORMAT_KEY`'s value in a DCP index: a sharded-set index has no such key."""
CONTAINER_KEY: Final = "weightstore.container"
"""The index metadata key naming the rank files' container format (``"burnpack"``)."""
DCP_VERSION_KEY: Final = "dcp_version"
"""The index metadata key of the DCP metadata version the checkpoint was saved under."""
TOTAL_SIZE_KEY: Final = "total_size"  # bytes of tensor data, as in a set's index
CHUNKS_KEY: Final = "weightstore.dcp.chunks"
"""Each rank file's metadata key: JSON ``{name: {"fqn": .., "offsets": [..]}}``, each chunk's
key and where it starts in the whole tensor."""
RANK_FILE: Final = re.compile(r"rank-(?P<rank>\d{5,})\.(?P<tag>[0-9a-f]{8})\.(?P<ext>[A-Za-z0-9]+)")
"""A rank file's name: the rank, the first 8 hex digits of the set id, the extension."""
TAG_HEX_LEN: Final = 8  # digits of the set id in a rank file's name
MAX_DCP_INDEX_SIZE: Final = 2**30
"""Bytes an index may have unless the caller raises it (``max_index_size=``), checked before
a byte is read. An index lists every chunk of every tensor, so it grows with tensors times
ranks: a training checkpoint (weights and Adam state) of Llama-3.1-405B on 1,024 ranks writes
512,642,332 bytes (489 MiB) split FSDP-style and 515,107,009 on a TP=8 x FSDP=128 grid
(benchmarks/bench_dcp_index.py), under half of this; its 3.5 million chunks parse in about
20 s and 3.1 GiB on the 2-core development machine. The sharded set's 64 MiB refused it, and
the same checkpoint on 128 ranks."""
MAX_DCP_INDEX_DEPTH: Final = 256
"""Nesting levels an index may have: the schema needs seven, and each level of a stored value
takes up to three (``{"$dict": [[key, value]]}``)."""
MAX_DIMS: Final = 64  # dimensions of a tensor; torch allows 64 too
MAX_DIM_SIZE: Final = 2**63 - 1
"""A dimension, offset or size in an index: torch and NumPy index with int64, and a bound here
keeps every sum and product the checks take small (a JSON int may have 4,300 digits)."""

_SHOWN: Final = 60  # characters of a file-supplied name in a message


class DcpChunk(ValueRecord):
    """One stored piece of a tensor.

    Attributes:
        file: the rank file holding it (a name in the checkpoint directory).
        name: its tensor name in that file.
        offsets: where it starts in the whole tensor, per dimension.
        sizes: its shape.
    """

    file: str
    name: str
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]

    def __init__(self, file: str, name: str, offsets: Sequence[int], sizes: Sequence[int]) -> None:
        super().__init__(file, name, tuple(offsets), tuple(sizes))

    @property
    def numel(self) -> int:
        """Elements in the chunk."""
        return math.prod(self.sizes)

    def region(self) -> tuple[slice, ...]:
        """Where the chunk lies in the whole tensor, as an index."""
        return tuple(slice(o, o + s) for o, s in zip(self.offsets, self.sizes, strict=True))


class DcpTensor(ValueRecord):
    """A tensor of the checkpoint: its global dtype and shape and the chunks that tile it."""

    dtype: DType
    shape: tuple[int, ...]
    chunks: tuple[DcpChunk, ...]

    def __init__(self, dtype: DType, shape: Sequence[int], chunks: Sequence[DcpChunk]) -> None:
        super().__init__(dtype, tuple(shape), tuple(chunks))

    @property
    def nbytes(self) -> int:
        """Bytes of the whole tensor."""
        return self.dtype.nbytes(self.shape)


class DcpIndex(Record):
    """A parsed, checked DCP index.

    Attributes:
        path: the index file.
        set_id: the save's id, also in every rank file.
        metadata: the index's ``metadata`` as string pairs.
        tensors: fully qualified name -> `DcpTensor`, in the index's order.
        values: fully qualified name -> plain value (or `OpaqueValue`).
        paths: fully qualified name -> the planner's object path, or None when the planner
            recorded none.
        planner_data: other planner data, as a plain value, or None.
    """

    path: str
    set_id: str
    metadata: dict[str, str]
    tensors: dict[str, DcpTensor]
    values: dict[str, object]
    paths: dict[str, tuple[str | int, ...]] | None
    planner_data: object

    def __init__(
        self,
        path: str,
        set_id: str,
        metadata: dict[str, str],
        tensors: dict[str, DcpTensor],
        values: dict[str, object],
        paths: dict[str, tuple[str | int, ...]] | None,
        planner_data: object,
    ) -> None:
        super().__init__(path, set_id, metadata, tensors, values, paths, planner_data)

    @property
    def directory(self) -> str:
        """The directory the file names are relative to."""
        return os.path.dirname(self.path) or "."

    def files(self) -> list[str]:
        """Every rank file the index names, sorted."""
        return sorted({chunk.file for tensor in self.tensors.values() for chunk in tensor.chunks})


# -- names ----------------------------------------------------------------------------------------


def rank_file_name(rank: int, set_id: str, extension: str) -> str:
    """Rank `rank`'s file of the save `set_id`: ``rank-00003.1f2e3d4c.bpk``."""
    return f"rank-{rank:05d}.{set_id[:TAG_HEX_LEN]}.{extension}"


def dcp_index_path(path: str | os.PathLike[str]) -> str:
    """The index of the checkpoint at `path` (its directory, or the index itself)."""
    filename = os.fspath(path)
    if os.path.basename(filename) == DCP_INDEX_NAME and not os.path.isdir(filename):
        return filename
    return os.path.join(filename, DCP_INDEX_NAME)


# -- reading --------------------------------------------------------------------------------------


def read_dcp_index(
    path: str | os.PathLike[str],
    *,
    max_index_size: int = MAX_DCP_INDEX_SIZE,
    hand_over: bool = False,
) -> DcpIndex:
    """Read and check the index of the checkpoint at `path` (a directory or the index).

    `hand_over`: keep the result for the next read of the same unchanged file (the open that
    follows `weightstore.locate`), which then skips the parse; the size limit is still checked.

    Raises:
        LimitExceeded: the index is over `max_index_size` bytes (`MAX_DCP_INDEX_SIZE` unless
            given), refused before it is read.
        SetError: the bytes break the rules of this module's docstring.
        FileMissingError: there is no index.
    """
    filename = dcp_index_path(path)
    with open_readable(filename) as file:
        stat = os.fstat(file.fileno())
        identity = (filename, stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
        handed = _HANDED_OVER.pop(identity, None)
        _HANDED_OVER.clear()
        if stat.st_size > max_index_size:
            raise LimitExceeded("index size", stat.st_size, max_index_size, path=filename)
        if handed is not None:
            return handed
        data = file.read(max_index_size + 1)
    if len(data) > max_index_size:
        raise LimitExceeded("index size", len(data), max_index_size, path=filename)
    index = parse_dcp_index(data, filename)
    if hand_over:
        _HANDED_OVER[identity] = index
    return index


_HANDED_OVER: dict[tuple[str, int, int, int, int], DcpIndex] = {}
"""At most one parsed index, kept by a read with ``hand_over`` for the next read of the same
file (same name, inode, size and modification time): `weightstore.locate` parses an index to
learn its rank files' format, and the open that follows takes the result instead of parsing
again (a 405B checkpoint's index takes 20 s). Any next read empties it, so nothing stays."""


def parse_dcp_index(data: bytes, path: str) -> DcpIndex:
    """Check `data`, a DCP index's bytes, and build its `DcpIndex` (`path` names it).

    Raises:
        SetError: the first rule of the module docstring the bytes break.
    """
    # Millions of objects, none garbage: unpaused, the collector walks them all again and
    # again (a third of the time of a 64-rank index, more the larger it is).
    with collector_paused():
        return _parse_dcp_index(data, path)


def _parse_dcp_index(data: bytes, path: str) -> DcpIndex:
    top = decode_json(data, path, MAX_DCP_INDEX_DEPTH)
    if not isinstance(top, dict):
        raise SetError(f"index is a JSON {_kind(top)}, not an object", path=path)
    metadata = _parse_metadata(top.get("metadata", {}), path)
    if metadata.get(FORMAT_KEY) != FORMAT_VALUE:
        raise SetError(
            f'index metadata has no "{FORMAT_KEY}": "{FORMAT_VALUE}"; it is no weightstore '
            "torch.distributed.checkpoint index",
            path=path,
        )
    set_id = metadata.get(SET_ID_KEY, "")
    if not _SET_ID.fullmatch(set_id):
        shown = bounded_repr(set_id, limit=_SHOWN)
        raise SetError(f"set id {shown} is not 32 lowercase hex digits", path=path)
    tensors = _parse_tensors(_object(top, "tensors", path), path)
    values = {
        key: from_json(value, key, path) for key, value in _object(top, "values", path).items()
    }
    both = next((key for key in values if key in tensors), None)
    if both is not None:
        raise SetError("key is listed both as a tensor and as a value", path=path, tensor=both)
    paths = _parse_paths(top.get("paths"), path)
    planner_data = None
    if "planner_data" in top:
        planner_data = from_json(top["planner_data"], "planner_data", path)
    return DcpIndex(path, set_id, metadata, tensors, values, paths, planner_data)


def _object(top: Mapping[str, object], key: str, path: str) -> dict[str, Any]:
    value = top.get(key, {})
    if not isinstance(value, dict):
        raise SetError(f'"{key}" is a JSON {_kind(value)}, not an object', path=path)
    return value


def _parse_tensors(tensors: dict[str, Any], path: str) -> dict[str, DcpTensor]:
    """The tensors of the index, each entry of `tensors` (the decoded JSON, ours to change)
    dropped once parsed, so the JSON and the records it becomes are not both held whole."""
    parsed: dict[str, DcpTensor] = {}
    files: dict[str, tuple[str, set[str]]] = {}  # file -> (one copy of its name, chunk names)
    budget = CornerBudget()
    for fqn, entry in tensors.items():
        tensor = _parse_tensor(fqn, entry, files, path)
        tensors[fqn] = None  # the values change, not the keys: iterating goes on
        for chunk in tensor.chunks:
            names = files[chunk.file][1]
            if chunk.name in names:
                raise SetError(
                    f"two chunks are tensor {bounded_repr(chunk.name, limit=_SHOWN)} of one file",
                    path=path,
                    tensor=fqn,
                    shard=chunk.file,
                )
            names.add(chunk.name)
        _validate_tiling(fqn, tensor, budget, path)
        parsed[fqn] = tensor
    return parsed


def _parse_tensor(
    fqn: str, entry: object, files: dict[str, tuple[str, set[str]]], path: str
) -> DcpTensor:
    if not isinstance(entry, dict):
        raise SetError(
            f"tensor entry is a JSON {_kind(entry)}, not an object", path=path, tensor=fqn
        )
    dtype_name = entry.get("dtype")
    try:
        dtype = from_name(dtype_name) if isinstance(dtype_name, str) else None
    except DTypeError:
        dtype = None
    if dtype is None or dtype.numpy_spec is None:
        shown = bounded_repr(dtype_name, limit=_SHOWN)
        raise SetError(f"dtype {shown} is no dtype a chunk can be read as", path=path, tensor=fqn)
    shape = _ints(entry.get("shape"), "shape", fqn, path)
    # What NumPy can hold, even of an empty tensor (it counts every non-zero dim's bytes): a
    # tensor put together or sliced is a NumPy array, made before any chunk is read.
    validate_shape(shape, dtype, path, fqn)
    chunks = entry.get("chunks")
    if not isinstance(chunks, list):
        raise SetError('"chunks" is not a JSON array', path=path, tensor=fqn)
    parsed = [_parse_chunk(fqn, chunk, len(shape), files, path) for chunk in chunks]
    return DcpTensor(dtype, shape, parsed)


def _parse_chunk(
    fqn: str, chunk: object, ndim: int, files: dict[str, tuple[str, set[str]]], path: str
) -> DcpChunk:
    """One chunk, its file name checked the first time it is seen. Its strings are shared: the
    file's name with the file's other chunks, the name with the tensor's when they are equal
    (as DCP names them), which saves a 405B checkpoint's index 600 MB of copies."""
    if not isinstance(chunk, dict):
        raise SetError(f"a chunk is a JSON {_kind(chunk)}, not an object", path=path, tensor=fqn)
    file, name = chunk.get("file"), chunk.get("name")
    if not isinstance(file, str) or not isinstance(name, str):
        raise SetError('a chunk\'s "file" and "name" are not both strings', path=path, tensor=fqn)
    offsets = _ints(chunk.get("offsets"), "offsets", fqn, path)
    sizes = _ints(chunk.get("sizes"), "sizes", fqn, path)
    if len(offsets) != ndim or len(sizes) != ndim:
        raise SetError(
            f"a chunk has {len(offsets)} offsets and {len(sizes)} sizes for a tensor of "
            f"{ndim} dimensions",
            path=path,
            tensor=fqn,
            shard=file,
        )
    known = files.get(file)
    if known is None:
        validate_shard_name(file, path, fqn)
        files[file] = (file, set())
    else:
        file = known[0]
    return _new_chunk(file, fqn if name == fqn else name, offsets, sizes)


def _new_chunk(file: str, name: str, offsets: tuple[int, ...], sizes: tuple[int, ...]) -> DcpChunk:
    """`DcpChunk(file, name, offsets, sizes)` for values already of the fields' types, at a
    third of the cost (a 405B checkpoint's index has 3.5 million chunks): the constructor only
    converts sequences to tuples, and the class checks nothing (no ``__post_init__``)."""
    chunk = _NEW(DcpChunk)
    _SET_FILE(chunk, file)
    _SET_NAME(chunk, name)
    _SET_OFFSETS(chunk, offsets)
    _SET_SIZES(chunk, sizes)
    return chunk


_NEW: Final = object.__new__
_SET_FILE, _SET_NAME, _SET_OFFSETS, _SET_SIZES = DcpChunk._SETTERS


def _ints(value: object, what: str, fqn: str, path: str) -> tuple[int, ...]:
    """A JSON array of at most `MAX_DIMS` integers in ``[0, MAX_DIM_SIZE]``."""
    if type(value) is list and len(value) <= MAX_DIMS:
        for item in value:  # a loop, not all() over a generator: twice as fast, per chunk
            if type(item) is not int or item < 0 or item > MAX_DIM_SIZE:
                break
        else:
            return tuple(value)
    raise SetError(
        f'"{what}" is not an array of at most {MAX_DIMS} non-negative integers below 2**63',
        path=path,
        tensor=fqn,
    )


def _validate_tiling(fqn: str, tensor: DcpTensor, budget: CornerBudget, path: str) -> None:
    """Refuse chunks that leave the shape, overlap, or leave part of it uncovered, naming the
    first element (row-major) in no chunk or in several."""
    shape = tensor.shape
    for chunk in tensor.chunks:  # offsets, sizes and shape are of one length (`_parse_chunk`)
        if any(map(gt, map(add, chunk.offsets, chunk.sizes), shape)):
            raise SetError(
                f"chunk at {bounded_repr(list(chunk.offsets))} of shape "
                f"{bounded_repr(list(chunk.sizes))} reaches past the tensor's shape "
                f"{bounded_repr(list(shape))}",
                path=path,
                tensor=fqn,
                shard=chunk.file,
            )
    boxes = [(chunk.offsets, chunk.sizes) for chunk in tensor.chunks]
    found = first_miscovered(shape, boxes, budget, path=path, tensor=fqn)
    if found is not None:
        element, holders = found
        shown = bounded_repr(list(element))
        raise SetError(
            f"chunks leave a gap: element {shown} is in none of them"
            if holders == 0
            else f"chunks overlap: element {shown} is in {holders:,} of them",
            path=path,
            tensor=fqn,
        )


def _parse_paths(value: object, path: str) -> dict[str, tuple[str | int, ...]] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SetError(f'"paths" is a JSON {_kind(value)}, not an object', path=path)
    paths: dict[str, tuple[str | int, ...]] = {}
    for fqn, parts in value.items():
        if not isinstance(parts, list) or not all(type(p) in (str, int) for p in parts):
            raise SetError(
                "object path is not an array of strings and integers", path=path, tensor=fqn
            )
        paths[fqn] = tuple(parts)
    return paths


# -- writing --------------------------------------------------------------------------------------


def dcp_index_bytes(
    set_id: str,
    tensors: Mapping[str, DcpTensor],
    values: Mapping[str, object],
    *,
    paths: Mapping[str, Sequence[str | int]] | None,
    planner_data: object,
    metadata: Mapping[str, str],
    container: str,
    dcp_version: str | None,
) -> bytes:
    """The index of a save, as `parse_dcp_index` reads it.

    Raises:
        SetError: a value that is no plain value (`_dcp_values.to_json`), or one JSON cannot
            write (an int of over 4,300 digits).
    """
    header: dict[str, object] = {
        **{key: value for key, value in metadata.items() if key not in _RESERVED_KEYS},
        FORMAT_KEY: FORMAT_VALUE,
        CONTAINER_KEY: container,
        SET_ID_KEY: set_id,
        TOTAL_SIZE_KEY: sum(tensor.nbytes for tensor in tensors.values()),
    }
    if dcp_version is not None:
        header[DCP_VERSION_KEY] = dcp_version
    index: dict[str, object] = {
        "metadata": header,
        "tensors": {fqn: _tensor_json(tensor) for fqn, tensor in tensors.items()},
        "values": {fqn: to_json(value, fqn) for fqn, value in values.items()},
    }
    if paths is not None:
        index["paths"] = {fqn: list(parts) for fqn, parts in paths.items()}
    if planner_data is not None:
        index["planner_data"] = to_json(planner_data, "planner_data")
    try:
        return _layout_json(index).encode("utf-8")
    except ValueError as err:
        raise SetError(f"index cannot be written as JSON: {err}") from err


def _layout_json(index: Mapping[str, object]) -> str:
    """`index` as JSON with one line per entry of each section: a 1,000-tensor index reads
    (and diffs) as 1,000 lines, not 30,000."""
    sections = []
    for key, section in index.items():
        if isinstance(section, dict) and section:
            entries = ",\n".join(
                f"    {json.dumps(name)}: {json.dumps(value, allow_nan=False)}"
                for name, value in section.items()
            )
            sections.append(f"  {json.dumps(key)}: {{\n{entries}\n  }}")
        else:
            sections.append(f"  {json.dumps(key)}: {json.dumps(section, allow_nan=False)}")
    return "{\n" + ",\n".join(sections) + "\n}\n"


_RESERVED_KEYS: Final = frozenset(
    {FORMAT_KEY, CONTAINER_KEY, SET_ID_KEY, TOTAL_SIZE_KEY, DCP_VERSION_KEY}
)


def _tensor_json(tensor: DcpTensor) -> dict[str, object]:
    chunks = [
        {"file": c.file, "name": c.name, "offsets": list(c.offsets), "sizes": list(c.sizes)}
        for c in tensor.chunks
    ]
    return {"dtype": tensor.dtype.name, "shape": list(tensor.shape), "chunks": chunks}


# -- the files ------------------------------------------------------------------------------------


def locate_rank_files(index: DcpIndex) -> dict[str, str]:
    """The path of every rank file the index names, each checked as a set's shards are
    (`weightstore.sets._index.locate_shards`: present, a file, inside the directory) and
    large enough for the bytes of the chunks the index puts in it.

    Raises:
        SetError: a file missing, outside the directory, or smaller than its chunks.
    """
    first_chunk: dict[str, str] = {}
    claimed: dict[str, int] = {}
    for fqn, tensor in index.tensors.items():
        for chunk in tensor.chunks:
            first_chunk.setdefault(chunk.file, fqn)
            claimed[chunk.file] = claimed.get(chunk.file, 0) + tensor.dtype.nbytes(chunk.sizes)
    # Keyed by file, so two files whose first chunk is of one tensor both stay listed.
    as_set = SetIndex(
        index.path, {f"{fqn}@{file}": file for file, fqn in first_chunk.items()}, {}, None
    )
    located = locate_shards(as_set)
    for file, path in located.items():
        size = os.path.getsize(path)
        if size < claimed[file]:
            raise SetError(
                f"file is {bounded_int(size)} bytes, smaller than the "
                f"{bounded_int(claimed[file])} bytes of chunks the index puts in it",
                path=index.path,
                tensor=first_chunk[file],
                shard=file,
            )
    return located
