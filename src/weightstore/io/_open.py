"""`open_source`: one call that opens any path for random-access reads, choosing the source.

Above both kinds of source (local `_source`, remote `_remote_source`), so that neither imports
the other: a local path never loads the remote machinery's module, nor fsspec.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from weightstore.io._source import ByteSource, MmapSource, PreadSource, ReadMode
from weightstore.io._url import is_url

__all__ = ["open_source"]


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
    if mode not in ("mmap", "pread"):
        raise ValueError(f"read mode must be 'mmap' or 'pread', not {mode!r}")
    if is_url(filename):
        from weightstore.io._remote_source import open_remote  # URLs only: fsspec unloaded

        return open_remote(filename, storage_options)
    return MmapSource(filename) if mode == "mmap" else PreadSource(filename)
