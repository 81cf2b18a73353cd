"""What every container writer shares: turning a planned file into bytes, a buffer or a file.

A writer plans its whole layout from the entries' declared sizes when it is built, so anything
that can be refused is refused before a byte is written. It then only has to say which pieces
of bytes make up the file, in order (`_pieces`); producing them one at a time is what keeps a
save's peak memory at one tensor. Writing those pieces to a file atomically, into a caller's
buffer, or into `bytes` is the same for every format and lives here once.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO

from weightstore.errors import EntryError
from weightstore.io._atomic import write_all, write_atomic

if TYPE_CHECKING:
    from weightstore.io._digest import Hasher

__all__ = ["ContainerWriter"]


class ContainerWriter(ABC):
    """Base of the container writers; a subclass sets `size` and yields its `_pieces`."""

    size: int  # bytes in the whole file

    @abstractmethod
    def _pieces(self) -> Iterator[bytes | memoryview]:
        """The file's bytes in order, each tensor's produced only when the caller gets to it."""

    def write_to(self, file: BinaryIO, hasher: Hasher | None = None) -> None:
        """Stream the file to an open binary file, one tensor at a time; `hasher`, when
        given, is fed every byte written (a set's shard digests, docs/integrity.md)."""
        for piece in self._pieces():
            if hasher is not None:
                hasher.update(piece)
            write_all(file, memoryview(piece))
            del piece  # drop the producer's buffer before asking for the next

    def write_into(self, buffer: bytearray | memoryview) -> None:
        """Fill a caller-provided buffer of at least `size` bytes.

        Raises:
            EntryError: the buffer is shorter than `size`.
        """
        view = memoryview(buffer).cast("B")
        if view.nbytes < self.size:
            raise EntryError(f"buffer is {view.nbytes:,} bytes, the file needs {self.size:,}")
        position = 0
        for piece in self._pieces():
            size = memoryview(piece).nbytes
            view[position : position + size] = piece
            position += size
            del piece

    def to_bytes(self) -> bytes:
        """The whole file in memory."""
        buffer = bytearray(self.size)
        self.write_into(buffer)
        return bytes(buffer)

    def save(
        self, path: str | os.PathLike[str], *, overwrite: bool = False, durable: bool = True
    ) -> str:
        """Write atomically to `path`: the file appears whole or not at all.

        Args:
            path: the destination.
            overwrite: replace an existing file (atomically).
            durable: fsync the file and its directory so the save survives power loss; false
                keeps the atomic rename but skips the fsyncs (`_atomic`).

        Returns:
            The path written.

        Raises:
            DestinationExistsError: the file exists and `overwrite` is false.
        """
        return write_atomic(path, self.write_to, overwrite=overwrite, durable=durable)
