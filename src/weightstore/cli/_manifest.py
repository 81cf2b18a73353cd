"""``verify --manifest FILE DIR``: a directory's files against ``sha256sum`` lines.

Every file the manifest lists is hashed, its path taken inside DIR (a path that is absolute or
climbs out with ``..`` fails unread: a manifest is input too); a file that differs or is
missing fails the directory. Files in DIR the manifest does not list are a warning, not a
failure: a cache or a tool may leave files beside the weights. The manifest itself, when it
lies in DIR, is not counted as unlisted.
"""

from __future__ import annotations

import os
from typing import Final, Protocol

from weightstore.cli._hash import (
    Unreadable,
    bad_lines_warning,
    check_manifest,
    read_manifest,
)
from weightstore.cli._text import plural
from weightstore.errors import InvalidOptionError


class Verdict(Protocol):
    """What `check_directory` adds its findings to (`weightstore.cli._verify.Verdict`, which
    imports this module: a Protocol keeps the two out of a cycle)."""

    path: str
    problems: list[str]
    notes: list[str]
    warnings: list[str]


__all__ = ["check_directory", "unlisted_files"]

_NAMES_SHOWN: Final = 5  # unlisted files named in the warning, then "and N more"


def unlisted_files(directory: str, listed: set[str], manifest: str) -> list[str]:
    """The files below `directory` (relative, ``/``-separated, sorted) not in `listed`, the
    manifest itself left out."""
    manifest_real = os.path.realpath(manifest)
    found = []
    for folder, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, directory).replace(os.sep, "/")
            if relative not in listed and os.path.realpath(path) != manifest_real:
                found.append(relative)
    return sorted(found)


def check_directory(verdict: Verdict, manifest: str, *, quiet: bool) -> None:
    """Check `verdict`'s directory against `manifest`, adding its problems, notes, warnings."""
    directory = verdict.path
    if not os.path.isdir(directory):
        verdict.problems.append(f"--manifest checks a directory, and {directory} is none")
        return
    try:
        entries, bad = read_manifest(manifest)
    except Unreadable as err:
        verdict.problems.append(f"manifest {manifest}: {err}")
        return
    except InvalidOptionError as err:
        verdict.problems.append(err.detail)
        return
    if bad:
        verdict.warnings.append(bad_lines_warning(manifest, bad))
    failed = 0
    for checked in check_manifest(entries, directory, quiet=quiet):
        if not checked.ok:
            failed += 1
            verdict.problems.append(
                f"{checked.entry.path}: {checked.reason} (manifest line {checked.entry.line})"
            )
    verdict.notes.append(
        f"manifest {manifest}: {plural(len(entries), 'file')} checked, {failed:,} failed"
    )
    listed = {os.path.normpath(entry.path).replace(os.sep, "/") for entry in entries}
    unlisted = unlisted_files(directory, listed, manifest)
    if unlisted:
        shown = ", ".join(unlisted[:_NAMES_SHOWN])
        more = len(unlisted) - _NAMES_SHOWN
        verdict.warnings.append(
            f"{plural(len(unlisted), 'file')} not in the manifest: {shown}"
            + (f" and {more} more" if more > 0 else "")
        )
