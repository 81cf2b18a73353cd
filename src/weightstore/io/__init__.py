"""The byte layer: where bytes come from and go to.

Local files by mmap and pread (`_source`), memory, URLs by planned range reads
(`_remote_source`, over `_fs`, the only fsspec import), atomic local saves (`_atomic`) and
whole-or-nothing uploads (`_remote_write`); `open_source` picks the source for a path and
`is_url`, defined here, tells a URL from a path, once for the whole package (a string
test: asking it of every path loads nothing). It knows no format and no model.
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
