"""A read-only FUSE file system over a folder, each read request delayed by a fixed latency:
the network file system of the I/O engine's tests (`test_engine.py`), as NFS or a FUSE mount of
an object store behaves (every request pays a round trip). Run as a process of its own:

    python -m tests.io._fuse_passthrough ROOT MOUNTPOINT LATENCY_MS

It serves ROOT's files under MOUNTPOINT through mfusepy (libfuse 3), and a file ``.requests``
at its root whose text is ``<read requests> <bytes read> <most requests in flight at once>``
so far, so a test counts what a load asked of it.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import threading
import time
from typing import Any

import mfusepy

_STATS = "/.requests"


class Passthrough(mfusepy.Operations):  # type: ignore[misc]
    """ROOT's files, read only, each `read` after `latency` seconds."""

    use_ns = True  # times as nanoseconds (mfusepy's float seconds are deprecated)

    def __init__(self, root: str, latency: float) -> None:
        self.root, self.latency = root, latency
        self.requests = self.bytes = self.in_flight = self.most_in_flight = 0
        self.counting = threading.Lock()

    def _real(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _stats(self) -> bytes:
        with self.counting:
            counts = (self.requests, self.bytes, self.most_in_flight)
            return (" ".join(map(str, counts)) + "\n").encode().ljust(64)

    def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
        if path == _STATS:
            now = time.time()
            return {"st_mode": stat.S_IFREG | 0o444, "st_nlink": 1, "st_size": 64,
                    "st_mtime": now, "st_atime": now, "st_ctime": now}  # fmt: skip
        try:
            found = os.lstat(self._real(path))
        except OSError as err:
            raise mfusepy.FuseOSError(err.errno) from None
        keys = ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid", "st_atime", "st_mtime",
                "st_ctime")  # fmt: skip
        return {key: getattr(found, key) for key in keys}

    def readdir(self, path: str, fh: Any) -> list[str]:
        return [".", "..", *os.listdir(self._real(path))]

    def open(self, path: str, flags: int) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR):
            raise mfusepy.FuseOSError(errno.EROFS)
        return 0 if path == _STATS else os.open(self._real(path), os.O_RDONLY)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        if path == _STATS:
            return self._stats()[offset : offset + size]
        with self.counting:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(self.latency)
        data = os.pread(fh, size, offset)
        with self.counting:
            self.in_flight -= 1
            self.requests += 1
            self.bytes += len(data)
        return data

    def release(self, path: str, fh: int) -> int:
        if path != _STATS:
            os.close(fh)
        return 0

    def statfs(self, path: str) -> dict[str, Any]:
        found = os.statvfs(self.root)
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files",
                "f_flag", "f_frsize", "f_namemax")  # fmt: skip
        return {key: getattr(found, key) for key in keys}


def main() -> None:
    root, mountpoint, latency_ms = sys.argv[1], sys.argv[2], float(sys.argv[3])
    operations = Passthrough(root, latency_ms / 1000)
    mfusepy.FUSE(operations, mountpoint, foreground=True, ro=True, nothreads=False,
                 fsname="weightstore-test", subtype="passthrough")  # fmt: skip


if __name__ == "__main__":
    main()
