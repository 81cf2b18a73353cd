"""Which bytes of a zip checkpoint its archive spans, and what lies around it.

A zip is read from its end: zipfile (and torch's own reader) find the end-of-central-directory
record in the file's last bytes and take the archive it closes, shifted to where it starts. Bytes
before that start (other archives: a ``torch.distributed.checkpoint`` rank file ``__0_0.distcp``
holds one ``torch.save`` archive per item, back to back) and bytes after its end are never read,
so a file holding six archives reads as one. `zip_extent` says what is there, for ``verify``
to refuse and ``inspect`` to warn about. A zip cut short (a partial download) has no end record
at all; `cut_archive` walks its entries from the start to say where it is cut.
"""

from __future__ import annotations

import io
import mmap
import os
import zipfile
from typing import BinaryIO

from weightstore.base._record import ValueRecord
from weightstore.errors import TruncatedError
from weightstore.io._source import MmapSource
from weightstore.pytorch_reader._layout import MAX_ARCHIVES_COUNTED, ZIP_MAGIC

__all__ = ["ZipExtent", "cut_archive", "zip_extent"]

_END_RECORD = b"PK\x05\x06"
_END_RECORD_SIZE = 22
_MAX_COMMENT = 0xFFFF
# What zipfile raises on bytes that are no (whole) archive; stdlib behaviour, not our errors.
# NotImplementedError: zipfile on a member whose header claims an unknown version (fuzzer)
_NOT_AN_ARCHIVE = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    OSError,
    ValueError,
    EOFError,
    NotImplementedError,
)


class ZipExtent(ValueRecord):
    """Where the archive a reader reads lies in its file.

    Attributes:
        size: the file's size.
        start, end: the archive read spans bytes [start, end).
        archives_before: whole zip archives found in the bytes before `start`, back to back
            (counted up to `MAX_ARCHIVES_COUNTED`).
        counted_all: False when the count stopped at that limit.
    """

    size: int
    start: int
    end: int
    archives_before: int
    counted_all: bool = True

    @property
    def whole(self) -> bool:
        """Whether the archive is the whole file."""
        return self.start == 0 and self.end == self.size

    def describe(self) -> str | None:
        """A sentence on the bytes around the archive; None when it is the whole file."""
        if self.whole:
            return None
        read = f"{self.end - self.start:,} bytes at offset {self.start:,}"
        parts = []
        if self.archives_before:
            total = self.archives_before + 1
            more = "" if self.counted_all else " at least"
            parts.append(
                f"holds{more} {total:,} zip archives back to back (a torch DCP rank file?); "
                f"only the last is read ({read}), the {self.start:,} bytes before it are not"
            )
        elif self.start:
            parts.append(f"{self.start:,} bytes before the zip archive ({read}) are not read")
        if self.end < self.size:
            after = self.size - self.end
            parts.append(f"{after:,} bytes follow the zip archive's end, not read")
        return "; ".join(parts)


def zip_extent(path: str | os.PathLike[str]) -> ZipExtent | None:
    """The extent of the zip archive a reader of `path` reads; None when the file does not
    start as a zip does, or is no zip that zipfile opens (its reader reports that).

    Raises:
        OSError: the file cannot be read.
    """
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if file.read(len(ZIP_MAGIC)) != ZIP_MAGIC:
            return None
        end = _archive_end(file, size)
        if end is None:
            return None
        start = _archive_start(file, end)
        if start is None:
            return None
        before, counted_all, cursor = 0, True, start
        while cursor > 0:
            if before == MAX_ARCHIVES_COUNTED:
                counted_all = False
                break
            previous = _archive_start(file, cursor) if _ends_an_archive(file, cursor) else None
            if previous is None:
                break
            before, cursor = before + 1, previous
    return ZipExtent(size, start, end, before, counted_all)


def _archive_end(file: BinaryIO, size: int) -> int | None:
    """Where the last end-of-central-directory record (and its comment) ends."""
    tail_size = min(size, _END_RECORD_SIZE + _MAX_COMMENT)
    file.seek(size - tail_size)
    tail = file.read(tail_size)
    at = tail.rfind(_END_RECORD)
    while at >= 0:
        if at + _END_RECORD_SIZE <= len(tail):
            comment = int.from_bytes(tail[at + 20 : at + 22], "little")
            if at + _END_RECORD_SIZE + comment <= len(tail):
                return size - tail_size + at + _END_RECORD_SIZE + comment
        at = tail.rfind(_END_RECORD, 0, at)
    return None


def _ends_an_archive(file: BinaryIO, end: int) -> bool:
    """Whether an end-of-central-directory record without a comment ends at `end`: how
    torch.save's archives end, so one directly before another is found without a search."""
    if end < _END_RECORD_SIZE:
        return False
    file.seek(end - _END_RECORD_SIZE)
    record = file.read(_END_RECORD_SIZE)
    return record.startswith(_END_RECORD) and record[20:22] == b"\x00\x00"


def _archive_start(file: BinaryIO, end: int) -> int | None:
    """The offset of the first local header of the archive that ends at `end`."""
    try:
        with zipfile.ZipFile(_Window(file, end)) as archive:
            offsets = [info.header_offset for info in archive.infolist()]
    except _NOT_AN_ARCHIVE:
        return None
    if not offsets:
        return None
    start = min(offsets)
    file.seek(start)
    return start if file.read(4) == ZIP_MAGIC else None


class _Window(io.RawIOBase):
    """The first `size` bytes of `file`, as a file of their own (zipfile reads from its end)."""

    def __init__(self, file: BinaryIO, size: int) -> None:
        super().__init__()
        self._file, self._size, self._position = file, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        count = max(0, min(len(buffer), self._size - self._position))
        self._file.seek(self._position)
        data = self._file.read(count)
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)


_LOCAL_HEADER_SIZE = 30
_DESCRIPTOR = b"PK\x07\x08"
_DESCRIPTOR_SIZE = 16  # signature, CRC, and 4-byte sizes; 24 with zip64's 8-byte ones
_CENTRAL_HEADER_SIZE = 46
_DATA_DESCRIPTOR_FLAG = 0x08
_ZIP64_EXTRA = 0x0001
_U32_MAX = 0xFFFFFFFF


def cut_archive(source: MmapSource, max_entries: int) -> TruncatedError | None:
    """The error for a zip that ends inside an entry (a partial download), found by walking
    its local headers from the start; None when no entry runs past the end (the damage is
    another). Walks at most `max_entries` entries (the reader's storage limit).

    torch writes every entry with a data descriptor after its bytes (sizes 0 in the local
    header), so an entry's end is the descriptor whose size field matches its distance from
    the entry's start: a match by chance inside tensor bytes would also have to hold that."""
    data, size, offset = source.mapping, source.size, 0
    names: list[str] = []
    for _ in range(max_entries + 8):  # the storages and torch's few records
        if offset + _LOCAL_HEADER_SIZE > size:
            return _cut(source, "a zip entry's header", names, offset + _LOCAL_HEADER_SIZE)
        header = bytes(data[offset : offset + _LOCAL_HEADER_SIZE])
        if not header.startswith(ZIP_MAGIC):
            return None  # the central directory (or damage) follows: not a cut entry
        flags = int.from_bytes(header[6:8], "little")
        packed = int.from_bytes(header[18:22], "little")
        name_size = int.from_bytes(header[26:28], "little")
        extra_size = int.from_bytes(header[28:30], "little")
        start = offset + _LOCAL_HEADER_SIZE + name_size + extra_size
        if start > size:
            return _cut(source, "a zip entry's header", names, start)
        name = bytes(data[offset + _LOCAL_HEADER_SIZE : offset + _LOCAL_HEADER_SIZE + name_size])
        names.append(name.decode("utf-8", "replace"))
        if flags & _DATA_DESCRIPTOR_FLAG:
            end = _descriptor_end(data, start, size)
            if end is None:
                return _cut(source, f"entry {names[-1]!r}", names, size + _DESCRIPTOR_SIZE)
        else:
            if packed == _U32_MAX:
                extra = bytes(data[start - extra_size : start])
                packed = _zip64_packed_size(extra) or 0
            end = start + packed
            if end > size:
                return _cut(source, f"entry {names[-1]!r}", names, end)
        offset = end
    return None


def _descriptor_end(data: mmap.mmap | bytes, start: int, size: int) -> int | None:
    """The end of the data descriptor that closes the entry whose bytes begin at `start`."""
    at = data.find(_DESCRIPTOR, start)
    while 0 <= at <= size - _DESCRIPTOR_SIZE:
        if int.from_bytes(data[at + 8 : at + 12], "little") == at - start:
            return at + _DESCRIPTOR_SIZE
        if at + 24 <= size and int.from_bytes(data[at + 8 : at + 16], "little") == at - start:
            return at + 24
        at = data.find(_DESCRIPTOR, at + 1)
    return None


def _cut(source: MmapSource, where: str, names: list[str], needed: int) -> TruncatedError:
    """A zip cut short inside `where`: it needs at least `needed` bytes, and then a central
    directory entry for each of `names` and the end record."""
    directory = sum(_CENTRAL_HEADER_SIZE + len(name.encode()) for name in names)
    return TruncatedError(
        f"the zip archive (cut inside {where}, with no directory after it)",
        needed + directory + _END_RECORD_SIZE,
        source.size,
        path=source.name,
        at_least=True,
    )


def _zip64_packed_size(extra: bytes) -> int | None:
    """The compressed size from a local header's zip64 extra field (its second u64)."""
    at = 0
    while at + 4 <= len(extra):
        kind = int.from_bytes(extra[at : at + 2], "little")
        length = int.from_bytes(extra[at + 2 : at + 4], "little")
        if kind == _ZIP64_EXTRA and length >= 16:
            return int.from_bytes(extra[at + 12 : at + 20], "little")
        at += 4 + length
    return None
