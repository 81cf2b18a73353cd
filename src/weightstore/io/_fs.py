"""URLs: telling one from a local path, the fsspec filesystem that serves it, and the requests.

Every store, reader and save that takes a path also takes a URL (``s3://bucket/model.safetensors``,
``https://host/model.bpk``, anything fsspec opens). This module is the one place that imports
fsspec, and only when a URL is met: ``import weightstore`` and every local path stay free of it,
and without the ``remote`` extra a URL fails with an error that names the extra.

Reads go through two calls (`weightstore.io._remote_source` plans them):

- `read_first`: an object's first bytes *and its size* in one request. The size comes from the
  response's ``Content-Range`` (S3 and HTTP, through the filesystem's own session, so its
  credentials, retries and endpoint apply); other filesystems answer with two (``info``, then
  the range).
- `read_range`: one byte range, through ``fs.cat_file(path, start=, end=)`` (by keyword: s3fs
  takes ``version_id`` second), so retries are the filesystem's.

Both turn the store's failures into typed errors that carry the URL and the range. A client
that finds no credentials fails every request with botocore's own exception, which is no
`OSError`: `credentials_missing` names it, and every call into a filesystem here and in
`weightstore.io._remote_write` turns it into `CredentialsMissingError`, whose message says
where credentials come from.

S3 options take AWS's spellings too (`AWS_OPTION_NAMES`: ``aws_access_key_id`` for s3fs's
``key``...): they are what AWS users type, and s3fs would refuse them with a ``TypeError`` from
deep inside its session.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from weightstore.errors import (
    CredentialsMissingError,
    FileMissingError,
    InvalidOptionError,
    RemoteReadError,
    WeightstoreError,
)

__all__ = [
    "AWS_OPTION_NAMES",
    "READ_OPTIONS_KEY",
    "RemoteReadError",
    "credentials_missing",
    "filesystem_for",
    "read_first",
    "read_range",
    "split_options",
]

# The key of `storage_options` that holds weightstore's own read settings (block size,
# concurrency: `weightstore.io._remote_source.ReadTuning`); it never reaches fsspec.
READ_OPTIONS_KEY: Final = "weightstore"

# AWS's names for S3 options (boto3's keywords, the CLI's config keys) -> s3fs's.
AWS_OPTION_NAMES: Final = {
    "aws_access_key_id": "key",
    "aws_secret_access_key": "secret",
    "aws_session_token": "token",
    "profile_name": "profile",
    "endpoint": "endpoint_url",
}
_S3_SCHEMES: Final = ("s3://", "s3a://")
# botocore's exceptions for credentials it cannot find or use (matched by name: botocore is
# the remote extra's, never imported here).
_CREDENTIALS_ERRORS: Final = frozenset(
    {"NoCredentialsError", "PartialCredentialsError", "ProfileNotFound", "NoAuthTokenError"}
)


def filesystem_for(url: str, storage_options: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """The fsspec filesystem serving `url`, and the path it knows the object by.

    Args:
        url: a URL (`is_url`).
        storage_options: passed to the filesystem (``{"endpoint_url": ...}`` for an S3 API
            elsewhere than AWS, credentials, ``{"anon": True}``).

    Raises:
        InvalidOptionError: fsspec, or the filesystem's own package (s3fs for ``s3://``), is
            not installed; the message names the extra that brings it.
    """
    try:
        import fsspec.core
    except ImportError:
        raise InvalidOptionError(
            f"{url}: reading and writing URLs needs fsspec: pip install 'weightstore[remote]'",
            option="url",
        ) from None
    options, _ = split_options(storage_options)
    if url.lower().startswith(_S3_SCHEMES):
        options = _s3fs_names(options)
    try:
        fs, path = fsspec.core.url_to_fs(url, **options)
    except ImportError as err:  # the scheme's own package (s3fs, gcsfs, aiohttp) is missing
        raise InvalidOptionError(
            f"{url}: this URL's filesystem needs a package that is not installed ({err}); "
            "pip install 'weightstore[remote]' brings s3fs and aiohttp",
            option="url",
        ) from None
    return fs, path


def _s3fs_names(options: dict[str, Any]) -> dict[str, Any]:
    """`options` with AWS's names (`AWS_OPTION_NAMES`) turned into s3fs's.

    Raises:
        InvalidOptionError: both names of one option are given.
    """
    renamed = dict(options)
    for aws_name, s3fs_name in AWS_OPTION_NAMES.items():
        if aws_name not in renamed:
            continue
        if s3fs_name in renamed:
            raise InvalidOptionError(
                f"storage options {aws_name!r} and {s3fs_name!r} are one option; give one",
                option="storage_options",
            )
        renamed[s3fs_name] = renamed.pop(aws_name)
    return renamed


def credentials_missing(url: str, err: BaseException) -> CredentialsMissingError | None:
    """`err` as `CredentialsMissingError` naming `url` when it is the S3 client's report of
    missing or unusable credentials; None for any other error."""
    names = {kind.__name__ for kind in type(err).__mro__}
    if not names & _CREDENTIALS_ERRORS:
        return None
    return CredentialsMissingError(url, _reason(err))


def split_options(
    storage_options: Mapping[str, Any] | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`storage_options` split into what the filesystem gets and weightstore's own read settings
    (the mapping under `READ_OPTIONS_KEY`).

    Raises:
        InvalidOptionError: the read settings are not a mapping.
    """
    options = dict(storage_options or {})
    ours = options.pop(READ_OPTIONS_KEY, None) or {}
    if not isinstance(ours, Mapping):
        raise InvalidOptionError(
            f"storage_options[{READ_OPTIONS_KEY!r}] must be a mapping of read settings, "
            f"not {type(ours).__name__}",
            option="storage_options",
        )
    return options, dict(ours)


def read_range(fs: Any, path: str, url: str, offset: int, size: int) -> bytes:
    """Exactly `size` bytes of the object from `offset` (the caller has checked the range lies
    inside it), in one request.

    Raises:
        FileMissingError: the object is gone.
        RemoteReadError: the request failed, or returned another length (the object changed).
    """
    try:
        data = fs.cat_file(path, start=offset, end=offset + size)
    except FileNotFoundError as err:
        raise FileMissingError(url) from err
    except Exception as err:  # OSError, or aiohttp's own errors; the filesystem's retries are spent
        raise credentials_missing(url, err) or RemoteReadError(
            url, offset, size, _reason(err)
        ) from err
    if len(data) != size:
        raise RemoteReadError(
            url, offset, size,
            f"the store returned {len(data):,} bytes; the object changed or the server "
            "ignores range requests",
        )  # fmt: skip
    return bytes(data)


def read_first(fs: Any, path: str, url: str, size: int) -> tuple[bytes, int]:
    """The object's first `size` bytes (all of it when shorter) and its total size, in one
    request where the filesystem is known (S3, HTTP), else two.

    Raises:
        FileMissingError: no object is at `url`.
        RemoteReadError: the request failed, or an HTTP server ignores ranges on an object
            larger than `size` (reading it would download all of it).
    """
    first = _FIRST_READERS.get(_protocol(fs))
    try:
        if first is not None:
            found = first(fs, path, url, size)
            if found is not None:
                return found
        total = int(fs.size(path))
        return (read_range(fs, path, url, 0, min(size, total)) if total else b""), total
    except WeightstoreError:
        raise
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as err:
        raise FileMissingError(url) from err
    except Exception as err:  # OSError, or aiohttp's own errors (a 403, a 500)
        raise credentials_missing(url, err) or RemoteReadError(url, 0, size, _reason(err)) from err


def _reason(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    return text if len(text) <= 300 else text[:300] + "..."


def _protocol(fs: Any) -> str:
    protocol = getattr(fs, "protocol", "")
    return protocol if isinstance(protocol, str) else protocol[0]


_CONTENT_RANGE: Final = re.compile(r"bytes (?:\d+-\d+|\*)/(\d+)")


def _total_of(content_range: object) -> int | None:
    """The object size a ``Content-Range`` header states (``bytes 0-99/4096``), else None."""
    match = _CONTENT_RANGE.fullmatch(content_range.strip()) if isinstance(
        content_range, str) else None  # fmt: skip
    return None if match is None else int(match.group(1))


def _s3_first(fs: Any, path: str, url: str, size: int) -> tuple[bytes, int] | None:
    """One ranged GetObject through s3fs's own client (credentials, endpoint, retries): the
    bytes and, from its ``ContentRange``, the object's size. None asks for the generic way
    (an empty object, whose every range S3 refuses)."""
    import fsspec.asyn

    bucket, key, version = fs.split_path(path)
    if not key:
        raise FileMissingError(url)
    extra = {"VersionId": version} if version else {}

    async def get() -> tuple[bytes, int | None]:
        response = await fs._call_s3(
            "get_object", Bucket=bucket, Key=key, Range=f"bytes=0-{max(size, 1) - 1}", **extra
        )
        body = response["Body"]
        try:
            data = await body.read()
        finally:
            body.close()
        return data, _total_of(response.get("ContentRange"))

    try:
        data, total = fsspec.asyn.sync(fs.loop, get)
    except FileNotFoundError:
        raise
    except OSError:
        return None  # an empty object (InvalidRange), or a store without ranges: ask `info`
    if total is None:
        return None
    return data[:size], total


def _http_first(fs: Any, path: str, url: str, size: int) -> tuple[bytes, int] | None:
    """One ranged GET through fsspec's HTTP session: the bytes, and the size from the 206's
    ``Content-Range``. A 200 (ranges ignored) is read no further than `size` bytes: the whole
    object when it is that small, else `RemoteReadError` (every range would download it)."""
    import fsspec.asyn

    async def get() -> tuple[bytes, int] | None:
        session = await fs.set_session()
        options = dict(fs.kwargs)
        headers = dict(options.pop("headers", None) or {})
        headers["Range"] = f"bytes=0-{max(size, 1) - 1}"
        async with session.get(fs.encode_url(path), headers=headers, **options) as response:
            fs._raise_not_found_for_status(response, path)
            if response.status == 416:
                return b"", _total_of(response.headers.get("Content-Range")) or 0
            if response.status == 206:
                total = _total_of(response.headers.get("Content-Range"))
                return None if total is None else (await response.read(), total)
            length = response.content_length
            if length is None or length > size:
                raise RemoteReadError(
                    url, 0, size,
                    "the server ignores range requests, so every read would download the "
                    "whole object; download it and open the local copy",
                )  # fmt: skip
            return await response.read(), length

    found: tuple[bytes, int] | None = fsspec.asyn.sync(fs.loop, get)
    return None if found is None else (found[0][:size], found[1])


_FIRST_READERS: Final = {
    "s3": _s3_first,
    "s3a": _s3_first,
    "http": _http_first,
    "https": _http_first,
}
