"""How the parts of a split GGUF model are named, and which model a directory holds.

llama.cpp names part ``i`` of ``n`` ``<prefix>-%05d-of-%05d.gguf`` (1-based; `split_path` in
its loader, gguf-py's ``SHARD_NAME_FORMAT``) and finds the other parts from the opened part's
name alone: there is no index. This module holds that rule once, for the split reader
(`weightstore.gguf._split`) and for opening a directory (`model_in_directory`, which the
registry record hands `weightstore.locate`). Names only: nothing is opened or parsed here.
"""

from __future__ import annotations

import os
import re
from typing import Final

from weightstore.base._record import ValueRecord
from weightstore.errors import SetError
from weightstore.gguf._layout import EXTENSION
from weightstore.io import is_url

__all__ = [
    "PART_NAME",
    "PartName",
    "file_name",
    "model_in_directory",
    "parse_part_name",
    "part_path",
]

PART_NAME: Final = re.compile(
    rf"(?P<prefix>.+)-(?P<number>\d{{5,}})-of-(?P<count>\d{{5,}})\.{EXTENSION}"
)
"""A part's file name: its prefix, 1-based number and the part count, five digits or more."""

_LISTED_MODELS: Final = 5  # models an ambiguity error names (then "...")


class PartName(ValueRecord):
    """What a part's file name says: prefix, 1-based number, part count."""

    prefix: str
    number: int
    count: int


def parse_part_name(filename: str) -> PartName | None:
    """The parts of a split part's file name (no directory), or None when it is not named as
    one (a number of 0, or past the count, is no part's)."""
    match = PART_NAME.fullmatch(filename)
    if match is None:
        return None
    number, count = int(match["number"]), int(match["count"])
    if not 1 <= number <= count:
        return None
    return PartName(match["prefix"], number, count)


def part_path(path: str, prefix: str, number: int, count: int) -> str:
    """The path of part `number` of `count`, beside the part at `path` (a file or a URL)."""
    name = f"{prefix}-{number:05d}-of-{count:05d}.{EXTENSION}"
    if is_url(path):
        return f"{path.rsplit('/', 1)[0]}/{name}"
    return os.path.join(os.path.dirname(path), name)


def file_name(path: str) -> str:
    """The last component of a path or URL."""
    return path.rsplit("/", 1)[-1] if is_url(path) else os.path.basename(path)


def model_in_directory(directory: str) -> str | None:
    """The file that opens the one GGUF model in `directory`: its single ``.gguf`` file, or
    the first part of its split model (the lowest-numbered part there, when part 1 is
    missing, so that opening it names the missing part). None when it holds no ``.gguf``
    file. Only regular files (or links to them) directly inside count.

    Raises:
        SetError: it holds several models (unrelated files, or two split models); the
            message lists them.
    """
    models: dict[object, list[tuple[int, str]]] = {}  # a split's (prefix, count), or a name
    for name in _gguf_files(directory):
        part = parse_part_name(name)
        key: object = name if part is None else (part.prefix, part.count)
        models.setdefault(key, []).append((0 if part is None else part.number, name))
    if not models:
        return None
    if len(models) > 1:
        shown = [_shown(sorted(parts)) for _, parts in sorted(models.items(), key=_first_name)]
        listing = ", ".join(shown[:_LISTED_MODELS]) + (
            ", ..." if len(shown) > _LISTED_MODELS else ""
        )
        raise SetError(
            f"holds {len(models)} GGUF models ({listing}), so which one to open is not "
            "clear; open one by its path (a split model by any of its parts)",
            path=directory,
        )
    (parts,) = models.values()
    return os.path.join(directory, min(parts)[1])


def _first_name(item: tuple[object, list[tuple[int, str]]]) -> str:
    return min(item[1])[1]


def _shown(parts: list[tuple[int, str]]) -> str:
    """A model as an error lists it: its file, or its first part and how many are there."""
    if parts[0][0] == 0:
        return parts[0][1]
    return f"{parts[0][1]} ({len(parts)} part{'s' if len(parts) > 1 else ''} present)"


def _gguf_files(directory: str) -> list[str]:
    """The names of the ``.gguf`` regular files in `directory` (none when it cannot be listed:
    the directory then holds nothing to open, and the caller says so)."""
    suffix = f".{EXTENSION}"
    names: list[str] = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if not entry.name.endswith(suffix):
                    continue
                try:
                    if entry.is_file():  # follows links; a FIFO, loop or broken link is none
                        names.append(entry.name)
                except OSError:
                    continue
    except OSError:
        return []
    return sorted(names)
