"""Where a container reader's bytes come from: a mapped file, `pread`, or a caller's buffer.

Readers ask a source for ``(offset, size)`` ranges and get a `memoryview` back. The mapped and
in-memory sources return views (no copy); the pread source returns a fresh buffer per range, for
filesystems where mmap misbehaves (some network mounts, FUSE). A mapped file is opened
copy-on-write (``MAP_PRIVATE``): arrays built on it can be written to, and those writes never
reach the file.

Closing a mapped source unmaps the file at once unless arrays still view it; then it is
unmapped when the last of them is freed. That is safe only because every array over a source's
bytes is built with `np.frombuffer` (directly, or as the ``buffer=`` of `np.ndarray`): NumPy
then holds a buffer export of the mapping, and `mmap.close` refuses (`BufferError`) while one
exists. Never pass a view from `read` straight to ``np.ndarray(buffer=...)``: NumPy 2 keeps the
bare mmap as that array's base and takes no export, so closing would unmap memory the array
still reads, and touching it would crash the process.
"""

from __future__ import annotations

import mmap
import os
from typing import BinaryIO, Literal, Protocol

import numpy as np

from weightstore.errors import FileMissingError, PathIsDirectoryError, TruncatedError

__all__ = [
    "ByteSource",
    "MemorySource",
    "MmapSource",
    "PreadSource",
    "ReadMode",
    "open_readable",
    "open_source",
]

ReadMode = Literal["mmap", "pread"]
"""How `open_source` reads a file: ``"mmap"`` (views of a mapping) or ``"pread"`` (copies)."""


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

    @property
    def name(self) -> str | None:
        return self._name

    @property
    def size(self) -> int:
        return self._size

    def read(self, offset: int, size: int, what: str, tensor: str | None = None) -> memoryview:
        _check_range(self, offset, size, what, tensor)
        return self._view[offset : offset + size]

    def close(self) -> None:
        """Nothing to release: the caller owns the buffer."""


class MmapSource(MemorySource):
    """A file mapped copy-on-write; ranges are views of the mapping (see the module docstring
    for when `close` unmaps)."""

    def __init__(self, path: str) -> None:
        with open_readable(path) as file:
            size = os.fstat(file.fileno()).st_size
            # mmap refuses empty files; an empty buffer reads the same and fails the same way.
            self._map: mmap.mmap | None = (
                mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY) if size else None
            )
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
        return b"" if self._map is None else self._map

    def read(self, offset: int, size: int, what: str, tensor: str | None = None) -> memoryview:
        """As `ByteSource.read`; `ValueError` once the source is closed."""
        self._check_open()
        return super().read(offset, size, what, tensor)

    def close(self) -> None:
        """Unmap now, or, while arrays still view the mapping, when the last of them goes.

        The source drops its own references either way, so nothing here keeps the file mapped.
        """
        if self._closed:
            return
        self._closed = True
        view, mapping = self._view, self._map
        self._view, self._map = memoryview(b""), None
        try:
            view.release()
            if mapping is not None:
                mapping.close()
        except BufferError:
            pass  # arrays hold exports of the mapping; it is unmapped with the last of them

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self._path}: the file is closed")


class PreadSource(ByteSource):
    """A file read with `os.pread`: each range is a fresh, writable copy."""

    def __init__(self, path: str) -> None:
        open_readable(path).close()  # the typed errors for a missing file or a directory
        self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        self._size = os.fstat(self._fd).st_size
        self._name = path

    @property
    def name(self) -> str | None:
        return self._name

    @property
    def size(self) -> int:
        return self._size

    def read(self, offset: int, size: int, what: str, tensor: str | None = None) -> memoryview:
        if self._fd < 0:
            raise ValueError(f"{self._name}: the file is closed")
        _check_range(self, offset, size, what, tensor)
        # np.empty, not bytearray: zero-filling would fault every page in twice.
        view = np.empty(size, np.uint8).data
        done = 0
        while done < size:
            got = os.preadv(self._fd, [view[done:]], offset + done)
            if got == 0:  # the file shrank under us
                raise TruncatedError(what, size, done, path=self._name, tensor=tensor)
            done += got
        return view

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def open_readable(path: str) -> BinaryIO:
    """`path` opened for reading, or the typed error for a missing file or a directory (every
    source opens through here, so no reader leaks a bare `FileNotFoundError`)."""
    try:
        return open(path, "rb")
    except FileNotFoundError as err:
        raise FileMissingError(path) from err
    except IsADirectoryError as err:
        raise PathIsDirectoryError(path) from err


def open_source(path: str | os.PathLike[str], mode: ReadMode = "mmap") -> ByteSource:
    """Open `path` for random access reads with the given strategy.

    Raises:
        FileMissingError: nothing is at `path` (a `FileNotFoundError`).
        PathIsDirectoryError: `path` is a directory (an `IsADirectoryError`); ``os.open``
            would open one for pread and fail only at the first read.
    """
    filename = os.fspath(path)
    if mode not in ("mmap", "pread"):
        raise ValueError(f"read mode must be 'mmap' or 'pread', not {mode!r}")
    return MmapSource(filename) if mode == "mmap" else PreadSource(filename)
