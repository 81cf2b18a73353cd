"""Counting the times a file is opened, with an audit hook (``open`` events: `open`, `os.open`).

An audit hook cannot be removed, so one hook is installed on first use and counts only while a
`counting_opens` block is active, and only the paths that block asked about.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_watched: dict[str, list[str]] = {}  # real path -> one entry per open seen
_installed = False


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or not _watched or not args:
        return
    target = args[0]
    if not isinstance(target, (str, bytes, os.PathLike)):
        return  # a descriptor
    try:
        key = os.path.realpath(os.fsdecode(target))
    except (TypeError, ValueError):
        return
    seen = _watched.get(key)
    if seen is not None:
        seen.append(key)


@contextmanager
def counting_opens(path: str | os.PathLike[str]) -> Iterator[list[str]]:
    """A list that gets one entry per open of `path` made inside the block."""
    global _installed
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True
    key = os.path.realpath(os.fspath(path))
    seen: list[str] = []
    _watched[key] = seen
    try:
        yield seen
    finally:
        del _watched[key]
