"""The format registry: every container format weightstore reads, and telling them apart.

Each container package describes itself once in its ``FORMAT`` record (`ContainerFormat`);
this module lists those records and answers the questions that span formats: which format a
file's bytes are (extensions lie: ``.bin`` holds anything, ``.pt`` files are renamed zips),
which format a file name suggests for a file not yet written, and what to tell someone who
opened a file with the wrong reader. Adding a format is one folder and one entry in `FORMATS`:
its record carries every fact the rest of the package asks (`ContainerFormat`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from typing import Any

from weightstore import burnpack, gguf, pytorch_reader, safetensors
from weightstore.base._cause import cause_of, refuse_not_weights, shown_head
from weightstore.container._format import PROBE_SIZE, ContainerFormat
from weightstore.errors import UnsupportedFormatError

__all__ = [
    "FORMATS",
    "ContainerFormat",
    "detect_format",
    "detect_format_of_bytes",
    "format_for_name",
    "format_for_path",
    "format_named",
    "read_probe",
    "what_it_is",
]

FORMATS: tuple[ContainerFormat, ...] = (
    burnpack.FORMAT, safetensors.FORMAT, pytorch_reader.FORMAT, gguf.FORMAT,
)  # fmt: skip
"""Every registered format, in sniff order. Burnpack's 4-byte magic is exact. SafeTensors comes
before PyTorch: one SafeTensors file in 256 has a header length whose low byte is 0x80, which
is also how a pickle starts, while no file torch.save writes has "{" at byte 8 after a plausible
length (under 100 MB, so bytes 4 to 7 are zero; torch's zips start ``50 4b 03 04 00 00 08 08``,
its legacy files ``80 02 8a 0a 6c fc 9c 46``). GGUF's magic is 4 ASCII bytes, ``GGUF``, which
no other format starts with.

Each sniff checks a signature, never whether the rest of the file is whole: a damaged file is
still recognised, and its reader then reports the damage with a typed error."""

_BY_NAME = {fmt.name: fmt for fmt in FORMATS}
_BY_EXTENSION = {ext: fmt for fmt in FORMATS for ext in fmt.extensions}
assert len(_BY_NAME) == len(FORMATS), "format names must be unique"
assert len(_BY_EXTENSION) == sum(len(f.extensions) for f in FORMATS), "extensions are unique"
_TITLES = ", ".join(fmt.title for fmt in FORMATS[:-1]) + f" or {FORMATS[-1].title}"


def format_named(name: str) -> ContainerFormat:
    """The format called `name` (``"burnpack"``, ``"safetensors"``, ``"pytorch"``).

    Raises:
        UnsupportedFormatError: no format has that name; the message lists those that do.
    """
    fmt = _BY_NAME.get(name)
    if fmt is None:
        known = ", ".join(_BY_NAME)
        raise UnsupportedFormatError(f"no format is called {name!r}; known formats: {known}")
    return fmt


def format_for_path(path: str | os.PathLike[str]) -> ContainerFormat | None:
    """The format a path's extension suggests (for a file not written yet), or None."""
    extension = os.path.splitext(os.fspath(path))[1].lstrip(".").lower()
    return _BY_EXTENSION.get(extension)


def format_for_name(path: str | os.PathLike[str]) -> ContainerFormat | None:
    """Deprecated spelling of `format_for_path` (it takes a path; `format_named` takes a
    name), kept for one release."""
    warnings.warn(
        "format_for_name is deprecated; use format_for_path", DeprecationWarning, stacklevel=2
    )
    return format_for_path(path)


def what_it_is(head: bytes, size: int) -> str | None:
    """A short description of what a file is, from its first bytes: one of our formats, no
    weights at all (a git-lfs pointer, an HTML page: `cause_of`), a sharded checkpoint's JSON
    index, or None when nothing is recognised."""
    for fmt in FORMATS:
        if fmt.sniff(head, size):
            return f"a {fmt.title} file"
    cause = cause_of(head, size)
    if cause is not None:
        return cause.what
    if head.lstrip()[:1] == b"{":
        return "a JSON file (a sharded checkpoint's index?)"
    return None


def detect_format_of_bytes(head: bytes, size: int, name: str | None = None) -> ContainerFormat:
    """The format whose signature `head` (a file's first `PROBE_SIZE` bytes) carries.

    Only the signature counts: a truncated or otherwise damaged file is recognised as long as
    its first bytes are intact (SafeTensors needs 9, burnpack and zip 4, a pickle 2), so that
    opening it with the format's reader reports what is wrong.

    Args:
        head: the file's first bytes.
        size: the file's total size in bytes (the SafeTensors test needs it).
        name: the file, named in the error.

    Raises:
        NotWeightsError: the bytes are no weights at all, and say what they are: a git-lfs
            pointer (`LfsPointerError`), an empty file, an HTML page, another tool's format.
        UnsupportedFormatError: no format recognises the bytes.
    """
    for fmt in FORMATS:
        if fmt.sniff(head, size):
            return fmt
    refuse_not_weights(head, size, name)
    what = what_it_is(head, size)
    if what is not None:
        detail = f"{what}, which weightstore does not read as one checkpoint"
    else:
        detail = f"not a {_TITLES} file (starts with {shown_head(head)})"
    raise UnsupportedFormatError(detail, path=name)


def read_probe(
    path: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None
) -> tuple[bytes, int]:
    """A file's first `PROBE_SIZE` bytes and its total size: what detection looks at.

    For a URL this is the object's first range request, and the reader that opens the same
    URL right after takes over that request's bytes (`weightstore.io._remote_source`), so
    detecting and opening cost one request together.
    """
    from weightstore.io import is_url
    from weightstore.io._source import open_readable  # with the first probe

    filename = os.fspath(path)
    if is_url(filename):
        from weightstore.io._remote_source import probe_remote

        source = probe_remote(filename, storage_options)
        return source.head[:PROBE_SIZE], source.size
    with open_readable(filename) as file:
        return file.read(PROBE_SIZE), os.fstat(file.fileno()).st_size


def detect_format(
    path: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None
) -> ContainerFormat:
    """The format of the file (or URL) at `path`, read from its first bytes, not its name.

    Raises:
        UnsupportedFormatError: no format recognises the bytes.
        OSError: the file cannot be read.
    """
    head, size = read_probe(path, storage_options)
    return detect_format_of_bytes(head, size, os.fspath(path))
