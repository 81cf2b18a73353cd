"""Where a container reader's bytes come from: a mapped file, `pread`, or a caller's buffer.

Readers ask a source for ``(offset, size)`` ranges and get a `memoryview` back. The mapped and
in-memory sources return views (no copy); the pread source returns a fresh buffer per range, for
filesystems where mmap misbehaves (some network mounts, FUSE). A mapped file is opened
copy-on-write (``MAP_PRIVATE``): arrays built on it can be written to, and those writes never
reach the file.

A mapped file that shrinks under its reader (truncated or rewritten in place by another
process) would kill the process with SIGBUS at the next touch of a page past its new end, so
every `MmapSource.read` first checks the file's current size (one ``fstat``) and raises
`TruncatedError` instead. Arrays already handed out cannot be guarded that way: touching one
whose bytes are gone still raises SIGBUS. Readers that must survive files changing under them
use ``mode="pread"``, whose arrays are copies.

Descriptors: an open source holds one. A pread source left unclosed closes it when collected.
A mapped source's mapping holds Python's duplicate of it until unmapped, before Python 3.13;
from 3.13 the mapping is made with ``trackfd=False`` and a closed source holds none, however
many of its arrays live.

Closing a mapped source unmaps the file at once unless arrays still view it; then it is
unmapped when the last of them is freed. That is safe only because every array over a source's
bytes is built with `np.frombuffer` (directly, or as the ``buffer=`` of `np.ndarray`): NumPy
then holds a buffer export of the mapping, and `mmap.close` refuses (`BufferError`) while one
exists. Never pass a view from `read` straight to ``np.ndarray(buffer=...)``: NumPy 2 keeps the
bare mmap as that array's base and takes no export, so closing would unmap memory the array
still reads, and touching it would crash the process.
"""

from __future__ import annotations

import errno
import functools
import gc
import io
import mmap
import os
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO, Final, Literal, NoReturn, Protocol

from weightstore.base._lazy import import_on_first_use
from weightstore.errors import (
    FileMissingError,
    NotAFileError,
    PathIsDirectoryError,
    TruncatedError,
)
from weightstore.io._local import (
    BROKEN_SYMLINK,
    DIRECTORY,
    MISSING,
    REGULAR,
    kind_at,
    kind_of_mode,
    unencodable,
)

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
else:
    np = import_on_first_use("numpy", globals(), "np")  # header-only work never needs NumPy

__all__ = [
    "READ_MODES",
    "ByteSource",
    "MemorySource",
    "MmapSource",
    "PreadSource",
    "ReadMode",
    "SourceFile",
    "WindowSource",
    "open_readable",
    "read_runs",
]

ReadMode = Literal["mmap", "pread", "direct"]
"""How `open_source` reads a file: ``"mmap"`` (views of a mapping), ``"pread"`` (copies) or
``"direct"`` (copies read with ``O_DIRECT``, `weightstore.io._engine.DirectSource`)."""
READ_MODES: Final = ("mmap", "pread", "direct")
"""The values `ReadMode` takes, for the readers' checks of a ``mode`` argument."""


class ByteSource(Protocol):
    """A random-access, read-only view of a container's bytes."""

    @property
    def name(self) -> str | None:
        """The file path used in error messages, ``None`` for memory."""
        ...

    @property
    def size(self) -> int:
        """Total length in bytes."""
        ...

    def read(self, offset: int, size: int, what: str, tensor: str | None = None) -> memoryview:
        """Exactly `size` bytes from `offset`, or `TruncatedError` naming `what`."""
        ...

    def close(self) -> None:
        """Release the file; arrays already built from `read` stay valid."""
        ...


def _check_range(source: ByteSource, offset: int, size: int, what: str, tensor: str | None) -> None:
    """The bound every `read` checks first: `TruncatedError` unless the range lies in the source."""
    if offset < 0 or size < 0 or offset + size > source.size:
        found = max(0, source.size - max(offset, 0))
        raise TruncatedError(what, size, found, path=source.name, tensor=tensor)


class MemorySource(ByteSource):
    """Bytes the caller already holds; `read` returns views into them."""

    def __init__(self, buffer: bytes | bytearray | memoryview, name: str | None = None) -> None:
        self._view = memoryview(buffer).cast("B")
        self._size = self._view.nbytes
        self._name = name
        # Every byte as one uint8 array, made on the first `array` call (header-only work
        # needs no NumPy); tensors are views of it, and it holds the buffer export for them.
        self._bytes: np.ndarray[Any, Any] | None = None

    @property
    def name(self) -> str | None:
        return self._name

    @property
    def size(self) -> int:
        return self._size

    def read(self, offset: int, size: int, what: str, tensor: str | None = None) -> memoryview:
        _check_range(self, offset, size, what, tensor)
        return self._view[offset : offset + size]

    def array(
        self, offset: int, size: int, dtype: np.dtype[Any], shape: tuple[int, ...], tensor: str
    ) -> np.ndarray[Any, Any]:
        """The `size` bytes at `offset` (``shape`` x ``dtype`` of them, which the caller's
        header checks proved) as a view, checked as `read` checks ``"tensor data"``.

        One NumPy call on the whole-buffer array instead of a memoryview slice, `frombuffer`
        and `reshape`: a third of the cost of a small tensor.
        """
        if offset < 0 or size < 0 or offset + size > self._size:
            _check_range(self, offset, size, "tensor data", tensor)
        return self._view_at(offset, dtype, shape)

    def _view_at(
        self, offset: int, dtype: np.dtype[Any], shape: tuple[int, ...]
    ) -> np.ndarray[Any, Any]:
        """A `shape` x `dtype` view from `offset`, whose range the caller checked."""
        whole = self._bytes
        if whole is None:
            whole = self._bytes = np.frombuffer(self._view, np.uint8)
        view: np.ndarray[Any, Any] = np.ndarray(shape, dtype, whole, offset)
        return view

    def close(self) -> None:
        """Nothing to release: the caller owns the buffer."""


class MmapSource(MemorySource):
    """A file mapped copy-on-write; ranges are views of the mapping (see the module docstring
    for when `close` unmaps)."""

    def __init__(self, path: str) -> None:
        self._map: mmap.mmap | None = None
        self._file_size: Callable[[], int] | None = None  # the file's size now (an fstat)
        self._kept_fd: weakref.finalize[[int], MmapSource] | None = None  # closes it, once
        with open_readable(path) as file:
            # mmap refuses empty files; an empty buffer reads the same and fails the same way.
            if os.fstat(file.fileno()).st_size:
                self._map, kept_fd = _map_copy_on_write(file.fileno())
                if kept_fd is None:
                    self._file_size = self._map.size  # fstat of the mapping's own descriptor
                else:
                    self._kept_fd = weakref.finalize(self, os.close, kept_fd)
                    self._file_size = functools.partial(_fstat_size, kept_fd)
        super().__init__(memoryview(self._map) if self._map is not None else b"", name=path)
        self._path = path
        self._closed = False

    @property
    def name(self) -> str:
        """The mapped file's path."""
        return self._path

    @property
    def mapping(self) -> mmap.mmap | bytes:
        """The whole file, for parsers that scan it in place: the mmap itself, ``b""`` when the
        file is empty. `find` searches it without copying; slicing it copies. Arrays are built
        from `read`, never from this (see the module docstring)."""
        self._check_open()
        self._check_size(0, self._size, "the file", None)
        return b"" if self._map is None else self._map

    def read(self, offset: int, size: int, what: str, tensor: str | None = None) -> memoryview:
        """As `ByteSource.read`; `ValueError` once the source is closed, and `TruncatedError`
        when the file has shrunk below the range since it was mapped."""
        self._check_open()
        view = super().read(offset, size, what, tensor)
        if size:
            self._check_size(offset, size, what, tensor)
        return view

    def release_range(self, offset: int, size: int) -> None:
        """Let the mapped pages wholly inside ``[offset, offset + size)`` leave this process's
        resident memory (``MADV_DONTNEED``; the page cache keeps them), so a pass over a file
        holds about what it reads at once. Arrays viewing them stay valid and read the file
        again when touched; writes made to them are lost (the mapping is copy-on-write). A
        no-op once closed, for an empty file, and where the platform has no `madvise`."""
        if self._closed or self._map is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        page = mmap.PAGESIZE
        first = -(-max(offset, 0) // page) * page
        last = min(offset + size, self._size) // page * page
        if last > first:
            self._map.madvise(mmap.MADV_DONTNEED, first, last - first)

    def array(
        self, offset: int, size: int, dtype: np.dtype[Any], shape: tuple[int, ...], tensor: str
    ) -> np.ndarray[Any, Any]:
        """As `MemorySource.array`, with `read`'s checks in its order: open, in range, and
        the file not shrunk (written out: this runs once per tensor of every load)."""
        if self._closed:
            self._check_open()
        if offset < 0 or size < 0 or offset + size > self._size:
            _check_range(self, offset, size, "tensor data", tensor)
        if size and self._file_size is not None and offset + size > self._file_size():
            self._check_size(offset, size, "tensor data", tensor)
        whole = self._bytes
        if whole is None:
            return self._view_at(offset, dtype, shape)  # makes `_bytes`
        view: np.ndarray[Any, Any] = np.ndarray(shape, dtype, whole, offset)  # `_view_at`, inline
        return view

    def release(self, offset: int, size: int) -> None:
        """Drop the mapped pages lying wholly inside ``[offset, offset + size)`` from the
        process's resident memory (``MADV_DONTNEED``); the file's pages stay in the page cache,
        and arrays viewing them read the file again when touched (writes made to them are
        lost: the mapping is copy-on-write). A no-op once closed, and where the platform has
        no `madvise`."""
        mapping = self._map
        if self._closed or mapping is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        first = -(-offset // mmap.PAGESIZE) * mmap.PAGESIZE
        last = min(offset + size, self._size) // mmap.PAGESIZE * mmap.PAGESIZE
        if last > first:
            mapping.madvise(mmap.MADV_DONTNEED, first, last - first)

    def close(self) -> None:
        """Unmap now, or, while arrays still view the mapping, when the last of them goes.

        The source drops its own references either way, so nothing here keeps the file mapped.
        """
        if self._closed:
            return
        self._closed = True
        view, mapping = self._view, self._map
        self._view, self._map, self._file_size = memoryview(b""), None, None
        self._bytes = None  # the arrays viewing it keep it, and with it the mapping
        if self._kept_fd is not None:
            self._kept_fd()
        try:
            view.release()
            if mapping is not None:
                mapping.close()
        except BufferError:
            pass  # arrays hold exports of the mapping; it is unmapped with the last of them

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self._path}: the file is closed")

    def _check_size(self, offset: int, size: int, what: str, tensor: str | None) -> None:
        """`TruncatedError` unless the file still holds the range: touching a mapped page past
        the file's end raises SIGBUS, which no Python code can catch."""
        if self._file_size is None:
            return
        file_size = self._file_size()
        if offset + size > file_size:
            found = max(0, file_size - offset)
            raise TruncatedError(what, size, found, path=self._path, tensor=tensor)


class WindowSource(ByteSource):
    """`size` bytes of another source from `offset`, read in place: a file held inside another
    (an item of a DCP rank file, a tar member). Reads go to the other source as asked, so a
    pread source still reads only what is asked; closing it leaves the other source open."""

    def __init__(self, base: ByteSource, offset: int, size: int, name: str | None) -> None:
        _check_range(base, offset, size, "the window", None)
        self._base, self._offset, self._size, self._name = base, offset, size, name

    @property
    def name(self) -> str | None:
        return self._name

    @property
    def size(self) -> int:
        return self._size

    def read(self, offset: int, size: int, what: str, tensor: str | None = None) -> memoryview:
        _check_range(self, offset, size, what, tensor)
        return self._base.read(self._offset + offset, size, what, tensor)

    def release_range(self, offset: int, size: int) -> None:
        """The other source's `release_range` of the same bytes, where it has one."""
        release = getattr(self._base, "release_range", None)
        if release is not None:
            start = max(offset, 0)
            release(self._offset + start, max(0, min(offset + size, self._size) - start))

    def close(self) -> None:
        """Nothing to release: the other source's owner closes it."""


def _map_copy_on_write(fd: int) -> tuple[mmap.mmap, int | None]:
    """Map the whole file `fd` copy-on-write; also return a duplicate of `fd` for size checks
    where the mapping keeps none.

    Before Python 3.13 the mapping keeps its own duplicate, which `mmap.size` fstats, so none
    is returned. From 3.13, ``trackfd=False`` keeps none (a closed source whose arrays live on
    then holds no descriptor), and the source keeps the returned one until it is closed.
    """
    if sys.version_info >= (3, 13):
        return mmap.mmap(fd, 0, access=mmap.ACCESS_COPY, trackfd=False), os.dup(fd)
    return mmap.mmap(fd, 0, access=mmap.ACCESS_COPY), None


def _fstat_size(fd: int) -> int:
    return os.fstat(fd).st_size


class PreadSource(ByteSource):
    """A file read with `os.pread`: each range is a fresh, writable copy. A source that is
    never closed closes its descriptor when it is collected."""

    def __init__(self, path: str) -> None:
        with open_readable(path) as file:  # the typed errors for a missing file or a directory
            self._fd = os.dup(file.fileno())
        self._closer = weakref.finalize(self, os.close, self._fd)
        self._size = os.fstat(self._fd).st_size
        self._name = path

    @property
    def name(self) -> str | None:
        return self._name

    @property
    def size(self) -> int:
        return self._size

    def read(self, offset: int, size: int, what: str, tensor: str | None = None) -> memoryview:
        """A fresh copy of the range. A large one is read in parts by a few threads at once
        (`read_parallel`), so a disk's queue or a network file system's round trips overlap."""
        if not self._closer.alive:
            raise ValueError(f"{self._name}: the file is closed")
        _check_range(self, offset, size, what, tensor)
        # np.empty, not bytearray: zero-filling would fault every page in twice.
        view = np.empty(size, np.uint8).data
        read_parallel(self._fd, view, offset, what, self._name, tensor)
        return view

    def close(self) -> None:
        self._closer()  # closes the descriptor the first time only


PARALLEL_MIN: Final = 1 << 20
"""Bytes from which one read is split across threads; below it one `preadv` is cheaper."""
PARALLEL_PART: Final = 512 << 10  # bytes each thread reads at a time (4 KiB aligned)
READ_THREADS: Final = 4  # requests in flight: enough for an NVMe queue or a FUSE daemon
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (pid, pool): a fork starts a new one
_pool_lock = threading.Lock()


def read_parallel(
    fd: int,
    view: memoryview,
    offset: int,
    what: str,
    name: str | None,
    tensor: str | None,
    needed: int | None = None,
) -> None:
    """Fill `view` from `fd` at `offset`: one `preadv` loop for a small range, parts of
    `PARALLEL_PART` bytes on `READ_THREADS` threads for one of `PARALLEL_MIN` or more (the
    threads drop the GIL while they wait). `needed`: the bytes that must be there (an
    ``O_DIRECT`` read rounds its end up past the file's); all of `view` by default.

    Raises:
        TruncatedError: the file ends before the needed bytes do.
    """
    size = view.nbytes
    need = size if needed is None else needed
    if size < PARALLEL_MIN:
        _fill(fd, view, offset, (what, name, tensor), 0, size, need)
        return
    starts = range(0, size, PARALLEL_PART)
    parts = [(start, min(start + PARALLEL_PART, size)) for start in starts]
    pool = _read_pool()
    where = (what, name, tensor)
    futures = [pool.submit(_fill, fd, view, offset, where, a, b, need) for a, b in parts]
    for future in futures:
        future.result()  # the first part's error, in order


def _fill(
    fd: int,
    view: memoryview,
    offset: int,
    where: tuple[str, str | None, str | None],
    start: int,
    stop: int,
    need: int,
) -> None:
    done = start
    while done < stop:
        got = os.preadv(fd, [view[done:stop]], offset + done)
        if got == 0:  # the file ends here: short of the range only if `need` lies beyond
            if done >= need:
                return
            what, name, tensor = where
            raise TruncatedError(what, need, done, path=name, tensor=tensor)
        done += got


def _read_pool() -> ThreadPoolExecutor:
    """The process's read threads, started on first use (and again in a forked child, whose
    parent's threads do not exist there)."""
    global _pool
    from concurrent.futures import ThreadPoolExecutor  # imported by the first large read

    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            executor = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="weightstore-read")
            _pool = (os.getpid(), executor)
        return _pool[1]


def open_readable(path: str) -> BinaryIO:
    """`path` opened for reading, or the typed error for anything but a regular file there.
    Every local open goes through here, so no reader leaks a bare `FileNotFoundError` and
    none blocks on a FIFO (`weightstore.io._local`).

    What is at `path` is asked before it is opened (a device may act on being opened, a FIFO
    blocks until a writer comes), then confirmed on the open descriptor: the open does not
    block (``O_NONBLOCK``), so a FIFO swapped in between is refused too, not waited on.

    Raises:
        FileMissingError: nothing is there, or the name can name no file (a NUL, a lone
            surrogate: `reason` says which).
        PathIsDirectoryError: a directory is there.
        NotAFileError: a FIFO, socket, device or symlink loop is there.
    """
    reason = unencodable(path)
    if reason is not None:
        raise FileMissingError(path, reason)
    kind = kind_at(path)
    if kind != REGULAR:
        _refuse(path, kind)
    try:
        fd = _open_collecting(path)
    except FileNotFoundError as err:  # removed since it was looked at
        raise FileMissingError(path) from err
    try:
        kind = kind_of_mode(os.fstat(fd).st_mode)
        if kind != REGULAR:
            _refuse(path, kind)
        if _NONBLOCKING:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _refuse(path: str, kind: str) -> NoReturn:
    """The typed error for `kind_at`'s answer `kind` (not `REGULAR`) at `path`."""
    if kind in (MISSING, BROKEN_SYMLINK):
        raise FileMissingError(path)
    if kind == DIRECTORY:
        raise PathIsDirectoryError(path)
    raise NotAFileError(path, kind)


# Open without blocking, so a FIFO put in the file's place between the look and the open is
# refused, not waited on; no controlling terminal from a tty; binary on Windows.
_NONBLOCKING: Final = getattr(os, "O_NONBLOCK", 0)
_OPEN_FLAGS: Final = (
    os.O_RDONLY | _NONBLOCKING | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
)


def _open_collecting(path: str) -> int:
    """A descriptor of `path` opened for reading, retried once after a garbage collection
    when the process is out of descriptors: unreachable sources in reference cycles hold
    theirs until the collector runs."""
    try:
        return os.open(path, _OPEN_FLAGS)
    except OSError as err:
        if err.errno != errno.EMFILE:
            raise
    gc.collect()
    return os.open(path, _OPEN_FLAGS)


def read_runs(
    source: ByteSource, runs: Sequence[tuple[int, int]], what: str, tensor: str | None = None
) -> np.ndarray[Any, Any]:
    """The ``(offset, size)`` runs of `source` laid end to end in one uint8 array. A remote
    source fetches them as one plan (merged, concurrent); others read them one by one."""
    planned = getattr(source, "read_runs", None)
    if planned is not None:
        gathered: np.ndarray[Any, Any] = planned(runs, what, tensor)
        return gathered
    buffer = np.empty(sum(size for _, size in runs), np.uint8)
    position = 0
    for offset, size in runs:
        buffer[position : position + size] = np.frombuffer(
            source.read(offset, size, what, tensor), np.uint8
        )
        position += size
    return buffer


class SourceFile(io.RawIOBase):
    """A read-only, seekable file over a `ByteSource`, for parsers that want one (`zipfile`).

    Reads are served from blocks of `chunk_size` bytes kept after their first read (a few at
    most), so a parser's many small reads of one region (a zip's directory, its small records)
    cost one source read each; 0 reads exactly what is asked.
    """

    _KEPT_CHUNKS: Final = 4

    def __init__(self, source: ByteSource, chunk_size: int = 0) -> None:
        super().__init__()
        self._source, self._chunk_size = source, chunk_size
        self._position = 0
        self._chunks: dict[int, bytes] = {}

    @property
    def name(self) -> str | None:
        """The source's name (zipfile shows it in its messages)."""
        return self._source.name

    def readable(self) -> bool:
        """Always: the file is for reading."""
        return True

    def seekable(self) -> bool:
        """Always: any position of the source can be read."""
        return True

    def tell(self) -> int:
        """The current position."""
        return self._position

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        """Move to `offset` from the start, the current position or the end (`whence`)."""
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self._source.size}
        position = base[whence] + offset
        if position < 0:
            raise ValueError(f"negative seek position {position}")
        self._position = position
        return position

    def readinto(self, buffer: Any) -> int:
        """Fill `buffer` from the current position; fewer bytes at the end, none past it."""
        view = memoryview(buffer).cast("B")
        size = max(0, min(view.nbytes, self._source.size - self._position))
        if size:
            view[:size] = self._read(self._position, size)
        self._position += size
        return size

    def _read(self, offset: int, size: int) -> bytes | memoryview:
        chunk_size = self._chunk_size
        if not chunk_size or size > chunk_size:
            return self._source.read(offset, size, "the archive")
        first, last = offset // chunk_size, (offset + size - 1) // chunk_size
        data = b"".join(self._chunk(index) for index in range(first, last + 1))
        start = offset - first * chunk_size
        return data[start : start + size]

    def _chunk(self, index: int) -> bytes:
        kept = self._chunks.get(index)
        if kept is None:
            start = index * self._chunk_size
            size = min(self._chunk_size, self._source.size - start)
            kept = bytes(self._source.read(start, size, "the archive"))
            if len(self._chunks) >= self._KEPT_CHUNKS:
                del self._chunks[next(iter(self._chunks))]
            self._chunks[index] = kept
        return kept
