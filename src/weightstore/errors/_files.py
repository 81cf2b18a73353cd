"""Errors about where bytes live: files missing or of the wrong kind, saves and remote reads
that fail."""

from __future__ import annotations

import errno
import os
from typing import ClassVar

from weightstore.base._render import bounded_int
from weightstore.errors._base import WeightstoreError


class DestinationExistsError(WeightstoreError, FileExistsError):
    """A save would replace an existing file and overwriting was not allowed.

    Every save refuses to replace a file unless asked: on a store or a record with the builder
    ``.overwrite()``, on a low-level writer (``writer.save``, ``write_file``) with
    ``overwrite=True``. The message names both, the builder first.
    """

    def __init__(self, path: str) -> None:
        super().__init__(
            "file exists; to replace it, call .overwrite() on the store or record "
            "(a writer's save and write_file take overwrite=True)",
            path=path,
        )

    def __str__(self) -> str:
        return WeightstoreError.__str__(self)


class SaveFailedError(WeightstoreError, OSError):
    """A save could not write its file: the disk or a quota is full, the file is over a size
    limit, the filesystem is read-only, the directory is missing. Raised in place of the bare
    `OSError`, which named the scratch file or nothing; this one names the destination.

    Whatever the cause, an existing file at the destination keeps its old bytes and no scratch
    file is left. `errno`, `strerror` and `filename` are set as the builtin's are (``ENOSPC``,
    ``"No space left on device"``, the destination), so `OSError` handlers keep working.

    Attributes:
        path: the destination the save was writing.
        errno: the system error number (`errno.ENOSPC`, `errno.EFBIG`, ...), ``None`` when the
            underlying error carried none.
    """

    # What to do, by errno; an errno not listed gets no advice.
    _ADVICE: ClassVar[dict[int, str]] = {
        errno.ENOSPC: "free some space and save again",
        errno.EDQUOT: "the disk quota is used up; free some space and save again",
        errno.EFBIG: (
            "the file is larger than one file may be here (ulimit -f, or the filesystem's "
            "maximum); raise the limit or save elsewhere"
        ),
        errno.EROFS: "the filesystem is read-only; save elsewhere",
        errno.EACCES: "the directory is not writable; check its permissions",
        errno.ENOENT: "the directory does not exist; create it first",
    }

    def __init__(self, path: str, code: int | None, reason: str | None = None) -> None:
        reason = reason or (os.strerror(code) if code is not None else "unknown error")
        name = errno.errorcode.get(code, str(code)) if code is not None else None
        detail = f"could not save, {reason[:1].lower()}{reason[1:]}"
        detail += f" ({name})" if name else ""
        detail += "; an existing file keeps its old bytes and no partial copy is left"
        advice = self._ADVICE.get(code) if code is not None else None
        super().__init__(f"{detail}; {advice}" if advice else detail, path=path)
        self.errno, self.strerror, self.filename = code, reason, path


class RemoteReadError(WeightstoreError, OSError):
    """A request for bytes of a remote object failed (after the filesystem's own retries), or
    the store answered it with other bytes than asked for.

    Attributes:
        path: the URL.
        offset, size: the byte range asked for.
    """

    def __init__(self, url: str, offset: int, size: int, reason: str) -> None:
        self.offset, self.size = offset, size
        super().__init__(
            f"reading bytes [{bounded_int(offset)}, {bounded_int(offset + size)}) failed: {reason}",
            path=url,
        )


class CredentialsMissingError(WeightstoreError, PermissionError):
    """An object store (S3) found no credentials to sign a request with, or not all of them,
    or a profile that does not exist. The message says where credentials come from, since the
    store's own words ("Unable to locate credentials") name neither the environment variables
    nor the option keys.

    Attributes:
        path: the URL.
        reason: what the store's client said.
    """

    def __init__(self, url: str, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"no S3 credentials ({reason}): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            "(or AWS_PROFILE) in the environment, or pass the storage options key and secret "
            "(on the command line: --storage-option key=ID --storage-option secret=SECRET); "
            "anon=true reads a public bucket, and endpoint_url (or AWS_ENDPOINT_URL_S3) "
            "reaches an S3 API other than AWS",
            path=url,
        )

    def __str__(self) -> str:
        return WeightstoreError.__str__(self)


class FileMissingError(WeightstoreError, FileNotFoundError):
    """A file to read does not exist; raised when it is first read, since the same path may
    be a save target.

    `errno` and `filename` are set as the builtin's are (``ENOENT``, the path), so handlers
    written for `FileNotFoundError` keep working.

    Attributes:
        path: the file that was looked for (after the format's extension rule).
        reason: why no file can be there, when the name itself says so (it holds a NUL or a
            character the filesystem encoding cannot encode); None for a plain missing file.
    """

    def __init__(self, path: str, reason: str | None = None) -> None:
        self.reason = reason
        detail = "does not exist" if reason is None else f"cannot exist: the name {reason}"
        super().__init__(detail, path=path)
        self.errno, self.strerror, self.filename = errno.ENOENT, self.detail, path


class SplitPartMissingError(FileMissingError):
    """A part of a split GGUF model (``<name>-00002-of-00003.gguf``) does not exist: the part
    opened names the others by its own name and ``split.count``, and one is not there (a
    download that stopped early, a part left out of a copy).

    Attributes:
        path: the missing part.
        part: its number, 1-based, as its name spells it.
        count: how many parts the model has.
        opened: the part that was opened, whose name and ``split.count`` point at this one.
    """

    def __init__(self, path: str, *, part: int, count: int, opened: str) -> None:
        self.part, self.count, self.opened = part, count, opened
        self.reason = None
        WeightstoreError.__init__(
            self,
            f"does not exist: it is part {part:,} of the {count:,} parts of the split GGUF "
            f"model {opened} belongs to, and every part is needed (a download or copy that "
            "stopped early?)",
            path=path,
        )
        self.errno, self.strerror, self.filename = errno.ENOENT, self.detail, path


class PathIsDirectoryError(WeightstoreError, IsADirectoryError):
    """A path names a directory where one file is expected: a container reader reads one file.
    A sharded set (a folder of shards and their index) is read through a store
    (``SafetensorsStore.from_file(directory)``) or `weightstore.sets.open_set`.

    `errno` and `filename` are set as the builtin's are (``EISDIR``, the path).

    Attributes:
        path: the directory.
    """

    def __init__(self, path: str) -> None:
        super().__init__(
            "is a directory, not a file; a reader opens one file (open a sharded set in a "
            "directory with a store's from_file or weightstore.sets.open_set)",
            path=path,
        )
        self.errno, self.strerror, self.filename = errno.EISDIR, self.detail, path


class NotAFileError(WeightstoreError, OSError):
    """A path names something other than a regular file where one file is expected: a FIFO
    (opening it would wait for a writer forever), a socket, a device, a symlink loop.
    Refused before it is opened (`weightstore.io._local`); a directory has its own error,
    `PathIsDirectoryError`.

    `filename` is set as the builtin's is (the path); `errno` is ``ELOOP`` for a symlink
    loop, else None (no system error was raised: the file was never opened).

    Attributes:
        path: the path as given.
        kind: what is there instead (``"a FIFO"``, ``"a socket"``, ``"a character device"``,
            ``"a block device"``, ``"a symlink loop"``).
    """

    def __init__(self, path: str, kind: str) -> None:
        self.kind = kind
        super().__init__(f"is {kind}, not a file", path=path)
        loop = kind == "a symlink loop"
        self.errno = errno.ELOOP if loop else None
        self.strerror, self.filename = self.detail, path
