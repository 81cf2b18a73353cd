"""Saving to URLs: an object appears whole or not at all, and a set's folder on an object store
is listed, read and cleaned as a local directory is.

Object stores have no rename, so the local way (a scratch file renamed over the target) does not
carry over: a copy would send every byte twice. What carries over is that an upload becomes an
object only when it is completed. On the object stores in `_DEFERRED_PROTOCOLS` (S3; GCS and
Azure by fsspec's contract) a save opens the target itself with ``autocommit=False``, streams the
file into it one part at a time and completes the upload at the end (`write_object`); on any
failure it aborts the upload, so the object stays absent or keeps its old bytes. A killed writer
leaves an incomplete multipart upload, which no reader sees; the next save of a set into that
folder aborts those of the set's names (`abort_uploads`), and a bucket lifecycle rule
(``AbortIncompleteMultipartUpload``) removes those of single files.

Memory is bounded by the part size (the filesystem's block size: s3fs's 50 MiB, or
``storage_options={"default_block_size": ...}``, at least 5 MiB on S3): each write is cut at
part boundaries (`_Upload`), so the file's buffer fills to one part, is sent and starts again,
whatever the tensor's size. A save holds the writer's one tensor and about three parts (the
part being filled, the copy s3fs sends, the request's own): 96 MiB in 16 MiB tensors peaked
31 MiB over the baseline with 5 MiB parts, 63 MiB with 16 MiB parts.

Filesystems without such uploads (``memory://``, sftp, ...) get a scratch object
``<name>.<pid>-<n>.tmp`` beside the target, moved onto it at the end.

Without `overwrite` the target must not exist; on S3 the completion is itself conditional
(``If-None-Match: *``), so an object that appeared during the upload is never replaced.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import posixpath
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, BinaryIO, Final, cast

from weightstore.errors import CredentialsMissingError, DestinationExistsError, SaveFailedError
from weightstore.io._fs import credentials_missing, filesystem_for

__all__ = [
    "abort_uploads",
    "delete",
    "exists",
    "forget_cached",
    "is_directory",
    "list_names",
    "read_head",
    "remove",
    "write_object",
]

StorageOptions = Mapping[str, Any] | None

# Protocols whose files honour ``autocommit=False``: nothing is visible until `commit`, and
# `discard` throws the upload away. Anything else takes the scratch-and-move way.
_DEFERRED_PROTOCOLS: Final = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az"})
# S3: its completion can be made conditional on the key being absent (mode "xb"), and its
# incomplete uploads can be listed and aborted.
_S3_PROTOCOLS: Final = frozenset({"s3", "s3a"})

_counter = itertools.count()


def write_object(
    url: str,
    write: Callable[[BinaryIO], None],
    *,
    overwrite: bool = False,
    storage_options: StorageOptions = None,
) -> str:
    """Run `write` on an upload to `url` and make it the object there in one step.

    Args:
        url: the object to write.
        write: fills the open binary file; any exception it raises aborts the upload.
        overwrite: replace an existing object; otherwise `DestinationExistsError`.
        storage_options: passed to the filesystem (`weightstore.io._fs.filesystem_for`).

    Returns:
        `url`.

    Raises:
        DestinationExistsError: the object exists (or appeared during the upload, on S3) and
            `overwrite` is false.
        SaveFailedError: the store refused or failed a request; nothing was committed.
    """
    fs, path = filesystem_for(url, storage_options)
    if not overwrite and _exists(fs, path, url):
        raise DestinationExistsError(url)
    protocols = _protocols(fs)
    if protocols & _DEFERRED_PROTOCOLS:
        conditional = not overwrite and bool(protocols & _S3_PROTOCOLS)
        _write_deferred(fs, path, url, write, "xb" if conditional else "wb")
    else:
        _write_moved(fs, path, url, write, overwrite)
    return url


def _write_deferred(
    fs: Any, path: str, url: str, write: Callable[[BinaryIO], None], mode: str
) -> None:
    """Stream into an upload that only a final `commit` turns into the object."""
    with _store_errors(url):
        file = fs.open(path, mode, autocommit=False)
    try:
        write(cast(BinaryIO, _Upload(file, url)))
        with _store_errors(url):
            file.close()  # uploads the last part; the object does not exist yet
            file.commit()
    except BaseException:
        _abandon(file)
        raise


def _abandon(file: Any) -> None:
    """Throw an upload away without sending more: `discard` aborts what was uploaded, and
    marking the file closed stops its finaliser from flushing the rest (which would start and
    fill a new upload that nobody aborts). Errors here would hide the failure being reported;
    an upload left behind is invisible, and the next save of its set aborts it."""
    with contextlib.suppress(Exception):
        file.discard()
    with contextlib.suppress(AttributeError):
        file.closed = True


def _write_moved(
    fs: Any, path: str, url: str, write: Callable[[BinaryIO], None], overwrite: bool
) -> None:
    """Write a scratch object beside the target, then move it onto the target."""
    scratch = f"{path}.{os.getpid()}-{next(_counter)}.tmp"
    try:
        with _store_errors(url):
            file = fs.open(scratch, "wb")
        try:
            write(cast(BinaryIO, _Upload(file, url)))
        except BaseException:
            with contextlib.suppress(Exception):
                file.close()
            raise
        with _store_errors(url):
            file.close()
        if not overwrite and _exists(fs, path, url):
            raise DestinationExistsError(url)
        with _store_errors(url):
            fs.mv(scratch, path)
    except BaseException:
        with contextlib.suppress(Exception):
            fs.rm_file(scratch)
        raise


class _Upload(io.RawIOBase):
    """The open upload as the `write` callback sees it. Each write is cut where a part ends, so
    the file's buffer fills to exactly one part, is sent, and starts again empty: the buffer
    never holds more than a part whatever the tensor's size. A store error becomes
    `SaveFailedError` naming the URL."""

    def __init__(self, file: Any, url: str) -> None:
        super().__init__()
        self._file = file
        self._url = url
        self._part_size = int(getattr(file, "blocksize", 0) or 0)  # 0: the file has no parts
        self._position = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any, /) -> int:
        """Send all of `data`, part by part; returns its length."""
        view = memoryview(data).cast("B")
        total = view.nbytes
        while view.nbytes:
            room = view.nbytes
            if self._part_size:
                room = min(room, self._part_size - self._position % self._part_size)
            with _store_errors(self._url):
                self._file.write(view[:room])
            self._position += room
            view = view[room:]
        return total


@contextlib.contextmanager
def _store_errors(url: str) -> Iterator[None]:
    """Re-raise the store's `OSError` as `SaveFailedError` naming `url` (a conditional
    completion that found the object there as `DestinationExistsError`)."""
    try:
        yield
    except (DestinationExistsError, SaveFailedError):
        raise
    except FileExistsError:
        raise DestinationExistsError(url) from None
    except OSError as err:
        raise SaveFailedError(url, err.errno, err.strerror or str(err)) from err
    except NotImplementedError as err:  # http(s): the filesystem cannot write at all
        raise SaveFailedError(url, None, "this URL's filesystem cannot write objects") from err
    except Exception as err:
        missing = credentials_missing(url, err)
        if missing is None:
            raise
        raise missing from err


@contextlib.contextmanager
def _credentials_checked(url: str) -> Iterator[None]:
    """Re-raise the S3 client's missing-credentials exception (no `OSError`, so no handler
    here would see it) as `CredentialsMissingError` naming `url`; anything else as it is."""
    try:
        yield
    except Exception as err:
        missing = credentials_missing(url, err)
        if missing is None:
            raise
        raise missing from err


def _protocols(fs: Any) -> frozenset[str]:
    protocol = fs.protocol
    return frozenset([protocol] if isinstance(protocol, str) else protocol)


def _exists(fs: Any, path: str, url: str) -> bool:
    """Whether an object is at `path`, asked of the store (a listing another process made
    stale in this process's cache is dropped first)."""
    with _store_errors(url):
        fs.invalidate_cache(path)
        return bool(fs.exists(path))


# -- a set's folder ------------------------------------------------------------------------------


def list_names(url: str, storage_options: StorageOptions = None) -> list[str] | None:
    """The names of the objects directly in the folder `url` (fresh, not from a cache); empty
    when there is none, None when it cannot be listed."""
    fs, path = filesystem_for(url, storage_options)
    fs.invalidate_cache(path)
    try:
        with _credentials_checked(url):
            entries = fs.ls(path, detail=True)
    except FileNotFoundError:
        return []
    except CredentialsMissingError:
        raise
    except OSError:
        return None
    files = (entry["name"] for entry in entries if entry.get("type") == "file")
    return [posixpath.basename(name.rstrip("/")) for name in files]


def forget_cached(url: str, storage_options: StorageOptions = None) -> None:
    """Drop what this process's filesystem has cached about the folder `url` (s3fs keeps
    listings), so the next questions about it are asked of the store: another process may
    have saved there since. Makes no request."""
    fs, path = filesystem_for(url, storage_options)
    fs.invalidate_cache(path)


def exists(url: str, storage_options: StorageOptions = None) -> bool:
    """Whether an object is at `url`. After `list_names` of its folder, S3 answers from that
    listing without a request."""
    fs, path = filesystem_for(url, storage_options)
    with _store_errors(url):
        return bool(fs.exists(path))


def is_directory(url: str, storage_options: StorageOptions = None) -> bool:
    """Whether `url` is a folder holding objects (a prefix, on object stores)."""
    fs, path = filesystem_for(url, storage_options)
    with _store_errors(url):
        return bool(fs.isdir(path))


def read_head(url: str, size: int, storage_options: StorageOptions = None) -> bytes | None:
    """The object's first `size` bytes (all of it when shorter) in one request; None when
    there is no object at `url`.

    Raises:
        OSError: the store failed the request.
    """
    fs, path = filesystem_for(url, storage_options)
    try:
        with _credentials_checked(url):
            data: bytes = fs.cat_file(path, start=0, end=size)
    except FileNotFoundError:
        return None
    return data


def delete(url: str, storage_options: StorageOptions = None) -> None:
    """Delete the object at `url`; none there is no error.

    Raises:
        SaveFailedError: the store refused or failed the request.
    """
    fs, path = filesystem_for(url, storage_options)
    try:
        with _credentials_checked(url):
            fs.rm_file(path)
    except FileNotFoundError:
        return
    except CredentialsMissingError:
        raise
    except OSError as err:
        raise SaveFailedError(url, err.errno, err.strerror or str(err)) from err


def remove(url: str, names: Iterable[str], storage_options: StorageOptions = None) -> None:
    """Delete the objects `names` in the folder `url` (one request per thousand on S3).
    Housekeeping: an object that cannot be deleted is left for the next save."""
    fs, path = filesystem_for(url, storage_options)
    paths = [posixpath.join(path, name) for name in names]
    if paths:
        with contextlib.suppress(OSError), _credentials_checked(url):
            fs.rm(paths)


def abort_uploads(
    url: str, keep: Callable[[str], bool], storage_options: StorageOptions = None
) -> int:
    """Abort the incomplete multipart uploads of killed saves to objects directly in the
    folder `url` whose names `keep` accepts (S3 only: elsewhere there are none to list).
    Housekeeping: a failure leaves them for the next save.

    Returns:
        How many were aborted.
    """
    fs, path = filesystem_for(url, storage_options)
    if not _protocols(fs) & _S3_PROTOCOLS:
        return 0
    bucket, key, _ = fs.split_path(path)
    prefix = f"{key.rstrip('/')}/" if key else ""
    aborted = 0
    with contextlib.suppress(OSError), _credentials_checked(url):
        listing = fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=prefix)
        for upload in listing.get("Uploads", []):
            name = upload["Key"][len(prefix) :]
            if "/" in name or not keep(name):
                continue
            fs.call_s3(
                "abort_multipart_upload",
                Bucket=bucket,
                Key=upload["Key"],
                UploadId=upload["UploadId"],
            )
            aborted += 1
    return aborted
