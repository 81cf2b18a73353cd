"""``verify`` of a Hugging Face cache snapshot: each LFS blob's bytes against its SHA-256 name.

In the Hub cache (``models--ORG--NAME/snapshots/REV/``) every file is a symlink to
``models--ORG--NAME/blobs/<name>``. An LFS file's blob (weights, tokenizers) is named by the
SHA-256 of its bytes, 64 hex digits, so its name is a manifest nobody had to write. A small
file kept in git (``config.json``) is named by its git blob SHA-1, 40 hex digits, of the bytes
with a ``blob <size>\\0`` header: those are listed as not checked, since a corrupt small JSON
file fails its own parse.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Final

from weightstore.cli._hash import Unreadable, sha256_of
from weightstore.cli._text import plural

__all__ = ["BlobReport", "check_blobs", "snapshot_of"]

_SHA256_NAME: Final = re.compile(r"[0-9a-f]{64}")
_SHA1_NAME: Final = re.compile(r"[0-9a-f]{40}")
_NAMES_SHOWN: Final = 5  # files named in a note, then "and N more"


@dataclass(slots=True)
class BlobReport:
    """What checking a snapshot's blobs found: the files whose blob was hashed, one problem
    line per blob that differs or cannot be read, the files left unchecked (SHA-1 names)."""

    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)

    def notes(self) -> list[str]:
        """The report's lines on what was and was not checked."""
        lines = []
        if self.checked:
            lines.append(
                f"Hub cache: the SHA-256 of {plural(len(self.checked), 'LFS blob')} checked "
                f"against its name: {_listed(self.checked)}"
            )
        if self.unchecked:
            lines.append(f"Hub cache: not checked, named by a git SHA-1: {_listed(self.unchecked)}")
        return lines


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMES_SHOWN])
    more = len(names) - _NAMES_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def snapshot_of(path: str) -> tuple[str, str] | None:
    """(the snapshot directory, the repository's ``blobs`` directory) when the local `path`
    is a Hub cache snapshot (``<kind>--.../snapshots/<rev>``) or lies inside one, else None."""
    parts = os.path.abspath(path).split(os.sep)
    if "snapshots" not in parts:  # most paths: the set modules stay unloaded for one file
        return None
    from weightstore.sets._index import _HUB_REPO_KINDS

    for position in range(len(parts) - 2, 0, -1):  # the nearest "<repo>/snapshots/<revision>"
        if parts[position] == "snapshots" and parts[position - 1].startswith(_HUB_REPO_KINDS):
            repo = os.sep.join(parts[:position]) or os.sep
            blobs = os.path.join(repo, "blobs")
            if not os.path.isdir(blobs):
                return None
            return os.sep.join(parts[: position + 2]), blobs
    return None


def _files_under(path: str) -> list[str]:
    """`path` itself when it is a file, else every file below it (the index's directory for a
    set's index: the set is its shards), sorted."""
    if not os.path.isdir(path) and path.endswith("index.json"):
        path = os.path.dirname(path) or os.curdir
    if not os.path.isdir(path):
        return [path]
    found = []
    for directory, _, files in os.walk(path):
        found += [os.path.join(directory, name) for name in files]
    return sorted(found)


def check_blobs(path: str, *, quiet: bool) -> BlobReport | None:
    """Hash the blob of every file at or below `path` that links into its snapshot's
    ``blobs`` under a SHA-256 name; None when `path` is not in a Hub cache snapshot."""
    located = snapshot_of(path)
    if located is None:
        return None
    snapshot, blobs = located
    real_blobs = os.path.realpath(blobs)
    report = BlobReport()
    for file in _files_under(path):
        if not os.path.islink(file):
            continue
        blob = os.path.realpath(file)
        if os.path.dirname(blob) != real_blobs:
            continue
        name = os.path.basename(blob)
        shown = os.path.relpath(file, snapshot)
        if _SHA1_NAME.fullmatch(name):
            report.unchecked.append(shown)
        if not _SHA256_NAME.fullmatch(name):
            continue
        report.checked.append(shown)
        try:
            digest = sha256_of(blob, quiet=quiet, label=shown)
        except Unreadable as err:
            report.problems.append(f"{shown}: blob {name} cannot be read ({err})")
            continue
        if digest != name:
            report.problems.append(
                f"{shown}: blob {name} has SHA-256 {digest}, not its name; the blob is damaged"
            )
    return report
