"""Telling a URL from a local path: the one definition every layer asks.

A plain string test with no import beyond the standard library, so asking it of every path
costs nothing and loads no filesystem package.
"""

from __future__ import annotations

import os
import re
from typing import Final

__all__ = ["is_url"]

_SCHEME: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_LOCAL_SCHEMES: Final = frozenset({"file", "local"})


def is_url(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a URL some filesystem other than the local one serves (``s3://``,
    ``gs://``, ``http(s)://``, ``memory://``...); ``file://`` paths and plain paths are local."""
    text = os.fspath(path)
    if "://" not in text:
        return False
    match = _SCHEME.match(text)
    return match is not None and match.group(0)[:-3].lower() not in _LOCAL_SCHEMES
