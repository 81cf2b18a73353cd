"""The file under a reader: mapped once, copy-on-write, and what each layout reports about it.

`MappedFile` hands out memoryview windows of the mapping (arrays built on them can be written;
the writes never reach the file). `ArchiveInfo` is the layout's facts; `Loaded` is an opened
checkpoint: its decoded root object and what to close.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from weightstore.errors import TruncatedError

__all__ = ["ArchiveInfo", "Layout", "Loaded", "MappedFile"]

Layout = Literal["zip", "legacy", "tar", "pickle"]


class MappedFile:
    """A file mapped copy-on-write; an empty file maps to empty bytes.

    `close` unmaps nothing itself: it drops the reader's references, and the mapping goes when
    the last array viewing it does. (Unmapping explicitly is unsafe: an array NumPy builds over
    a memoryview keeps the mmap, not the memoryview, so no export would stop the unmap.)
    """

    def __init__(self, path: str) -> None:
        self.path = path
        with open(path, "rb") as file:
            self.size = os.fstat(file.fileno()).st_size
            self.data: mmap.mmap | bytes = (
                mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY) if self.size else b""
            )
        self.view = memoryview(self.data)
        self.closed = False

    def window(self, offset: int, size: int, what: str, tensor: str | None) -> memoryview:
        """Bytes ``[offset, offset + size)`` of the file, as a view; `TruncatedError` if short."""
        if self.closed:
            raise ValueError(f"{self.path}: the reader is closed")
        if offset < 0 or size < 0 or offset + size > self.size:
            found = max(0, self.size - max(offset, 0))
            raise TruncatedError(what, size, found, path=self.path, tensor=tensor)
        return self.view[offset : offset + size]

    def close(self) -> None:
        self.closed = True
        self.view = memoryview(b"")
        self.data = b""


@dataclass(frozen=True, slots=True)
class ArchiveInfo:
    """What the layout records about the file (see `PytorchMetadata` for the fields)."""

    layout: Layout
    byte_order: str = "little"
    pickle_protocol: int = 0
    format_version: str | None = None
    archive_version: str | None = None
    storage_alignment: int | None = None
    serialization_id: str | None = None
    sys_info: dict[str, object] | None = None


@dataclass(slots=True)
class Loaded:
    """An opened checkpoint: its decoded root object and what to close when done."""

    root: object
    info: ArchiveInfo
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        while self.closers:
            self.closers.pop()()
