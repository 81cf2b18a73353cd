"""`weightstore hash FILE...` and ``--check MANIFEST``: SHA-256 digests in ``sha256sum`` format.

A line is ``<64 hex>  <path>`` (two spaces; ``<64 hex> *<path>``, binary mode, is read back as
well), so ``sha256sum -c`` reads what ``hash`` writes and ``hash --check`` reads what
``sha256sum`` writes. A name holding a backslash, a newline or a carriage return is escaped as
``sha256sum`` does: the line starts with ``\\`` and the name spells them ``\\\\``, ``\\n``, ``\\r``.

Files are hashed in chunks of `HASH_CHUNK_SIZE` (hashlib releases the GIL on each), never read
whole, with the progress bar of the other commands for large ones. `check_manifest` is shared
with ``verify --manifest``, which resolves the manifest's paths inside a directory.

No streaming SHA-256 helper exists elsewhere in the package, so `sha256_of` lives here.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
from collections.abc import Iterator
from typing import Any, Final

from weightstore.base._record import ValueRecord
from weightstore.cli._errors import EXIT_BAD_INPUT, EXIT_OK, print_error, print_warning
from weightstore.cli._progress import Progress
from weightstore.cli._text import plural, printable
from weightstore.errors import InvalidOptionError
from weightstore.io import is_url
from weightstore.io._local import REGULAR, kind_at

__all__ = [
    "HASH_CHUNK_SIZE",
    "MAX_MANIFEST_ENTRIES",
    "MAX_MANIFEST_LINE",
    "Checked",
    "ManifestEntry",
    "Unreadable",
    "add_parser",
    "bad_lines_warning",
    "check_manifest",
    "failure_summary",
    "read_manifest",
    "run",
    "sha256_line",
    "sha256_of",
]

HASH_CHUNK_SIZE: Final = 8 * 2**20
"""Bytes hashed at once: large enough that hashlib's GIL release pays, small enough to stream."""
MAX_MANIFEST_LINE: Final = 64 * 2**10
"""Bytes of one manifest line: a path is at most 4,096 bytes on Linux (PATH_MAX), so a longer
line is no checksum line, and reading one never holds more than this in memory."""
MAX_MANIFEST_ENTRIES: Final = 1_000_000
"""Checksum lines one manifest may hold: a Hub repository has thousands of files, a 1,000-shard
set a thousand; a manifest of strangers cannot make a check hold millions of paths."""

_LINE: Final = re.compile(r"(\\?)([0-9a-fA-F]{64}) ([ *])(.+)", re.DOTALL)
_NAMES_SHOWN: Final = 5  # failing files named in the one error line, then "and N more"


class ManifestEntry(ValueRecord):
    """One checksum line: the digest (lower-case hex), the path as written, its line number."""

    digest: str
    path: str
    line: int


class Checked(ValueRecord):
    """One entry checked: ``"OK"``, ``"FAILED"`` (the digest differs) or ``"FAILED open or
    read"``, and why in words for the last two (``"the SHA-256 differs"``, ``"missing"``)."""

    entry: ManifestEntry
    state: str
    reason: str = ""

    @property
    def ok(self) -> bool:
        """Whether the file matched its line."""
        return self.state == "OK"


class Unreadable(Exception):
    """A file that cannot be hashed: missing, a directory, a FIFO, no permission."""


def sha256_of(path: str, *, quiet: bool = True, label: str | None = None) -> str:
    """The SHA-256 of the regular file at `path`, as lower-case hex, read in chunks.

    Raises:
        Unreadable: not a regular file (a FIFO would block the read forever) or unreadable.
    """
    if is_url(path):
        raise Unreadable("a URL; hash reads local files")
    try:
        kind = kind_at(path)
        if kind != REGULAR:
            raise Unreadable(kind)
        digest = hashlib.sha256()
        with open(path, "rb", buffering=0) as file:
            total = os.fstat(file.fileno()).st_size
            buffer = bytearray(HASH_CHUNK_SIZE)
            view = memoryview(buffer)
            with Progress(total, label or path, quiet=quiet) as progress:
                while count := file.readinto(view):
                    digest.update(view[:count])
                    progress.advance(count)
        return digest.hexdigest()
    except OSError as err:
        raise Unreadable((err.strerror or type(err).__name__).lower()) from err


def _escaped(name: str) -> tuple[str, str]:
    """``sha256sum``'s escape of `name`: the line's prefix (``\\`` or nothing) and the name."""
    if not any(ch in name for ch in "\\\n\r"):
        return "", printable(name)
    spelled = name.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return "\\", printable(spelled)


def _unescaped(name: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "r": "\r"}.get(m[1], m[1]), name)


def sha256_line(digest: str, name: str) -> str:
    """The ``sha256sum`` line of `name`: ``<digest>  <name>``, escaped where it must be."""
    prefix, spelled = _escaped(name)
    return f"{prefix}{digest}  {spelled}"


def _lines(path: str) -> Iterator[tuple[int, bytes | None]]:
    """(number, bytes without the line break) of each line; None for one past the limit."""
    with open(path, "rb") as file:
        number = 0
        while line := file.readline(MAX_MANIFEST_LINE + 1):
            number += 1
            if len(line) > MAX_MANIFEST_LINE:
                while line and not line.endswith(b"\n"):  # skip the rest, a bounded read at a time
                    line = file.readline(MAX_MANIFEST_LINE + 1)
                yield number, None
                continue
            yield number, line.rstrip(b"\n").removesuffix(b"\r")


def read_manifest(path: str) -> tuple[list[ManifestEntry], list[int]]:
    """The checksum lines of the manifest at `path`, and the numbers of its lines that are none
    (blank lines are skipped). Names are decoded as the file system's (undecodable bytes kept).

    Raises:
        InvalidOptionError: more than `MAX_MANIFEST_ENTRIES` lines, or no checksum line at all.
        Unreadable: the manifest is not a readable file.
    """
    kind = kind_at(path)
    if kind != REGULAR:
        raise Unreadable(kind)
    entries: list[ManifestEntry] = []
    bad: list[int] = []
    try:
        for number, raw in _lines(path):
            if raw is not None and not raw.strip():
                continue
            match = None if raw is None else _LINE.fullmatch(os.fsdecode(raw))
            if match is None:
                bad.append(number)
                continue
            if len(entries) == MAX_MANIFEST_ENTRIES:
                raise InvalidOptionError(
                    f"{path}: the manifest holds more than {MAX_MANIFEST_ENTRIES:,} checksum "
                    "lines (MAX_MANIFEST_ENTRIES)",
                    option="manifest",
                )
            escaped, digest, _, name = match.groups()
            entries.append(
                ManifestEntry(digest.lower(), _unescaped(name) if escaped else name, number)
            )
    except OSError as err:
        raise Unreadable((err.strerror or type(err).__name__).lower()) from err
    if not entries:
        raise InvalidOptionError(f"{path}: no '<sha256>  <path>' line found", option="manifest")
    return entries, bad


def check_manifest(
    entries: list[ManifestEntry], base: str | None, *, quiet: bool
) -> Iterator[Checked]:
    """Each entry checked against its file: paths resolved in `base` (None: as written, from
    the working directory, as ``sha256sum -c`` does). With a `base`, a path that is absolute
    or climbs out of it (``..``) fails unread."""
    for entry in entries:
        target = entry.path
        if base is not None:
            parts = entry.path.replace("\\", "/").split("/")
            if os.path.isabs(entry.path) or ".." in parts:
                yield Checked(entry, "FAILED open or read", "outside the directory")
                continue
            target = os.path.join(base, entry.path)
        try:
            digest = sha256_of(target, quiet=quiet, label=entry.path)
        except Unreadable as err:
            yield Checked(entry, "FAILED open or read", str(err))
            continue
        if digest == entry.digest:
            yield Checked(entry, "OK")
        else:
            yield Checked(entry, "FAILED", "the SHA-256 differs")


def failure_summary(failures: list[Checked], total: int) -> str:
    """``1 of 3 files failed: a.bin (the SHA-256 differs), ...``, the first few named."""
    named = [f"{f.entry.path} ({f.reason})" for f in failures[:_NAMES_SHOWN]]
    more = len(failures) - len(named)
    listed = ", ".join(named) + (f" and {more} more" if more else "")
    return f"{len(failures)} of {plural(total, 'file')} failed: {listed}"


def bad_lines_warning(manifest: str, bad: list[int]) -> str:
    """The warning for lines of `manifest` that are no checksum line."""
    shown = ", ".join(map(str, bad[:_NAMES_SHOWN])) + (" ..." if len(bad) > _NAMES_SHOWN else "")
    return f"{manifest}: {plural(len(bad), 'line')} not '<sha256>  <path>' (line {shown}), skipped"


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``hash`` on the subcommand table `commands`."""
    parser = commands.add_parser(
        "hash", parents=[common], help="print or check SHA-256 digests (sha256sum format)"
    )
    parser.add_argument("files", nargs="*", metavar="FILE", help="files to hash")
    parser.add_argument(
        "--check",
        "-c",
        metavar="MANIFEST",
        help="read '<sha256>  <path>' lines from MANIFEST and check each file",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print each file's line, or with ``--check`` each listed file's verdict; 0 or 2."""
    if args.check is not None:
        if args.files:
            raise InvalidOptionError("--check reads its files from the manifest; give no FILE")
        return _check(args.check, args.quiet)
    if not args.files:
        raise InvalidOptionError("give a FILE to hash, or --check MANIFEST")
    failed: list[str] = []
    for path in args.files:
        try:
            print(sha256_line(sha256_of(path, quiet=args.quiet), path))
        except Unreadable as err:
            failed.append(f"{path} ({err})")
    if failed:
        shown = ", ".join(failed[:_NAMES_SHOWN])
        more = len(failed) - _NAMES_SHOWN
        print_error(
            f"{len(failed)} of {plural(len(args.files), 'file')} not hashed: {shown}"
            + (f" and {more} more" if more > 0 else "")
        )
        return EXIT_BAD_INPUT
    return EXIT_OK


def _check(manifest: str, quiet: bool) -> int:
    try:
        entries, bad = read_manifest(manifest)
    except Unreadable as err:
        print_error(f"{manifest}: {err}")
        return EXIT_BAD_INPUT
    if bad:
        print_warning(bad_lines_warning(manifest, bad))
    failures: list[Checked] = []
    for checked in check_manifest(entries, None, quiet=quiet):
        prefix, spelled = _escaped(checked.entry.path)
        print(f"{prefix}{spelled}: {checked.state}", flush=True)
        if not checked.ok:
            failures.append(checked)
    if failures:
        print_error(f"{manifest}: {failure_summary(failures, len(entries))}")
        return EXIT_BAD_INPUT
    return EXIT_OK
