"""Atomic file saves: a file appears whole or not at all, and a killed save leaves nothing.

The bytes are held in one of two ways until they are complete:

* **Anonymous** (Linux, a filesystem with ``O_TMPFILE``, ``/proc`` mounted): a file with no
  name in the destination's directory. If the process dies, by SIGKILL too, the kernel frees
  it, so nothing is left whatever its size. Once written and fsynced it is named by
  ``linkat`` of ``/proc/self/fd/N``: onto the destination itself without `overwrite` (linking
  fails if the destination appeared meanwhile, so a concurrent writer is never clobbered), and
  with `overwrite` onto a fresh scratch name that is at once renamed over the destination (a
  rename is the only atomic replace), so a visible scratch file exists only between two calls.
* **Named** (elsewhere, and on filesystems without ``O_TMPFILE``, such as NFS or FAT): a scratch
  file ``<name>.<pid>-<n>.tmp`` (Burn's naming) beside the destination, so the final rename or
  link never crosses filesystems. A killed save leaves it behind; the next save to the same
  name removes the scratch files of writers that are gone (`_remove_stale_scratch`).
* **A URL** (``s3://``...): an object store has no rename, but an upload becomes an object only
  when completed, so the bytes stream into an upload that is completed at the end or aborted
  (`weightstore.io._remote_write`).

Either way the file is fsynced before it is named and the directory after, so the name survives
power loss. With ``durable=False`` both fsyncs are skipped, for callers who can rewrite the file
after a power loss: the save stays atomic against a crash of the process (readers see the old
file or the whole new one), but after a power loss or kernel crash the new name may hold a file
whose bytes never reached the disk. On any failure an existing destination keeps its old bytes
and no scratch file remains. An `OSError` of the destination's own I/O (disk full, file-size
limit, read-only filesystem, missing directory) becomes `SaveFailedError` naming the
destination; whatever the `write` callback raises for its own reasons (a source file that
cannot be read) passes through.
"""

from __future__ import annotations

import contextlib
import errno
import io
import itertools
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, Final

from weightstore.errors import DestinationExistsError, SaveFailedError, WeightstoreError
from weightstore.io import is_url

if sys.platform != "win32":
    import fcntl
if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

__all__ = ["write_all", "write_atomic"]

_O_TMPFILE: Final = getattr(os, "O_TMPFILE", 0)  # Linux 3.11+; 0 where Python lacks it
# Errors of open(O_TMPFILE) that mean "not here" rather than "cannot save": the filesystem has
# no tmpfile operation (EOPNOTSUPP), or a kernel before 3.11 read the flag as O_DIRECTORY and
# refused to open a directory for writing (EISDIR).
_NO_TMPFILE: Final = frozenset({errno.EOPNOTSUPP, errno.ENOTSUP, errno.EISDIR})
_PROC_FD: Final = "/proc/self/fd"  # an anonymous file is linked through its magic link here
_SCRATCH_MODE: Final = 0o666  # as open() creates files; the umask applies

_counter = itertools.count()
# st_dev of filesystems where an anonymous file was linked: probed once per process each.
_linkable_devices: dict[int, bool] = {}


def write_all(file: BinaryIO, data: memoryview) -> None:
    """Write every byte of `data`: unbuffered files may accept less than asked per call."""
    while data.nbytes:
        written = file.write(data)
        if written is None or written >= data.nbytes:
            return
        data = data[written:]


@dataclass
class _Scratch:
    """An open scratch file. `dir_fd` is the destination's directory for an anonymous file
    (``None`` for a named one); `name` is the visible scratch path while there is one (relative
    to `dir_fd` when that is set), so a failure knows what to remove."""

    fd: int
    dir_fd: int | None
    name: str | None


class _DestinationFile(io.FileIO):
    """The scratch file as the `write` callback sees it: an error writing it (disk full, a size
    limit) becomes `SaveFailedError` naming the destination. Closing it leaves the descriptor to
    `_Scratch`'s owner."""

    def __init__(self, fd: int, destination: str) -> None:
        super().__init__(fd, "w", closefd=False)
        self._destination = destination

    def write(self, data: ReadableBuffer, /) -> int:
        """As `io.FileIO.write`, raising `SaveFailedError` for an `OSError`."""
        try:
            return os.write(self.fileno(), data)
        except OSError as err:
            raise SaveFailedError(self._destination, err.errno, err.strerror or str(err)) from err


@contextlib.contextmanager
def _save_errors(destination: str) -> Iterator[None]:
    """Re-raise an `OSError` of the destination's own I/O as `SaveFailedError`."""
    try:
        yield
    except WeightstoreError:
        raise  # DestinationExistsError is an OSError too, and already says what happened
    except OSError as err:
        raise SaveFailedError(destination, err.errno, err.strerror or str(err)) from err


def write_atomic(
    destination: str | os.PathLike[str],
    write: Callable[[BinaryIO], None],
    *,
    overwrite: bool = False,
    durable: bool = True,
    storage_options: Mapping[str, Any] | None = None,
) -> str:
    """Run `write` on a scratch file, then give it the destination's name in one step.

    A URL (`weightstore.io.is_url`) is written as an object store's upload, completed only
    when `write` returns (`weightstore.io._remote_write`): the object appears whole or not at all.

    Args:
        destination: the final path, or a URL.
        write: fills the open binary file; any exception it raises aborts the save.
        overwrite: replace an existing file; otherwise `DestinationExistsError`.
        durable: fsync the file before naming it and its directory after, so the save
            survives power loss; false skips both and keeps only the atomicity.
        storage_options: for a URL, passed to its filesystem (``{"endpoint_url": ...}``).

    Returns:
        The destination path as a string.

    Raises:
        DestinationExistsError: the file exists (or appeared during the save) and `overwrite`
            is false.
        SaveFailedError: writing, syncing or naming the file failed (disk full, file-size
            limit, ...); the destination is untouched.
    """
    target = os.fspath(destination)
    if is_url(target):  # an object store's completed upload is durable: `durable` is moot
        from weightstore.io._remote_write import write_object

        return write_object(target, write, overwrite=overwrite, storage_options=storage_options)
    if not overwrite and os.path.lexists(target):
        raise DestinationExistsError(target)
    _remove_stale_scratch(target)
    with _save_errors(target):
        scratch = _open_anonymous(target)
        if scratch is None:
            scratch = _open_named(target)
    try:
        with _DestinationFile(scratch.fd, target) as file:
            write(file)
        with _save_errors(target):
            if durable:
                os.fsync(scratch.fd)
            _publish(scratch, target, overwrite)
        if durable:
            _fsync_directory(scratch, target)
    finally:
        _discard(scratch)
    return target


# -- creating the scratch file --------------------------------------------------------------------


def _open_anonymous(destination: str) -> _Scratch | None:
    """A nameless file in the destination's directory, or ``None`` where there is none."""
    if not _O_TMPFILE or not os.path.isdir(_PROC_FD):
        return None
    directory, base = os.path.split(destination)
    dir_fd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = _open_tmpfile(dir_fd) if _can_link_anonymous(dir_fd, base) else None
    except BaseException:
        os.close(dir_fd)
        raise
    if fd is None:
        os.close(dir_fd)
        return None
    _hold_lock(fd)
    return _Scratch(fd, dir_fd, None)


def _open_tmpfile(dir_fd: int) -> int | None:
    try:
        return os.open(".", _O_TMPFILE | os.O_WRONLY, _SCRATCH_MODE, dir_fd=dir_fd)
    except OSError as err:
        if err.errno in _NO_TMPFILE:
            return None
        raise


def _can_link_anonymous(dir_fd: int, base: str) -> bool:
    """Whether an anonymous file in this directory can be given a name. Some sandboxes allow
    ``O_TMPFILE`` but refuse ``linkat`` through /proc; finding that out after writing a whole
    model would be too late, so an empty file is linked and unlinked first, once per
    filesystem (a failed probe is not remembered: it may have been a passing condition)."""
    device = os.fstat(dir_fd).st_dev
    if _linkable_devices.get(device):
        return True
    fd = _open_tmpfile(dir_fd)
    if fd is None:
        return False
    try:
        name = _link_fresh_name(fd, dir_fd, base)
        os.unlink(name, dir_fd=dir_fd)
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EROFS):
            raise  # the named way would fail the same: report it as the save's failure
        return False
    finally:
        os.close(fd)
    _linkable_devices[device] = True
    return True


def _open_named(destination: str) -> _Scratch:
    directory, base = os.path.split(destination)
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_BINARY", 0)
    while True:
        name = os.path.join(directory, _scratch_name(base))
        try:
            fd = os.open(name, flags, _SCRATCH_MODE)
        except FileExistsError:
            continue
        _hold_lock(fd)
        return _Scratch(fd, None, name)


def _scratch_name(base: str) -> str:
    return f"{base}.{os.getpid()}-{next(_counter)}.tmp"


def _hold_lock(fd: int) -> None:
    """Mark a scratch file as in use for `_remove_stale_scratch`: a lock dies with its process,
    and is seen by processes whose pid namespace cannot see the writer (other containers,
    other NFS clients)."""
    if sys.platform != "win32":
        with contextlib.suppress(OSError):  # no locks on this filesystem: the pid test remains
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


# -- naming it ------------------------------------------------------------------------------------


def _publish(scratch: _Scratch, destination: str, overwrite: bool) -> None:
    """Give the written file the destination's name, replacing it only when `overwrite`."""
    if scratch.dir_fd is None:
        assert scratch.name is not None  # a named scratch keeps its name until published
        if overwrite:
            os.replace(scratch.name, destination)
        else:
            _link_no_clobber(scratch.name, destination)
        scratch.name = None
        return
    base = os.path.basename(destination)
    if overwrite:
        scratch.name = _link_fresh_name(scratch.fd, scratch.dir_fd, base)
        os.replace(scratch.name, base, src_dir_fd=scratch.dir_fd, dst_dir_fd=scratch.dir_fd)
        scratch.name = None
        return
    try:
        _link_anonymous(scratch.fd, scratch.dir_fd, base)
    except FileExistsError:
        raise DestinationExistsError(destination) from None


def _link_anonymous(fd: int, dir_fd: int, name: str) -> None:
    # `dst_dir_fd` makes CPython call linkat(..., AT_SYMLINK_FOLLOW). Without a dir_fd argument
    # it calls link(2) whatever `follow_symlinks` says (seen on CPython 3.10 to 3.13), which
    # tries to link the /proc magic link itself and fails with EXDEV.
    os.link(f"{_PROC_FD}/{fd}", name, dst_dir_fd=dir_fd, follow_symlinks=True)


def _link_fresh_name(fd: int, dir_fd: int, base: str) -> str:
    """Link the anonymous file `fd` to a new scratch name in `dir_fd` and return that name."""
    while True:
        name = _scratch_name(base)
        try:
            _link_anonymous(fd, dir_fd, name)
        except FileExistsError:
            continue
        return name


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


def _fsync_directory(scratch: _Scratch, destination: str) -> None:
    """Make the new name durable: fsync the directory that holds it."""
    if scratch.dir_fd is not None:
        os.fsync(scratch.dir_fd)
        return
    if os.name != "posix":  # Windows cannot open a directory for fsync
        return
    fd = os.open(os.path.dirname(destination) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _discard(scratch: _Scratch) -> None:
    """Close the scratch file and remove its visible name if a failure left one."""
    if scratch.name is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(scratch.name, dir_fd=scratch.dir_fd)
    os.close(scratch.fd)
    if scratch.dir_fd is not None:
        os.close(scratch.dir_fd)


# -- leftovers of killed saves --------------------------------------------------------------------


def _remove_stale_scratch(destination: str) -> None:
    """Remove the scratch files ``<name>.<pid>-<n>.tmp`` that killed saves to `destination`
    left. One is stale when both hold: no process `pid` exists here, and nobody holds the lock
    every writer keeps on its scratch file (`_hold_lock`). Other destinations' scratch files
    are left alone: their names could belong to anything.

    Housekeeping only, so it never fails a save: a directory that cannot be listed is the
    save's to report, and a file that cannot be removed is left for a later save.
    """
    if os.name != "posix":  # no safe liveness test: os.kill(pid, 0) terminates it on Windows
        return
    directory, base = os.path.split(destination)
    pattern = re.compile(re.escape(base) + r"\.(\d+)-\d+\.tmp")
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return
    for name in names:
        found = pattern.fullmatch(name)
        if found is not None and not _pid_alive(int(found[1])):
            _remove_if_unlocked(os.path.join(directory, name))


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return True  # not a writer's pid; kill(0, 0) would test our own process group
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process, or not a pid at all: leave the file alone
    return True


def _remove_if_unlocked(path: str) -> None:
    try:  # O_NONBLOCK: a FIFO under a scratch name must not hang the save
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return  # gone already, a symlink, or not ours to read
    try:
        probed = os.fstat(fd)
        if not stat.S_ISREG(probed.st_mode) or _locked(fd):
            return
        current = os.stat(path, follow_symlinks=False)
        if (current.st_dev, current.st_ino) == (probed.st_dev, probed.st_ino):
            os.unlink(path)  # still the file that was tested
    except OSError:
        pass  # removed meanwhile by another save, or not ours to remove
    finally:
        os.close(fd)


def _locked(fd: int) -> bool:
    if sys.platform == "win32":
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False  # no locks on this filesystem: the pid test decides alone
    return False
