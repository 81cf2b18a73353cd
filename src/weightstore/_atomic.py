"""Atomic file saves: a file either appears whole or not at all.

The bytes go to a scratch file beside the destination (same directory, so the final rename never
crosses filesystems), which is fsynced and then renamed over the destination; the directory is
fsynced last so the rename survives power loss. On any failure the scratch file is removed and an
existing destination is untouched. Scratch names follow Burn's ``<name>.<pid>-<n>.tmp``.

Without `overwrite`, the final step is a hard link rather than a rename: linking fails if the
destination appeared meanwhile, so a concurrent writer can never be clobbered.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable
from typing import BinaryIO

from weightstore.errors import DestinationExistsError

__all__ = ["write_all", "write_atomic"]

_counter = itertools.count()


def write_all(file: BinaryIO, data: memoryview) -> None:
    """Write every byte of `data`: unbuffered files may accept less than asked per call."""
    while data.nbytes:
        written = file.write(data)
        if written is None or written >= data.nbytes:
            return
        data = data[written:]


def _open_scratch(destination: str) -> tuple[str, int]:
    directory, base = os.path.split(destination)
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_BINARY", 0)
    while True:
        scratch = os.path.join(directory, f"{base}.{os.getpid()}-{next(_counter)}.tmp")
        try:
            return scratch, os.open(scratch, flags, 0o666)
        except FileExistsError:
            continue


def _fsync_directory(directory: str) -> None:
    if os.name != "posix":  # Windows cannot open a directory for fsync
        return
    fd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _link_no_clobber(scratch: str, target: str) -> None:
    try:
        os.link(scratch, target)
    except FileExistsError:
        raise DestinationExistsError(target) from None
    except OSError:  # filesystems without hard links: check, then rename
        if os.path.lexists(target):
            raise DestinationExistsError(target) from None
        os.replace(scratch, target)
        return
    os.unlink(scratch)


def write_atomic(
    destination: str | os.PathLike[str],
    write: Callable[[BinaryIO], None],
    *,
    overwrite: bool = False,
) -> str:
    """Run `write` on a scratch file, then move it onto `destination` in one step.

    Args:
        destination: the final path.
        write: fills the open binary file; any exception it raises aborts the save.
        overwrite: replace an existing file; otherwise `DestinationExistsError`.

    Returns:
        The destination path as a string.
    """
    target = os.fspath(destination)
    if not overwrite and os.path.lexists(target):
        raise DestinationExistsError(target)
    scratch, fd = _open_scratch(target)
    try:
        with os.fdopen(fd, "wb", buffering=0) as file:
            write(file)
            os.fsync(file.fileno())
        if overwrite:
            os.replace(scratch, target)
        else:
            _link_no_clobber(scratch, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(scratch)
        raise
    _fsync_directory(os.path.dirname(target))
    return target
