"""What `weightstore inspect` shows about a file, independent of how it is printed.

Each format of the registry (`weightstore.formats.FORMATS`) names its summarizer in its record
(`ContainerFormat.summarizer`: the ``summarize_<format>`` functions here); the CLI detects the
format through the registry and calls the one its record names. The summarizers live here,
not in their container folders, because a report is the command line's (`FileReport`, and the
objects scan of `weightstore.cli._objects`), above the container layer. GGUF's, with its
typed metadata and ggml types, has a module of its own (`weightstore.cli._report_gguf`).

A PyTorch checkpoint also holds objects (`ContainerFormat.holds_foreign_objects`): its
non-tensor entries are listed apart (as short text
and as JSON values), and the globals its pickle names that ``torch.load`` would import are
scanned for (`weightstore.cli._objects`).

A sharded set (a directory or an index file) is summarized shard by shard with the same
summarizers and reported as one: the index's metadata, the tensors the index lists (each with
its shard), and the set's own facts (`SetSummary`: its shards, the files its directory holds
that are not part of it, tensors the index and the shards disagree on).
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from weightstore.base._record import ValueRecord
from weightstore.cli._keys import tensor_keys
from weightstore.cli._objects import Scan, describe_value, to_json
from weightstore.cli._training import group_counts
from weightstore.dtypes import DType
from weightstore.errors import (
    DescriptorError,
    DTypeError,
    LimitExceeded,
    UnsupportedObjectError,
)
from weightstore.formats import format_named, read_probe
from weightstore.io import is_url
from weightstore.io._local import DIRECTORY, MISSING, REGULAR, kind_at
from weightstore.locate import Kind, Location, locate, open_located, reading_format

if TYPE_CHECKING:
    from weightstore.pytorch_reader import LazyTensor, PytorchReader
    from weightstore.sets import SetReader

__all__ = [
    "FileReport",
    "GroupRow",
    "PartRow",
    "SetSummary",
    "TensorRow",
    "stored_nbytes",
    "summarize",
    "summarize_burnpack",
    "summarize_pytorch",
    "summarize_safetensors",
]


class TensorRow(ValueRecord):
    """One tensor as `inspect` lists it; read from the header, no tensor data."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    nbytes: int
    # Burnpack, SafeTensors: the absolute byte offset in the file. PyTorch: the byte offset
    # inside the storage named by `storage` (a zip's ``data/<key>`` entry).
    offset: int | None = None
    storage: str | None = None
    # DCP: how many chunks (pieces in rank files) the whole tensor is put together from; such
    # a tensor has no one offset, so `inspect` shows this in the offset's place.
    chunks: int | None = None
    # GGUF: the ggml type it is stored in (``Q4_K``, ``F16``); `dtype` is then what it reads
    # as (F32 for a quantized type: its dequantized values), `nbytes` its blocks' bytes.
    ggml: str | None = None

    @property
    def numel(self) -> int:
        """Elements in the tensor."""
        return math.prod(self.shape)


class PartRow(ValueRecord):
    """One stored tensor of a group: its name, its role (``codes``, ``scale``...), dtype,
    shape and bytes."""

    name: str
    role: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


class GroupRow(ValueRecord):
    """One quantized tensor as `inspect` lists it (`weightstore.quantized.QuantizedGroup`),
    found by `weightstore.cli._report_quantized`."""

    name: str
    layout: str
    logical_shape: tuple[int, ...]
    block: tuple[int, ...]
    rule: str
    parts: tuple[PartRow, ...]

    @property
    def nbytes(self) -> int:
        """Bytes every part holds in the file."""
        return sum(part.nbytes for part in self.parts)


class SetSummary(ValueRecord):
    """What `inspect` shows about a sharded set beyond its tensors.

    Attributes:
        index: the index file, or None for a set that is one file.
        shards: (file name, size in bytes, tensors listed there) per shard, in shard order.
        ignored: (file name, why) for each file of the directory left out of the set.
        missing: tensors the index lists that their shard lacks, by shard file name.
        unlisted: tensors a shard holds that the index does not list, by shard file name.
        skipped: (entry name, what it is) for each entry of the directory that is no file
            (a FIFO, a symlink loop, a broken symlink), never opened.
        damaged: (shard file name, its error) for each shard that could not be read (a
            truncated file): its tensors are not listed, the others are.
    """

    index: str | None
    shards: list[tuple[str, int, int]]
    ignored: list[tuple[str, str]]
    missing: dict[str, list[str]]
    unlisted: dict[str, list[str]]
    skipped: list[tuple[str, str]]
    damaged: tuple[tuple[str, str], ...] = ()


@dataclass(slots=True)
class FileReport:
    """What `inspect` shows about one file, independent of how it is printed."""

    path: str
    format: str  # the registry's name of the format
    file_size: int
    version: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # values are JSON types
    # Metadata values as a person reads them, where the JSON value is not (a GGUF array's
    # type, count and first items); the others print from `metadata`.
    metadata_text: dict[str, str] = field(default_factory=dict)
    # Facts of the file's layout that are no metadata pair (GGUF: byte order, alignment).
    layout: dict[str, Any] = field(default_factory=dict)
    scalars: dict[str, Any] = field(default_factory=dict)
    tensors: list[TensorRow] = field(default_factory=list)
    # Non-tensor entries (PyTorch checkpoints carry configs, epochs, ...): name -> short text,
    # and the same entries as JSON values. The key "" is the whole file, when it is one object.
    others: dict[str, str] = field(default_factory=dict)
    other_values: dict[str, Any] = field(default_factory=dict)
    scan: Scan | None = None  # PyTorch: the globals its pickle names (code; a user's classes)
    # PyTorch, read whole: tensors under each top-level key, when several keys hold tensors
    tensor_keys: dict[str, int] = field(default_factory=dict)
    listed_from: int | None = None  # tensors before `--filter`, when one was applied
    set: SetSummary | None = None  # a sharded set's own facts
    # Quantized tensors stored as several (or as one no dtype describes), each listed once
    # with its parts (`weightstore.cli._report_quantized`); their parts stay in `tensors`.
    quantized: list[GroupRow] = field(default_factory=list)
    # A training checkpoint: tensors and bytes of the model, the optimizer and the rest
    # (`_training`), when it holds more than the model's.
    training_groups: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def total_nbytes(self) -> int:
        """Bytes the listed tensors hold, storage shared by several (PyTorch's tied weights,
        views) counted once, as an index's ``total_size`` counts it."""
        return stored_nbytes(self.tensors)

    @property
    def listed_nbytes(self) -> int:
        """Bytes of every listed tensor, each counted whole, shared storage or not."""
        return sum(row.nbytes for row in self.tensors)

    @property
    def total_numel(self) -> int:
        """Elements of every listed tensor."""
        return sum(row.numel for row in self.tensors)


def stored_nbytes(rows: list[TensorRow]) -> int:
    """Bytes `rows` hold: a row without a storage whole, and within each storage the union of
    the byte ranges its rows view (two names of one tied tensor count once)."""
    total = 0
    ranges: dict[str, list[tuple[int, int]]] = {}
    for row in rows:
        if row.storage is None or row.offset is None:
            total += row.nbytes
        else:
            ranges.setdefault(row.storage, []).append((row.offset, row.offset + row.nbytes))
    for spans in ranges.values():
        end = 0
        for start, stop in sorted(spans):
            total += max(0, stop - max(start, end))
            end = max(end, stop)
    return total


# Each summarizer imports its reader, so listing one format loads no other's (nor cbor2).
def summarize_burnpack(path: str, options: dict[str, Any]) -> FileReport:
    """A burnpack file's report: its tensors in data order, Burn's version, its scalars."""
    from weightstore.burnpack import BurnpackReader

    size = _file_size(path, options)
    with BurnpackReader.from_file(path, **_remote(path, options)) as pack:
        rows = [
            TensorRow(d.name, d.dtype, d.shape, d.nbytes, pack.data_start + d.data_offsets[0])
            for d in sorted(pack.descriptors.values(), key=lambda d: d.data_offsets)
        ]
        return FileReport(
            path=path,
            format="burnpack",
            file_size=size,
            version=str(pack.version),
            metadata=dict(pack.metadata()),
            scalars={key: to_json(scalar.value) for key, scalar in pack.scalars.items()},
            tensors=rows,
        )


def summarize_safetensors(path: str, options: dict[str, Any]) -> FileReport:
    """A SafeTensors file's report: its tensors in data order and its metadata pairs."""
    from weightstore.safetensors import SafetensorsReader

    size = _file_size(path, options)
    with SafetensorsReader.from_file(path, **_remote(path, options)) as st:
        rows = [
            TensorRow(d.name, d.dtype, d.shape, d.nbytes, st.data_start + d.data_offsets[0])
            for d in st.descriptors.values()  # already in data order
        ]
        return FileReport(
            path=path,
            format="safetensors",
            file_size=size,
            metadata=dict(st.metadata()),
            tensors=rows,
        )


def summarize_pytorch(path: str, options: dict[str, Any]) -> FileReport:
    """A PyTorch checkpoint's report: its tensors, its other entries as objects, its layout's
    facts, and the globals its pickle names that ``torch.load`` would import."""
    from weightstore.pytorch_reader import PytorchReader

    top_level_key = options.get("top_level_key")
    size = _file_size(path, options)
    remote = _remote(path, options)
    with PytorchReader(path, top_level_key=top_level_key, **remote) as reader:
        rows, broken = _pytorch_rows(reader)
        meta = reader.metadata()
        facts = ("format", "byte_order", "pickle_protocol", "format_version", "storage_alignment")
        others = reader.others()
        values = {name: to_json(reader.load_object(name)) for name in others}
        root = reader.load_object()
        if not isinstance(root, dict) and not rows and not broken:
            others[""], values[""] = describe_value(root), to_json(root)  # one bare object
        scan = reader.scan()  # the whole file's, whatever the key lists
        for found in scan.classes:  # a user's classes, each where first found, by import path
            if found.where not in others:
                others[found.where] = f"<inert {found.qualname} object>"
                values[found.where] = {"object": found.qualname}
        keys = tensor_keys(reader) if top_level_key is None else {}
        return FileReport(
            path=path,
            format="pytorch",
            file_size=size,
            metadata={key: meta[key] for key in facts if meta[key] is not None},
            tensors=rows,
            others={**others, **broken},
            other_values={**values, **broken},
            scan=scan,
            tensor_keys=keys,
        )


def _pytorch_rows(reader: PytorchReader) -> tuple[list[TensorRow], dict[str, str]]:
    """The readable tensors as rows, and the unreadable ones as name -> reason."""
    rows, broken = [], {}
    for name in reader:
        try:
            tensor = reader.tensor(name)
            storage, offset = _storage_place(tensor)
            rows.append(TensorRow(name, tensor.dtype, tensor.shape, tensor.nbytes, offset, storage))
        except (DTypeError, UnsupportedObjectError, DescriptorError, LimitExceeded) as err:
            broken[name] = f"unreadable tensor: {err.detail}"  # listed, not fatal
    return rows, broken


def _storage_place(tensor: LazyTensor) -> tuple[str | None, int | None]:
    """The storage key a tensor views and its first byte there (legacy views included)."""
    storage = tensor.storage
    if storage is None:  # a meta tensor, or values rebuilt from a NumPy array
        return None, None
    first = tensor.storage_offset + (storage.view[0] if storage.view is not None else 0)
    return storage.key, tensor.dtype.nbytes((first,))


Summarizer = Callable[[str, dict[str, Any]], FileReport]  # a record's `load_summarizer()`


def summarize(path: str | os.PathLike[str], **options: Any) -> FileReport:
    """Detect the format of `path` and describe its contents without reading tensor data; a
    directory or an index file is described as a sharded set."""
    filename = os.fspath(path)
    location = locate(filename, options.get("storage_options"))
    if location.kind in (Kind.DCP, Kind.TORCH_DCP):
        return _summarize_dcp(location)
    if location.kind is Kind.TRAINING:
        return _summarize_training(location)
    if location.kind is Kind.SET:
        return _summarize_set(filename, options)
    summarize_file: Summarizer = reading_format(location).load_summarizer()
    if location.kind is Kind.FILE and not is_url(filename) and os.path.isdir(filename):
        filename = location.path  # the one model a directory holds (a split GGUF's part 1)
    return summarize_file(filename, options)


def _summarize_dcp(location: Location) -> FileReport:
    """A `torch.distributed.checkpoint` directory (ours, torch's own, or torch's
    HuggingFaceStorageWriter shards): every tensor whole (put together from its chunks), its
    plain values as objects, and its rank files as the set's shards (a rank file's tensors
    are its chunks); files the index does not name are listed as ignored, and entries that
    are no file (a FIFO, a symlink loop) as skipped."""
    from weightstore.dcp._reader import DcpReader
    from weightstore.dcp._torch_reader import TorchDcpReader

    opened = open_located(location)
    assert isinstance(opened, DcpReader)
    if location.kind is Kind.DCP:
        format_name = "dcp"
    else:
        format_name = "torch-dcp" if location.index is not None else "torch-hf-shards"
    with opened as reader:
        index, tensors = reader.path, reader.index.tensors
        rows = [
            TensorRow(name, dtype, shape, dtype.nbytes(shape), chunks=len(tensors[name].chunks))
            for name, dtype, shape, _ in reader.tensor_infos()
        ]
        values = reader.values()
        metadata: dict[str, Any] = reader.metadata()
    chunks: dict[str, int] = {}
    for tensor in tensors.values():
        for chunk in tensor.chunks:
            chunks[chunk.file] = chunks.get(chunk.file, 0) + 1
    if isinstance(opened, TorchDcpReader):  # its values lie in the rank files too
        for item in opened.torch_index.values.values():
            chunks.setdefault(item.file, 0)
    directory = index if os.path.isdir(index) else os.path.dirname(index)
    shards = [
        (name, os.path.getsize(os.path.join(directory, name)), count)
        for name, count in sorted(chunks.items())
    ]
    others = sorted(set(os.listdir(directory)) - set(chunks) - {os.path.basename(index)})
    kinds = {name: kind_at(os.path.join(directory, name)) for name in others}
    files = [(n, "not named by the index") for n, k in kinds.items() if k in (REGULAR, DIRECTORY)]
    skipped = [(n, k) for n, k in kinds.items() if k not in (REGULAR, DIRECTORY, MISSING)]
    return FileReport(
        path=index,
        format=format_name,
        training_groups=group_counts((row.name, row.nbytes) for row in rows),
        file_size=sum(size for _, size, _ in shards),
        metadata=metadata,
        tensors=rows,
        others={key: describe_value(value) for key, value in values.items()},
        other_values={key: to_json(value) for key, value in values.items()},
        set=SetSummary(index, shards, files, {}, {}, skipped),
    )


def _summarize_training(location: Location) -> FileReport:
    """A DeepSpeed ZeRO, Orbax or NeMo checkpoint: its tensors as its reader gives them
    (reconstructed, consolidated), its values as objects, its metadata; the size is the
    bytes of the files below it."""
    from weightstore.training._open import training_layout

    path = location.path
    with open_located(location) as reader:
        rows = [
            TensorRow(name, dtype, shape, dtype.nbytes(shape))
            for name, dtype, shape, _ in reader.tensor_infos()
        ]
        values_of = getattr(reader, "values", None)
        values = values_of() if callable(values_of) else {}
        metadata: dict[str, Any] = dict(reader.metadata())
    if os.path.isdir(path):
        size = sum(
            os.path.getsize(os.path.join(folder, name))
            for folder, _, names in os.walk(path)
            for name in names
            if kind_at(os.path.join(folder, name)) == REGULAR
        )
    else:
        size = os.path.getsize(path)
    return FileReport(
        path=path,
        format=training_layout(path) or "training",
        file_size=size,
        metadata=metadata,
        tensors=rows,
        others={key: describe_value(value) for key, value in values.items()},
        other_values={key: to_json(value) for key, value in values.items()},
        training_groups=group_counts((row.name, row.nbytes) for row in rows),
    )


def _remote(path: str, options: dict[str, Any]) -> dict[str, Any]:
    """The reader option a URL needs (its filesystem's options); none for a local file."""
    return {"storage_options": options.get("storage_options")} if is_url(path) else {}


def _file_size(path: str, options: dict[str, Any]) -> int:
    """The file's size; for a URL, from the probe the reader opened next takes over (so it
    costs no request of its own)."""
    if is_url(path):
        return read_probe(path, options.get("storage_options"))[1]
    return os.path.getsize(path)


def _summarize_set(path: str, options: dict[str, Any]) -> FileReport:
    """One report over a set: each shard summarized by its format's summarizer, the rows of
    the tensors the index lists kept (with their shard as the row's storage)."""
    from weightstore.sets import SetWarning, open_set

    reader_options = {k: v for k, v in options.items() if v is not None}
    with warnings.catch_warnings():  # the report lists the files left out
        warnings.simplefilter("ignore", SetWarning)
        return _summarize_open_set(open_set(path, **reader_options), options)


def _summarize_open_set(reader: SetReader, options: dict[str, Any]) -> FileReport:
    with reader:
        # every shard's header, the set id and listings checked; a shard that does not open
        # is marked damaged and the others are still listed
        report = reader.report(keep_going=True)
        assigned: dict[str, set[str]] = {shard: set() for shard in report.shards}
        for name in reader.listed_names():
            assigned[reader.shard_of(name)].add(name)
        metadata: dict[str, Any] = reader.metadata()
    fmt = format_named(report.format_name)
    summarize_shard: Summarizer = fmt.load_summarizer()
    rows: list[TensorRow] = []
    shards: list[tuple[str, int, int]] = []
    others: dict[str, str] = {}
    values: dict[str, Any] = {}
    suspicious: dict[str, Any] = {}
    classes: dict[str, Any] = {}
    complete = True
    damaged = dict(report.damaged)
    for shard in report.shards:
        name = _shard_name(shard, report.path)
        part = None if shard in damaged else _summarized_shard(summarize_shard, shard, options)
        if not isinstance(part, FileReport):
            damaged[shard] = damaged.get(shard) or str(part)
            shards.append((name, _size_or_zero(shard, options), 0))
            continue
        kept = [row for row in part.tensors if row.name in assigned[shard]]
        rows += [row.replace(storage=_storage(name, row.storage)) for row in kept]
        shards.append((name, part.file_size, len(kept)))
        others.update({f"{name}:{key}": text for key, text in part.others.items()})
        values.update({f"{name}:{key}": value for key, value in part.other_values.items()})
        if part.scan is not None:
            complete = complete and part.scan.complete
            for found in part.scan.suspicious:
                suspicious.setdefault(found.qualname, found)
            for found in part.scan.classes:
                classes.setdefault(found.qualname, found)
    index = None if report.path in report.shards else report.path
    summary = SetSummary(
        index=index,
        shards=shards,
        ignored=[(os.path.basename(file), why) for file, why in report.ignored],
        missing={_shard_name(k, report.path): v for k, v in report.missing.items()},
        unlisted={_shard_name(k, report.path): v for k, v in report.unlisted.items()},
        skipped=[(os.path.basename(entry), kind) for entry, kind in report.skipped],
        damaged=tuple((_shard_name(k, report.path), v) for k, v in damaged.items()),
    )
    merged = Scan(tuple(suspicious.values()), complete, tuple(classes.values()))
    scan = merged if fmt.holds_foreign_objects else None
    return FileReport(
        path=report.path,
        format=report.format_name,
        file_size=sum(size for _, size, _ in shards),
        metadata=metadata,
        tensors=rows,
        others=others,
        other_values=values,
        scan=scan,
        set=summary,
    )


def _summarized_shard(
    summarize_shard: Summarizer, shard: str, options: dict[str, Any]
) -> FileReport | str:
    """The shard's report, or why it could not be read (a shard whose header opened but
    whose body does not summarize)."""
    from weightstore.errors import WeightstoreError

    try:
        return summarize_shard(shard, options)
    except WeightstoreError as err:
        return getattr(err, "detail", None) or str(err)


def _size_or_zero(shard: str, options: dict[str, Any]) -> int:
    """A damaged shard's size, or 0 when even that cannot be read."""
    from weightstore.errors import WeightstoreError

    try:
        return _file_size(shard, options)
    except (OSError, WeightstoreError):
        return 0


def _shard_name(shard: str, index: str) -> str:
    """A shard as the index names it: its path relative to the index's directory."""
    return os.path.relpath(shard, os.path.dirname(index) or ".")


def _storage(shard: str, storage: str | None) -> str:
    """A row's storage within a set: its shard, then (PyTorch) the archive entry inside it."""
    return shard if storage is None else f"{shard}/{storage}"
