"""The zip layout (torch >= 1.6; see `_layout`): records under one ``<archive>/`` folder.

`load_zip` refuses torch.package archives, reads the small records and ``data.pkl`` (each
checked against its limit before a byte is inflated, inflated in bounded chunks by `_inflate`,
CRCs checked), and hands the machine a persistent-id resolver over `ZipStorages`: stored
``data/<key>`` entries are views of the mapped file at the payload offset their local header
gives; compressed ones are inflated once. A TorchScript archive's module graph becomes its state
dict in `_torchscript`, its code streamed line by line as text and never run.
"""

from __future__ import annotations

import lzma
import struct
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from weightstore.base._lazy import import_on_first_use
from weightstore.base._render import bounded_repr
from weightstore.errors import (
    ArchiveError,
    DescriptorError,
    LimitExceeded,
    MissingStorageError,
    TruncatedError,
    UnsupportedFormatError,
)
from weightstore.io._source import ByteSource, MmapSource, SourceFile, read_runs
from weightstore.pytorch_reader._extent import cut_archive
from weightstore.pytorch_reader._inflate import iter_member, payload_offset, read_member
from weightstore.pytorch_reader._layout import (
    ALIGNMENT_RECORD,
    BYTEORDER_RECORD,
    DATA_PKL,
    FORMAT_VERSION_RECORD,
    MAX_RECORD_SIZE,
    SERIALIZATION_ID_RECORD,
    STORAGE_FOLDER,
    TORCH_PACKAGE_MARKER,
    TORCHSCRIPT_MARKERS,
    VERSION_RECORD,
    ZIP_LOCAL_HEADER,
    ZIP_LOCAL_HEADER_SIZE,
    ZIP_MAGIC,
    Limits,
)
from weightstore.pytorch_reader._loaded import ArchiveInfo, Layout, Loaded
from weightstore.pytorch_reader._machine import run_pickle
from weightstore.pytorch_reader._objects import clip, shown_int
from weightstore.pytorch_reader._rebuild import storage_from_pid
from weightstore.pytorch_reader._tensors import StorageSource

if TYPE_CHECKING:
    import numpy as np

    from weightstore.pytorch_reader import _torchscript
else:  # its code-reading regexes are needed only for TorchScript archives
    _torchscript = import_on_first_use(
        "weightstore.pytorch_reader._torchscript", globals(), "_torchscript"
    )
    np = import_on_first_use("numpy", globals(), "np")

__all__ = [
    "ZipStorages",
    "is_torchscript",
    "load_zip",
]

_INFLATE_CHUNK = 2**24  # bytes inflated per read
# A URL's archive is read by zipfile in chunks of this size: its directory and small records
# sit together at the end, so they cost one request or two.
_ARCHIVE_CHUNK_SIZE = 64 * 1024
_EXTRA_ROOM = 128  # bytes allowed for a local header's extra field (torch's padding is < 64)
_PAYLOAD_ALIGNMENT = 64  # torch aligns every stored payload to 64 bytes in the file
_TEXT_CHUNK = 2**16  # bytes of a code/ file inflated at a time
# Everything zipfile raises for a damaged archive; it is stdlib code we call, not our own. The
# decompressors add theirs: zlib.error, bz2's OSError, and lzma.LZMAError, which is none of
# these (a damaged LZMA member's header raises it when zipfile opens the member).
_ZIP_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    NotImplementedError,
    RuntimeError,
    ValueError,
    OSError,
    EOFError,
    zlib.error,
    lzma.LZMAError,
    struct.error,
    KeyError,
    OverflowError,
    UnicodeDecodeError,
)


def load_zip(
    source: ByteSource,
    limits: Limits,
    storage_source: ByteSource,
    *,
    chunk_size: int = _ARCHIVE_CHUNK_SIZE,
) -> Loaded:
    """Open the zip layout: records and ``data.pkl`` read, storages located, none read (they
    are read from `storage_source`, see `ZipStorages`). A mapped file is opened by zipfile
    by its path; any other source (a URL's) through a `SourceFile`, whose chunks of
    `chunk_size` make the directory at the end and the small records beside it one read
    each (an archive inside a local file takes small chunks: a read costs no request)."""
    records_source: ByteSource = source
    try:
        if isinstance(source, MmapSource):
            archive = zipfile.ZipFile(source.name)
        else:
            chunked = SourceFile(source, chunk_size)
            archive = zipfile.ZipFile(chunked)
            records_source = _ChunkedSource(source, chunked)
    except _ZIP_ERRORS as err:
        # A local zip with no end record is most often a partial download: say where it is cut.
        cut = (
            cut_archive(source, limits.max_storage_count)
            if isinstance(source, MmapSource)
            else None
        )
        if cut is not None:
            raise cut from err
        raise ArchiveError(f"damaged zip archive: {clip(str(err))}", path=source.name) from err
    try:
        return _read_zip(source, records_source, archive, limits, storage_source)
    except BaseException:
        archive.close()
        raise


def _read_zip(
    source: ByteSource,
    records_source: ByteSource,
    archive: zipfile.ZipFile,
    limits: Limits,
    storage_source: ByteSource,
) -> Loaded:
    path = str(source.name)  # a file's path or a URL: sources of archives always have one
    names = {info.filename: info for info in archive.infolist()}
    prefix = _zip_prefix(list(names), path)
    records = _ZipRecords(records_source, names, prefix, path)
    byte_order = records.text(BYTEORDER_RECORD) or "little"
    if byte_order not in ("little", "big"):
        raise ArchiveError(
            f"is {bounded_repr(byte_order)}, expected 'little' or 'big'",
            entry=prefix + BYTEORDER_RECORD,
            path=path,
        )
    storages = ZipStorages(source, archive, names, prefix, byte_order, limits, storage_source)
    pickle = records.read(DATA_PKL, limits.max_pickle_size)
    root, _, protocol = run_pickle(
        pickle,
        path=path,
        limits=limits,
        persistent_load=lambda pid: storage_from_pid(pid, storages),
    )
    layout: Layout = "zip"
    if is_torchscript(names, prefix):  # torch.jit.save: the module graph's state dict
        layout = "torchscript"
        code = _CodeBudget(records, limits.max_code_size)
        root = _torchscript.module_state(root, code.chunks, prefix, limits, path)
    alignment = records.text(ALIGNMENT_RECORD)
    info = ArchiveInfo(
        layout,
        byte_order,
        protocol,
        records.text(FORMAT_VERSION_RECORD),
        records.text(VERSION_RECORD),
        int(alignment) if alignment and alignment.isdigit() and len(alignment) < 10 else None,
        records.text(SERIALIZATION_ID_RECORD),
    )
    return Loaded(root, info, [archive.close, storages.close])


def is_torchscript(names: Iterable[str], prefix: str = "") -> bool:
    """Whether entries `names` (those under `prefix`, relative to it) hold a TorchScript
    archive's ``constants.pkl`` or ``code/`` folder; only then is `_torchscript` imported."""
    constants, code = TORCHSCRIPT_MARKERS
    for name in names:
        if name.startswith(prefix):
            relative = name[len(prefix) :]
            if relative == constants or relative.startswith(code):
                return True
    return False


def _zip_prefix(names: list[str], path: str) -> str:
    """The folder every record sits in (``"<archive>/"``), after refusing archives that are
    not `torch.save` checkpoints. Like torch, the first entry's folder decides."""
    relative = {name.partition("/")[2] if "/" in name else name for name in names}
    if is_torchscript(relative) and DATA_PKL not in relative:  # read in `_torchscript`
        raise UnsupportedFormatError(
            "a TorchScript archive without data.pkl (the model.json layout of torch 1.0 to "
            "1.2), which this reader does not read; save torch.jit.load(f).state_dict() with "
            "torch.save instead",
            path=path,
        )
    if TORCH_PACKAGE_MARKER in relative:
        raise UnsupportedFormatError(
            "a torch.package archive, which holds code; refused", path=path
        )
    first = names[0] if names else ""
    prefix = first.partition("/")[0] + "/" if "/" in first else ""
    if prefix + DATA_PKL not in names:
        shown = ", ".join(repr(name) for name in names[:5])
        raise UnsupportedFormatError(
            f"a zip archive without {prefix}{DATA_PKL} (it holds "
            f"{shown}), not a PyTorch checkpoint",
            path=path,
        )
    return prefix


class _ZipRecords:
    """The archive's records: each checked against its limit by its declared size before a
    byte is inflated, then inflated in bounded chunks (`_inflate`), its CRC checked."""

    def __init__(
        self, source: ByteSource, names: dict[str, zipfile.ZipInfo], prefix: str, path: str
    ) -> None:
        self._source, self._names, self._prefix, self.path = source, names, prefix, path

    def info(self, name: str) -> zipfile.ZipInfo | None:
        """The entry `name` (relative to the archive's folder), ``None`` when absent."""
        return self._names.get(self._prefix + name)

    def read(self, name: str, limit: int) -> bytes:
        """Entry `name`, refused before it is inflated when it declares over `limit` bytes.
        `bytes`, as the pickle machine slices keys and strings out of it."""
        info = self._names[self._prefix + name]
        if info.file_size > limit:
            raise LimitExceeded(f"size of {info.filename}", info.file_size, limit, path=self.path)
        return b"".join(iter_member(self._source, info, self.path, _INFLATE_CHUNK))

    def chunks(self, info: zipfile.ZipInfo) -> Iterator[bytes]:
        """Entry `info`'s bytes a piece at a time (`_TEXT_CHUNK` bytes at most each), no more
        than it declares; the caller has checked that size."""
        return iter_member(self._source, info, self.path, _TEXT_CHUNK)

    def text(self, name: str) -> str | None:
        if self._prefix + name not in self._names:
            return None
        data = self.read(name, MAX_RECORD_SIZE)
        return data.decode("ascii", "replace").strip()


class _CodeBudget:
    """A TorchScript archive's code/ files as streams of bytes, all files read together held to
    ``max_code_size`` bytes: each file's declared size is charged before it is inflated, and
    `iter_member` refuses a file that inflates past what it declares."""

    def __init__(self, records: _ZipRecords, limit: int) -> None:
        self._records, self._limit, self._used = records, limit, 0

    def chunks(self, name: str) -> Iterator[bytes] | None:
        """The bytes of code file `name` (relative to the archive's folder) a piece at a
        time; ``None`` when the file is absent."""
        info = self._records.info(name)
        if info is None:
            return None
        found = self._used + info.file_size
        if found > self._limit:
            raise LimitExceeded(
                f"size of TorchScript code, all code/ files read up to {info.filename}",
                found,
                self._limit,
                path=self._records.path,
            )
        self._used = found
        return self._records.chunks(info)


class _ChunkedSource:
    """A `ByteSource` over the `SourceFile` zipfile reads a remote archive through, so that
    the small records beside the directory come from the blocks it already holds."""

    def __init__(self, source: ByteSource, chunked: SourceFile) -> None:
        self._source, self._chunked = source, chunked

    @property
    def name(self) -> str | None:
        return self._source.name

    @property
    def size(self) -> int:
        return self._source.size

    def read(self, offset: int, size: int, what: str, tensor: str | None = None) -> memoryview:
        if offset < 0 or size < 0 or offset + size > self.size:
            found = max(0, self.size - max(offset, 0))
            raise TruncatedError(what, size, found, path=self.name, tensor=tensor)
        self._chunked.seek(offset)
        data = self._chunked.read(size) or b""
        if len(data) != size:
            raise TruncatedError(what, size, len(data), path=self.name, tensor=tensor)
        return memoryview(data)

    def close(self) -> None:
        """Nothing to release: the source is closed by its owner."""


class ZipStorages(StorageSource):
    """The ``<archive>/data/<key>`` entries. Stored entries are read from `storage_source` at
    the payload offset the entry's local header gives; compressed ones are inflated.

    When `storage_source` is the mapped file, a stored entry is a view of it and both kinds
    are cached, so tensors sharing a storage read it once, until `close` drops the cache.
    Otherwise (a pread source, a URL's) every read is a fresh copy and nothing is cached: a
    pass over the tensors then holds one storage at a time, whatever the file's size. At a
    URL a stored entry's local header and bytes come in one request (`_read_remote`).
    """

    def __init__(
        self,
        source: ByteSource,
        archive: zipfile.ZipFile,
        names: dict[str, zipfile.ZipInfo],
        prefix: str,
        byte_order: str,
        limits: Limits,
        storage_source: ByteSource,
    ) -> None:
        folder = prefix + STORAGE_FOLDER
        self._entries = {n[len(folder) :]: i for n, i in names.items() if n.startswith(folder)}
        self._source, self._archive, self._limits = source, archive, limits
        self._byte_order = byte_order
        self._storage_source = storage_source
        self._caching = storage_source is source and isinstance(source, MmapSource)
        self._cache: dict[str, memoryview] = {}
        self._closed = False

    @property
    def path(self) -> str | None:
        return self._source.name

    @property
    def byte_order(self) -> str:
        return self._byte_order

    def has_storage(self, key: str) -> bool:
        return key in self._entries

    def storage_bytes(self, key: str, nbytes: int, tensor: str | None) -> memoryview:
        info = self._entry(key, tensor)
        if info.file_size != nbytes:
            raise DescriptorError(
                f"storage {bounded_repr(key)} holds {info.file_size:,} bytes, "
                f"the pickle claims {shown_int(nbytes)}",
                path=self.path,
                tensor=tensor,
            )
        data = self._cache.get(key)
        if data is None:
            data = self._read(info, tensor)
            if self._caching:
                self._cache[key] = data
        return data

    def stored_span(self, key: str) -> tuple[int, int] | None:
        """Where storage `key`'s bytes lie in the archive's own source, as ``(offset, size)``,
        when the entry is stored uncompressed (as ``torch.save`` writes every storage), so a
        caller may read part of it; None for a compressed or missing entry."""
        info = self._entries.get(key)
        if info is None or not _is_plain(info):
            return None
        return self._payload_offset(info), info.file_size

    def release(self, key: str) -> None:
        """Drop the mapped pages that lie wholly inside stored entry `key` from the process's
        resident memory (``MmapSource.release_range``); the file's pages stay in the page
        cache. Arrays viewing them stay valid and read the file again when touched, but writes
        made to them are lost (the mapping is copy-on-write). A no-op for compressed entries,
        for a source that is no mapping (nor a window of one), and for an entry of a cached
        mapping not read yet."""
        info = self._entries.get(key)
        release = getattr(self._storage_source, "release_range", None)
        if info is None or release is None or info.compress_type != zipfile.ZIP_STORED:
            return
        if self._caching and key not in self._cache:
            return
        release(self._payload_offset(info), info.file_size)

    def storage_runs(
        self, key: str, nbytes: int, runs: list[tuple[int, int]], tensor: str | None
    ) -> np.ndarray[Any, Any] | None:
        """The ``(offset, size)`` byte runs of storage `key`, laid end to end, read alone: a
        slice of a tensor in a pread or remote archive costs its own bytes, not its storage's.
        None where a part cannot be read so (a compressed entry) or gains nothing (a mapped
        file, whose whole-storage view touches only the pages a slice uses).

        Raises:
            MissingStorageError, DescriptorError: as `storage_bytes`.
        """
        info = self._entry(key, tensor)
        if info.file_size != nbytes:
            return None  # `storage_bytes` says how the sizes disagree
        if self._caching or not _is_plain(info):
            return None
        if any(offset < 0 or offset + size > nbytes for offset, size in runs):
            return None  # the whole read refuses the view, naming it
        start = self._payload_offset(info)
        shifted = [(start + offset, size) for offset, size in runs]
        return read_runs(self._storage_source, shifted, f"entry {info.filename}", tensor)

    def _entry(self, key: str, tensor: str | None) -> zipfile.ZipInfo:
        """Storage `key`'s entry; `MissingStorageError` when there is none, `ValueError` once
        the file is closed."""
        if self._closed:
            raise ValueError(f"{self.path}: the file is closed")
        info = self._entries.get(key)
        if info is None:
            raise MissingStorageError(key, path=self.path, tensor=tensor)
        return info

    def close(self) -> None:
        """Drop the cached storages: views of the mapping among them would keep it mapped."""
        self._closed = True
        self._cache.clear()

    def _read(self, info: zipfile.ZipInfo, tensor: str | None) -> memoryview:
        if info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 0x1:
            if info.compress_size != info.file_size:
                raise ArchiveError(
                    "a stored entry whose sizes differ", entry=info.filename, path=self.path
                )
            what = f"entry {info.filename}"
            if hasattr(self._storage_source, "read_into"):
                return self._read_remote(info, what, tensor)
            offset = self._payload_offset(info)
            return self._storage_source.read(offset, info.file_size, what, tensor)
        if info.file_size > self._limits.max_inflated_size:
            raise LimitExceeded(
                f"inflated size of {info.filename}",
                info.file_size,
                self._limits.max_inflated_size,
                path=self.path,
                tensor=tensor,
            )
        return memoryview(self._inflate(info))

    def _read_remote(self, info: zipfile.ZipInfo, what: str, tensor: str | None) -> memoryview:
        """A stored entry of a remote source: its local header and payload in one request,
        with room for the header's extra field (torch pads it to align the payload to 64
        bytes), into a buffer placed so that an aligned payload lands aligned."""
        source = self._storage_source
        start = info.header_offset
        guess = ZIP_LOCAL_HEADER_SIZE + len(info.orig_filename.encode()) + _EXTRA_ROOM
        span = min(guess + info.file_size, source.size - start)
        buffer = np.empty(span + _PAYLOAD_ALIGNMENT, np.uint8)
        shift = (start - buffer.ctypes.data) % _PAYLOAD_ALIGNMENT
        block = buffer[shift : shift + span]
        source.read_into(start, block, what, tensor)  # type: ignore[attr-defined]
        signature, name_size, extra_size = ZIP_LOCAL_HEADER.unpack(
            block[:ZIP_LOCAL_HEADER_SIZE].tobytes()
        )
        if signature != ZIP_MAGIC:
            raise ArchiveError(
                "local header has a bad signature", entry=info.filename, path=self.path
            )
        payload = ZIP_LOCAL_HEADER_SIZE + name_size + extra_size
        if payload + info.file_size > span:  # an extra field larger than any torch writes
            return source.read(start + payload, info.file_size, what, tensor)
        data: memoryview = block[payload : payload + info.file_size].data
        return data

    def _payload_offset(self, info: zipfile.ZipInfo) -> int:
        return payload_offset(self._source, info, self.path)

    def _inflate(self, info: zipfile.ZipInfo) -> bytearray:
        return read_member(self._source, info, self.path, _INFLATE_CHUNK)


def _is_plain(info: zipfile.ZipInfo) -> bool:
    """Whether entry `info` is stored as is (as ``torch.save`` writes every storage): not
    compressed, not encrypted, its two sizes equal, so any part of it can be read in place."""
    stored = info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 0x1
    return stored and info.compress_size == info.file_size
