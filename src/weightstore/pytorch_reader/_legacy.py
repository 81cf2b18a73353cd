"""The legacy (torch 0.1.10 to 1.5) and tar (torch < 0.1.10) layouts; see `_layout` for both.

They share torch's storage blob: a u64 element count, then the elements, little-endian. A legacy
file learns each storage's class and size from the main pickle, then finds the blobs back to back
in the order of the key list; a tar file walks its ``storages`` entry, where each blob is
announced by a small pickle. Either way the blobs are located at open (reading only their counts
in the tar case) and read, as views of the mapped file, when a tensor asks.

Tar checkpoints that torch itself wrote refer to tensors by string id through the ``tensors``
entry, whose records carry shape, stride and offset in raw binary. Burn's hand-made tar fixtures
instead inline ``("storage", class, key, location, numel)`` tuples as rebuild arguments; both
resolve here.
"""

from __future__ import annotations

import struct
import tarfile

from weightstore.base._render import bounded_repr
from weightstore.dtypes import TORCH_STORAGE_CLASSES
from weightstore.errors import (
    ArchiveError,
    DescriptorError,
    LimitExceeded,
    MetadataError,
    MissingStorageError,
    TruncatedError,
    UnsupportedFormatError,
    UnsupportedVersionError,
)
from weightstore.io._source import ByteSource, MmapSource
from weightstore.pytorch_reader._layout import (
    COUNT,
    COUNT_BE,
    MAX_NDIM,
    PROTOCOL_VERSION,
    TAR_ENTRIES,
    TAR_TENSOR_NDIM,
    Limits,
)
from weightstore.pytorch_reader._loaded import ArchiveInfo, Loaded
from weightstore.pytorch_reader._machine import run_pickle
from weightstore.pytorch_reader._objects import Malformed, StorageClass, shown_int, take
from weightstore.pytorch_reader._rebuild import storage_class_of, storage_from_pid
from weightstore.pytorch_reader._tensors import (
    LazyTensor,
    StorageRef,
    StorageSource,
    UnreadableTensor,
)

__all__ = ["CountedStorages", "load_legacy", "load_tar"]

_TAR_ERRORS = (tarfile.TarError, OSError, EOFError, ValueError, UnicodeError, struct.error)
_MAX_COUNT = 2**63 - 1  # torch's counts and keys are int64


class CountedStorages(StorageSource):
    """Count-prefixed storage blobs at known offsets of the file, read from `source`: the
    mapped file itself, or a pread source whose reads are copies nothing keeps."""

    def __init__(self, source: ByteSource, big_endian_counts: bool) -> None:
        self._source = source
        self._big_endian_counts = big_endian_counts
        self._places: dict[str, tuple[int, int, int]] = {}  # key -> (count offset, numel, size)

    @property
    def path(self) -> str | None:
        return self._source.name

    @property
    def byte_order(self) -> str:
        return "little"  # torch converts storage bytes to little-endian on every machine

    def add(self, key: str, offset: int, numel: int, itemsize: int) -> None:
        """Record that storage `key`'s blob (its count, then its bytes) starts at `offset`; the
        first record of a key wins."""
        self._places.setdefault(key, (offset, numel, itemsize))

    def has_storage(self, key: str) -> bool:
        return key in self._places

    def storage_bytes(self, key: str, nbytes: int, tensor: str | None) -> memoryview:
        place = self._places.get(key)
        if place is None:
            raise MissingStorageError(key, path=self.path, tensor=tensor)
        offset, numel, itemsize = place
        if numel * itemsize != nbytes:
            raise DescriptorError(
                f"storage {bounded_repr(key)} holds {shown_int(numel * itemsize)} bytes, "
                f"the pickle claims {shown_int(nbytes)}",
                path=self.path,
                tensor=tensor,
            )
        counts = self.counts_at(offset, tensor)
        if numel not in counts[: 1 + self._big_endian_counts]:
            raise DescriptorError(
                f"storage {bounded_repr(key)} starts with an element count of {counts[0]:,}"
                f", the pickle claims {shown_int(numel)}",
                path=self.path,
                tensor=tensor,
            )
        what = f"storage {bounded_repr(key)}"
        return self._source.read(offset + COUNT.size, nbytes, what, tensor)

    def release(self, key: str) -> None:
        """Nothing: legacy and tar files are small and old; only zip storages are released."""

    def counts_at(self, offset: int, tensor: str | None = None) -> tuple[int, int]:
        """The u64 count at `offset`, read little-endian and big-endian."""
        raw = bytes(self._source.read(offset, COUNT.size, "storage element count", tensor))
        return COUNT.unpack(raw)[0], COUNT_BE.unpack(raw)[0]

    def count_fitting(self, offset: int, room: int, itemsize: int) -> int:
        """The count at `offset` in whichever order makes its blob fit in `room` bytes; older
        torch wrote counts in native order, so a big-endian writer's may be big-endian."""
        little, big = self.counts_at(offset)
        if self._big_endian_counts and not 0 <= little * itemsize <= room:
            return big
        return little


def _plain_dict(value: object) -> dict[str, object] | None:
    if not isinstance(value, dict):
        return None
    return {key: item for key, item in value.items() if isinstance(key, str)}


def _is_big_endian(sys_info: object) -> bool:
    return isinstance(sys_info, dict) and sys_info.get("little_endian") is False


def _record_key(value: object, what: str, path: str) -> str:
    """A storage or tensor key of a legacy or tar record: a string, or an int printed (torch
    wrote ints); anything else is refused by its type, never printed."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("ascii", "replace")
    if type(value) is int and -_MAX_COUNT <= value <= _MAX_COUNT:
        return str(value)
    raise MetadataError(f"a {what} is a {_type_of(value)}, not a string or an int64", path=path)


def _type_of(value: object) -> str:
    return f"int of {value.bit_length():,} bits" if type(value) is int else type(value).__name__


def _kind(pid: object) -> str | None:
    head = pid[0] if isinstance(pid, tuple) and pid else None
    if isinstance(head, bytes):
        return head.decode("ascii", "replace")
    return head if isinstance(head, str) else None


# -- legacy -------------------------------------------------------------------------------------


def load_legacy(source: MmapSource, pos: int, limits: Limits, storage_source: ByteSource) -> Loaded:
    """Everything after the magic-number pickle that ends at `pos`; storages are read from
    `storage_source` (see `CountedStorages`)."""
    data, path = source.mapping, source.name
    version, pos, _ = run_pickle(data, pos, path=path, limits=limits)
    if type(version) is not int or not 0 <= version <= _MAX_COUNT:
        raise MetadataError(f"legacy protocol version is a {_type_of(version)}", path=path)
    if version != PROTOCOL_VERSION:
        raise UnsupportedVersionError(version, PROTOCOL_VERSION, path=path)
    sys_info, pos, _ = run_pickle(data, pos, path=path, limits=limits)
    storages = CountedStorages(storage_source, _is_big_endian(sys_info))
    registry = _LegacyRegistry(storages)
    root, pos, protocol = run_pickle(
        data, pos, path=path, limits=limits, persistent_load=registry.persistent_load
    )
    keys, pos, _ = run_pickle(data, pos, path=path, limits=limits)
    registry.locate(keys, pos, limits)
    info = ArchiveInfo(
        "legacy", "little", protocol, str(PROTOCOL_VERSION), sys_info=_plain_dict(sys_info)
    )
    return Loaded(root, info)


class _LegacyRegistry:
    """Collects the root storages the main pickle names, then places them after the key list."""

    def __init__(self, storages: CountedStorages) -> None:
        self._storages = storages
        self._roots: dict[str, StorageRef] = {}

    def persistent_load(self, pid: object) -> object:
        kind = _kind(pid)
        if kind == "module":  # ("module", cls, source_file, source): a whole-module save
            return take(pid, "module persistent id", 4)[1]
        if kind == "storage":
            ref = storage_from_pid(pid, self._storages)
            self._roots.setdefault(ref.key, ref)  # torch keeps the first claim, as do we
            return ref
        raise Malformed(
            f"a legacy persistent id must be a storage or module tuple, not {bounded_repr(pid)}"
        )

    def locate(self, keys: object, pos: int, limits: Limits) -> None:
        path = self._storages.path
        if not isinstance(keys, list) or not all(type(k) in (str, int) for k in keys):
            raise MetadataError("the legacy storage key list is not a list of keys", path=path)
        if len(keys) > limits.max_storage_count:
            raise LimitExceeded("storage count", len(keys), limits.max_storage_count, path=path)
        for key in map(str, keys):
            ref = self._roots.get(key)
            if ref is None:
                raise MetadataError(
                    f"storage {bounded_repr(key)} is listed but the pickle never names it",
                    path=path,
                )
            itemsize = ref.storage_class.itemsize
            if itemsize is None:
                raise UnsupportedFormatError(
                    f"storage class {ref.storage_class.name} is unknown, "
                    "so the storages after it cannot be found",
                    path=path,
                )
            self._storages.add(key, pos, ref.numel, itemsize)
            pos += COUNT.size + ref.numel * itemsize


# -- tar ----------------------------------------------------------------------------------------


def load_tar(source: MmapSource, limits: Limits, storage_source: ByteSource) -> Loaded:
    """Open the tar layout: its entries located, storages and tensors indexed, none read
    (they are read from `storage_source`)."""
    members = _tar_members(source)
    for required in ("pickle", "storages"):
        if required not in members:
            raise UnsupportedFormatError(
                f"a tar archive without a {required!r} entry, not a PyTorch checkpoint",
                path=source.name,
            )
    sys_info = None
    if "sys_info" in members:
        start, size = members["sys_info"]
        sys_info, _, _ = run_pickle(
            source.mapping, start, start + size, path=source.name, limits=limits
        )
    index = _TarIndex(CountedStorages(storage_source, _is_big_endian(sys_info)), source, limits)
    index.read_storages(*members["storages"])
    if "tensors" in members:
        index.read_tensors(*members["tensors"])
    start, size = members["pickle"]
    if size > limits.max_pickle_size:
        raise LimitExceeded(
            "size of the tar 'pickle' entry", size, limits.max_pickle_size, path=source.name
        )
    root, _, protocol = run_pickle(
        source.mapping,
        start,
        start + size,
        path=source.name,
        limits=limits,
        persistent_load=index.persistent_load,
    )
    return Loaded(root, ArchiveInfo("tar", "little", protocol, sys_info=_plain_dict(sys_info)))


def _tar_members(source: MmapSource) -> dict[str, tuple[int, int]]:
    """Offset and size of each entry torch wrote; tarfile reads only the headers."""
    found: dict[str, tuple[int, int]] = {}
    try:
        with tarfile.open(source.name, mode="r:") as archive:
            for member in archive:
                name = member.name.removeprefix("./")
                if name not in TAR_ENTRIES or name in found:
                    continue
                if not member.isreg():
                    raise ArchiveError("is not a plain file", entry=name, path=source.name)
                found[name] = (member.offset_data, member.size)
    except _TAR_ERRORS as err:
        raise ArchiveError(f"damaged tar archive: {err}", path=source.name) from err
    for name, (offset, size) in found.items():
        source.read(offset, size, f"tar entry {name!r}", None)  # inside the file?
    return found


class _TarIndex:
    """The storages, storage views and tensors a tar checkpoint's entries announce."""

    def __init__(self, storages: CountedStorages, source: MmapSource, limits: Limits) -> None:
        self.storages, self._source, self._limits = storages, source, limits
        self._classes: dict[str, tuple[StorageClass, int]] = {}  # key -> (class, numel)
        self._views: dict[str, StorageRef] = {}
        self._tensors: dict[str, LazyTensor | UnreadableTensor] = {}

    def _pickle(self, pos: int, end: int) -> tuple[object, int]:
        value, pos, _ = run_pickle(
            self._source.mapping, pos, end, path=self._source.name, limits=self._limits
        )
        return value, pos

    def _count(self, pos: int, end: int, what: str) -> tuple[int, int]:
        count, pos = self._pickle(pos, end)
        if type(count) is not int or not 0 <= count <= _MAX_COUNT:
            shown = bounded_repr(count)
            raise MetadataError(f"the tar {what} count is {shown}", path=self._source.name)
        if count > self._limits.max_storage_count:
            raise LimitExceeded(
                f"{what} count", count, self._limits.max_storage_count, path=self._source.name
            )
        return count, pos

    def read_storages(self, start: int, size: int) -> None:
        end = start + size
        count, pos = self._count(start, end, "storage")
        for _ in range(count):
            header, pos = self._pickle(pos, end)
            raw_key, _location, cls = _fields(header, "tar storage header", self._source.name)
            key = _record_key(raw_key, "tar storage key", self._source.name)
            storage_class = _storage_class(cls, self._source.name)
            itemsize = storage_class.itemsize
            if itemsize is None:
                raise UnsupportedFormatError(
                    f"storage class {storage_class.name} is unknown, "
                    "so the storages after it cannot be found",
                    path=self._source.name,
                )
            numel = self.storages.count_fitting(pos, end - pos - COUNT.size, itemsize)
            if numel < 0 or pos + COUNT.size + numel * itemsize > end:
                raise TruncatedError(
                    f"storage {bounded_repr(key)} of the tar 'storages' entry",
                    numel * itemsize,
                    max(0, end - pos - COUNT.size),
                    path=self._source.name,
                )
            self.storages.add(key, pos, numel, itemsize)
            self._classes.setdefault(key, (storage_class, numel))
            pos += COUNT.size + numel * itemsize
        if pos < end:  # torch writes the storage views after the blobs
            views, pos = self._pickle(pos, end)
            self._read_views(views)

    def _read_views(self, views: object) -> None:
        if not isinstance(views, list):
            raise MetadataError("the tar storage views are not a list", path=self._source.name)
        path = self._source.name
        for item in views:
            target, root, offset, numel = _fields(item, "tar storage view", path, 4)
            view_key = _record_key(target, "tar storage view key", path)
            root_key = _record_key(root, "tar storage key", path)
            known = self._classes.get(root_key)
            if known is None or type(offset) is not int or type(numel) is not int:
                shown = bounded_repr(view_key)
                raise MetadataError(f"storage view {shown} names no storage", path=path)
            self._views[view_key] = StorageRef(
                root_key, known[0], known[1], source=self.storages, view=(offset, numel)
            )

    def storage_ref(self, key: str) -> StorageRef | None:
        if key in self._views:
            return self._views[key]
        if key in self._classes:
            storage_class, numel = self._classes[key]
            return StorageRef(key, storage_class, numel, source=self.storages)
        return None

    def read_tensors(self, start: int, size: int) -> None:
        end = start + size
        count, pos = self._count(start, end, "tensor")
        path = self._source.name
        for _ in range(count):
            header, pos = self._pickle(pos, end)
            raw_key, storage_key, type_name = _fields(header, "tar tensor header", path)
            key = _record_key(raw_key, "tar tensor key", path)
            shape, stride, offset, pos = self._read_geometry(pos, end, key)
            self._tensors[key] = self._tensor(
                _record_key(storage_key, "tar storage key", path), type_name, shape, stride, offset
            )

    def _read_geometry(
        self, pos: int, end: int, key: str
    ) -> tuple[tuple[int, ...], tuple[int, ...], int, int]:
        what = f"tar tensor {bounded_repr(key)}"
        (ndim,) = TAR_TENSOR_NDIM.unpack(self._window(pos, end, TAR_TENSOR_NDIM.size, what))
        if not 0 <= ndim <= MAX_NDIM:
            raise LimitExceeded(f"{what} dimensions", ndim, MAX_NDIM, path=self._source.name)
        pos += TAR_TENSOR_NDIM.size
        layout = struct.Struct(f"<{2 * ndim + 1}q")
        values = layout.unpack(self._window(pos, end, layout.size, what))
        return values[:ndim], values[ndim : 2 * ndim], values[-1], pos + layout.size

    def _window(self, pos: int, end: int, size: int, what: str) -> bytes:
        if pos + size > end:
            raise TruncatedError(what, size, max(0, end - pos), path=self._source.name)
        return bytes(self._source.read(pos, size, what, None))

    def _tensor(
        self,
        storage_key: str,
        type_name: object,
        shape: tuple[int, ...],
        stride: tuple[int, ...],
        offset: int,
    ) -> LazyTensor | UnreadableTensor:
        ref = self.storage_ref(storage_key)
        if ref is None:  # resolved at access, as a missing storage naming the tensor
            type_text = type_name if isinstance(type_name, str) else ""
            name = type_text.rpartition(".")[2].replace("Tensor", "Storage")
            ref = StorageRef(
                storage_key,
                StorageClass(name, TORCH_STORAGE_CLASSES.get(name)),
                0,
                source=self.storages,
            )
        dtype = ref.storage_class.torch_dtype
        if dtype is None:
            reason = f"tensor type {bounded_repr(type_name)} is unknown"
            return UnreadableTensor("tar tensors entry", reason, dtype_problem=True)
        return LazyTensor(
            shape,
            stride,
            offset,
            dtype,
            ref,
            path=self._source.name,
            max_expanded_size=self._limits.max_expanded_size,
        )

    def persistent_load(self, pid: object) -> object:
        if isinstance(pid, tuple):
            if _kind(pid) == "storage":  # Burn's inline form
                inline = storage_from_pid(pid, self.storages)
                return self.storage_ref(inline.key) or inline
            if pid:  # (module class, source_file, source): torch returns the class
                return pid[0]
        if not isinstance(pid, str | bytes | int) or isinstance(pid, bool):
            raise Malformed(f"a persistent id is a {type(pid).__name__}, not a key")
        try:
            key = _record_key(pid, "persistent id", self._source.name)
        except MetadataError as err:
            raise Malformed(err.detail) from None
        if key in self._tensors:
            return self._tensors[key]
        ref = self.storage_ref(key)
        if ref is None:
            raise Malformed(
                f"persistent id {bounded_repr(key)} names no tensor or storage in the file"
            )
        return ref


def _storage_class(value: object, path: str) -> StorageClass:
    try:
        return storage_class_of(value)
    except Malformed as err:
        raise MetadataError(str(err), path=path) from None


def _fields(value: object, what: str, path: str, count: int = 3) -> tuple[object, ...]:
    if not isinstance(value, tuple | list) or len(value) != count:
        raise MetadataError(f"a {what} is not a {count}-tuple", path=path)
    return tuple(value)
