"""How a local file is read: the I/O engine's choice of mmap, pread or O_DIRECT, and why.

Mapping a file is the cheapest read on a local block device or tmpfs: pages come in by
readahead and tensors are views, no copy. It is the slowest where each page fault costs a
round trip (network and FUSE file systems: NFS, CIFS, Lustre, a FUSE mount of an object store),
and it doubles the page-cache footprint of a file larger than the memory left (the mapped file
and the model's copy compete for the same RAM). `choose_io` decides per file, from the file
system it lies on (``/proc/self/mountinfo``) and its size against ``MemAvailable``:

- ``"auto"``: pread on a network or FUSE file system, and for a file larger than the memory
  available; mmap otherwise.
- ``"mmap"``, ``"pread"``, ``"direct"``: as asked. ``"direct"`` reads with ``O_DIRECT``
  (`DirectSource`), bypassing the page cache, for cold reads of files read once; a file
  system that refuses ``O_DIRECT`` (tmpfs before Linux 6.6, some FUSE mounts) falls back to
  pread, and the reason says so.

The choice and its reason travel to the load report (`ApplyResult.io`), so a slow load can be
told apart from a slow disk. Linux only looks at mounts; elsewhere ``"auto"`` maps.
"""

from __future__ import annotations

import errno
import mmap
import os
import re
import weakref
from typing import TYPE_CHECKING, Final, Literal

from weightstore.base._record import ValueRecord
from weightstore.errors import InvalidOptionError
from weightstore.io._source import PreadSource, ReadMode, _check_range, read_parallel

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "IO_MODES",
    "DirectSource",
    "IoChoice",
    "IoMode",
    "check_io_mode",
    "choose_io",
    "direct_source",
    "filesystem_of",
]

IoMode = Literal["auto", "mmap", "pread", "direct"]
"""What a store or the CLI asks of the engine (`choose_io`)."""
IO_MODES: Final = ("auto", "mmap", "pread", "direct")
"""The values `IoMode` takes, in the order messages list them."""

# File systems where a page fault is a network round trip (or a FUSE daemon's request).
_REMOTE_FILESYSTEMS: Final = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "lustre", "gpfs", "beegfs",
    "glusterfs", "afs", "ocfs2", "gfs2", "virtiofs", "fuse", "fuseblk",
})  # fmt: skip
_ALIGNMENT: Final = 4096  # O_DIRECT's alignment of offsets, sizes and buffers on Linux
_MOUNTINFO: Final = "/proc/self/mountinfo"
_MEMINFO: Final = "/proc/meminfo"
_SMALL_FILE: Final = 256 << 20  # bytes below which free memory is not asked (it costs a read)
_BY_DEVICE: dict[int, str] = {}  # st_dev -> file system type, as mountinfo said it
_ESCAPE: Final = re.compile(r"\\([0-7]{3})")


class IoChoice(ValueRecord):
    """How one file is read: `mode` (the readers' `ReadMode`) and `reason`, one line a person
    can act on ("pread: /mnt/ckpt is on a fuse.sshfs file system, where each page fault of a
    mapping costs a round trip")."""

    mode: ReadMode
    reason: str

    def __str__(self) -> str:
        return f"{self.mode} ({self.reason})"


def check_io_mode(mode: object) -> IoMode:
    """`mode` if it is one of `IO_MODES`.

    Raises:
        InvalidOptionError: any other value.
    """
    if mode not in IO_MODES:
        raise InvalidOptionError(
            f"io must be one of {', '.join(IO_MODES)}, not {mode!r}", option="io"
        )
    return mode  # checked against IO_MODES just above


def choose_io(path: str, requested: IoMode = "auto") -> IoChoice:
    """How to read the local file (or directory of files) at `path` (see the module
    docstring); no file is opened.

    Raises:
        InvalidOptionError: `requested` is not one of `IO_MODES`.
    """
    requested = check_io_mode(requested)
    if requested == "direct":
        if direct_supported(path):
            return IoChoice("direct", "asked for: O_DIRECT reads, the page cache bypassed")
        return IoChoice("pread", "asked for direct, but the file system refuses O_DIRECT")
    if requested == "mmap" or requested == "pread":
        return IoChoice(requested, "asked for")
    filesystem = filesystem_of(path)
    if filesystem is not None and _is_remote(filesystem):
        return IoChoice(
            "pread",
            f"on a {filesystem} file system, where each page fault of a mapping costs a "
            "round trip; large reads cost one each",
        )
    size = _size_of(path)
    available = _memory_available() if size > _SMALL_FILE else None
    if available is not None and size > available:
        return IoChoice(
            "pread",
            f"{size:,} bytes, more than the {available:,} bytes of memory available: a "
            "mapping and the model's copy would both want the page cache",
        )
    where = f"on {filesystem}" if filesystem is not None else "a local file"
    return IoChoice("mmap", f"{where}: tensors are views of the mapping, nothing copied")


def filesystem_of(path: str) -> str | None:
    """The type of the file system `path` lies on (``"ext4"``, ``"fuse.sshfs"``, ``"nfs4"``),
    from the mount that holds it in ``/proc/self/mountinfo``; None where that is not known.

    Found by the path's device number, remembered per device (a store opens in microseconds,
    not the quarter millisecond a parse costs); by the deepest mount point holding the path
    where the device is not a mount's own (a btrfs subvolume)."""
    try:
        device = os.stat(path).st_dev
    except OSError:
        device = None
    if device is not None:
        known = _BY_DEVICE.get(device)
        if known is not None:
            return known
    try:
        with open(_MOUNTINFO, encoding="utf-8", errors="replace") as info:
            mounts = list(_mounts(info))
    except OSError:
        return None
    if device is not None:
        wanted = f"{os.major(device)}:{os.minor(device)}"
        for number, _, fstype in reversed(mounts):  # the last mount of a device is in use
            if number == wanted:
                _BY_DEVICE[device] = fstype
                return fstype
    real = os.path.realpath(path)
    best: tuple[int, str] | None = None
    for _, point, fstype in mounts:
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= best[0]):
            best = (len(point), fstype)
    return None if best is None else best[1]


def _mounts(lines: Iterable[str]) -> Iterable[tuple[str, str, str]]:
    """``(device, mount point, file system type)`` of each mountinfo line, in mount order (a
    later mount over the same point hides the earlier one: `filesystem_of` keeps the last)."""
    for line in lines:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        if after:
            yield fields[2], _unescape(fields[4]), after[0]


def _unescape(field: str) -> str:
    """A mountinfo path with its octal escapes (``\\040`` for a space) decoded."""
    return _ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), field)


def _is_remote(filesystem: str) -> bool:
    return filesystem in _REMOTE_FILESYSTEMS or filesystem.startswith("fuse.")


def _size_of(path: str) -> int:
    """Bytes of the file at `path`, or of the files directly in a directory (a set)."""
    try:
        if os.path.isdir(path):
            with os.scandir(path) as entries:
                return sum(e.stat().st_size for e in entries if e.is_file())
        return os.stat(path).st_size
    except OSError:
        return 0


def _memory_available() -> int | None:
    """``MemAvailable`` in bytes, or None where the kernel does not say."""
    try:
        with open(_MEMINFO, encoding="ascii") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def direct_supported(path: str) -> bool:
    """Whether the file at `path` (or, for a directory, the directory itself) opens with
    ``O_DIRECT``; tmpfs before Linux 6.6 and some FUSE file systems refuse it."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | flag)
    except OSError:
        return False
    os.close(fd)
    return True


def direct_source(path: str) -> PreadSource:
    """A `DirectSource` over `path`, or a plain `PreadSource` where the file system refuses
    ``O_DIRECT`` (``mode="direct"`` then reads as pread, as `choose_io` says)."""
    try:
        return DirectSource(path)
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
            raise
        return PreadSource(path)


class DirectSource(PreadSource):
    """A file read with ``O_DIRECT``: every range comes from the device, not the page cache,
    into a page-aligned buffer of its own (the range widened to 4 KiB boundaries as
    ``O_DIRECT`` requires), and is a writable view of it.

    Raises (from the constructor):
        OSError: the file system refuses ``O_DIRECT`` (`choose_io` checks first).
    """

    def __init__(self, path: str) -> None:
        super().__init__(path)
        try:
            self._direct = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
        except OSError:
            self.close()
            raise
        self._direct_closer = weakref.finalize(self, os.close, self._direct)

    def read(self, offset: int, size: int, what: str, tensor: str | None = None) -> memoryview:
        if not self._closer.alive:
            raise ValueError(f"{self._name}: the file is closed")
        _check_range(self, offset, size, what, tensor)
        if size == 0:
            return memoryview(b"")
        start = offset // _ALIGNMENT * _ALIGNMENT
        length = -(-(offset + size - start) // _ALIGNMENT) * _ALIGNMENT
        buffer = mmap.mmap(-1, length)  # anonymous: page-aligned, as O_DIRECT wants
        view = memoryview(buffer)
        try:
            read_parallel(self._direct, view, start, what, self._name, tensor,
                          needed=offset + size - start)  # fmt: skip
        except OSError as err:
            if err.errno != errno.EINVAL:
                raise
            return super().read(offset, size, what, tensor)  # refused after all: plain
        return view[offset - start : offset - start + size]

    def close(self) -> None:
        """Close both descriptors (the ``O_DIRECT`` one and the plain one); once only."""
        closer = getattr(self, "_direct_closer", None)
        if closer is not None:
            closer()
        super().close()
