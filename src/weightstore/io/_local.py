"""Local paths read as hostile input: names the filesystem can hold, and files that are files.

A path reaches the filesystem from a user (an argument) or from a file (a set's or a DCP
checkpoint's index), and either may name something no reader should open:

- a name the filesystem encoding cannot encode: a lone surrogate (``"\\ud800"``, which JSON's
  ``\\ud800`` escape decodes to) makes every ``os`` call raise `UnicodeEncodeError`. A path
  a user gives keeps Python's ``surrogateescape`` bytes (``"\\udcff"`` is the byte 0xFF of a
  name that is not UTF-8), which `os.fsencode` encodes; only what it cannot encode can name
  no file (`unencodable`). Names an index supplies are held stricter (`weightstore.sets._index`).
- something other than a regular file: a FIFO blocks ``open`` until a writer comes (forever),
  a device reads without end or acts on being opened, a socket cannot be opened at all.
  `kind_at` says what a path is, following symlinks, and also tells a symlink loop (``ELOOP``
  from every call) and a broken symlink from a plain missing file.

Every local open goes through `weightstore.io._source.open_readable`, which refuses all of
these with a typed error; directory listings (`weightstore.sets._discover`) skip them and
report why.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from typing import Final

__all__ = [
    "BROKEN_SYMLINK",
    "DIRECTORY",
    "MISSING",
    "REGULAR",
    "SYMLINK_LOOP",
    "kind_at",
    "kind_of_mode",
    "unencodable",
]

REGULAR: Final = "a file"
"""`kind_at` of a regular file (or a symlink to one): the only kind a reader opens."""
DIRECTORY: Final = "a directory"
"""`kind_at` of a directory (or a symlink to one)."""
MISSING: Final = "missing"
"""`kind_at` of nothing there, including a name that no file can have (`unencodable`)."""
BROKEN_SYMLINK: Final = "a broken symlink"
"""`kind_at` of a symlink to nothing: missing to a reader, but listed as skipped."""
SYMLINK_LOOP: Final = "a symlink loop"
"""`kind_at` of a symlink that leads back to itself (``x -> x``), or too deep a chain."""

_SPECIAL: Final = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def unencodable(name: str) -> str | None:
    """Why `name` can name no local file (a NUL, or a character the filesystem encoding
    cannot encode with ``surrogateescape``: a lone surrogate on POSIX), or None."""
    if "\0" in name:
        return "holds a NUL character, which no file name holds"
    try:
        os.fsencode(name)
    except UnicodeEncodeError as err:
        character = name[err.start]
        return (
            f"holds U+{ord(character):04X} at position {err.start}, which the filesystem "
            f"encoding ({sys.getfilesystemencoding()}) cannot encode"
        )
    return None


def kind_of_mode(mode: int) -> str:
    """What an ``st_mode`` says a file is: `REGULAR`, `DIRECTORY`, or a special file
    (``"a FIFO"``, ``"a socket"``, ``"a character device"``, ``"a block device"``)."""
    if stat.S_ISREG(mode):
        return REGULAR
    if stat.S_ISDIR(mode):
        return DIRECTORY
    return next((what for test, what in _SPECIAL if test(mode)), "a special file")


def kind_at(path: str) -> str:
    """What is at the local `path`, following symlinks: `REGULAR`, `DIRECTORY`, `MISSING`,
    `BROKEN_SYMLINK`, `SYMLINK_LOOP`, or a special file (`kind_of_mode`). One ``stat``; an
    ``lstat`` more when that finds nothing. Other failures (no permission) raise `OSError`."""
    if unencodable(path) is not None:
        return MISSING
    try:
        return kind_of_mode(os.stat(path).st_mode)
    except FileNotFoundError:
        return BROKEN_SYMLINK if os.path.islink(path) else MISSING
    except NotADirectoryError:  # a file where a directory of the path should be
        return MISSING
    except OSError as err:
        if err.errno == errno.ELOOP:
            return SYMLINK_LOOP
        if err.errno == errno.ENAMETOOLONG:  # a name past NAME_MAX or PATH_MAX: no file has it
            return MISSING
        raise
