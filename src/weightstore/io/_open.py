"""`open_source`: one call that opens any path for random-access reads, choosing the source.

Above both kinds of source (local `_source`, remote `_remote_source`), so that neither imports
the other: a local path never loads the remote machinery's module, nor fsspec.

A file opened to look at its first bytes (`weightstore.locate`) can be handed over to the
reader opened right after (`handing_over`), so telling a format and opening the reader cost
one open of the file, as a URL's probe and reader share one request.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Final

from weightstore.io import is_url
from weightstore.io._engine import direct_source
from weightstore.io._source import READ_MODES, ByteSource, MmapSource, PreadSource, ReadMode

__all__ = ["handed_over", "handing_over", "open_source"]


class _Handover:
    """One open source waiting for the reader that `handing_over` expects; emptied when taken."""

    __slots__ = ("source",)

    def __init__(self, source: ByteSource | None) -> None:
        self.source = source


_HANDOVER: Final[ContextVar[_Handover | None]] = ContextVar("weightstore_handover", default=None)


@contextmanager
def handing_over(source: ByteSource | None) -> Iterator[None]:
    """Within the block, the first mapped open of `source`'s file takes `source` instead of
    opening the file again (`handed_over`); closed at the end when no open took it.
    None: an ordinary block."""
    if source is None:
        yield
        return
    waiting = _Handover(source)
    token = _HANDOVER.set(waiting)
    try:
        yield
    finally:
        _HANDOVER.reset(token)
        if waiting.source is not None:
            waiting.source.close()


def handed_over(path: str) -> MmapSource | None:
    """The mapped source `handing_over` holds for `path`, taken (it is the caller's now), or
    None when none waits for that file."""
    waiting = _HANDOVER.get()
    source = None if waiting is None else waiting.source
    if not isinstance(source, MmapSource) or source.name != path:
        return None
    assert waiting is not None
    waiting.source = None
    return source


def open_source(
    path: str | os.PathLike[str],
    mode: ReadMode = "mmap",
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> ByteSource:
    """Open `path` for random access reads with the given strategy.

    A URL (``s3://``, ``https://``, anything fsspec opens) opens a
    `weightstore.io._remote_source.RemoteSource`, which reads by range requests whatever `mode`
    says; `storage_options` go to its filesystem (docs/remote.md).

    Raises:
        FileMissingError: nothing is at `path` (a `FileNotFoundError`).
        PathIsDirectoryError: `path` is a directory (an `IsADirectoryError`); ``os.open``
            would open one for pread and fail only at the first read.
        InvalidOptionError: a URL, without the ``remote`` extra installed.
    """
    filename = os.fspath(path)
    if mode not in READ_MODES:
        raise ValueError(f"read mode must be one of {READ_MODES}, not {mode!r}")
    if is_url(filename):
        from weightstore.io._remote_source import open_remote  # URLs only: fsspec unloaded

        return open_remote(filename, storage_options)
    if mode == "mmap":
        taken = handed_over(filename)
        return MmapSource(filename) if taken is None else taken
    if mode == "direct":
        return direct_source(filename)
    return PreadSource(filename)
