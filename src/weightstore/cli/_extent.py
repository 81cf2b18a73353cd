"""Bytes of a checkpoint file that its reader never reads: what ``verify`` refuses and
``inspect`` warns about.

A zip checkpoint is read from its end (`weightstore.pytorch_reader._extent`), so bytes before
the archive (more archives: a torch DCP rank file holds one per item, back to back) or after its
end are skipped without a word, and a file of six archives would verify "ok" having read one.
SafeTensors and burnpack readers refuse bytes past their last tensor themselves.
"""

from __future__ import annotations

import os

from weightstore.io import is_url

__all__ = ["unread_bytes"]


def unread_bytes(path: str) -> str | None:
    """What lies in the local zip checkpoint `path` beyond the archive its reader reads, as a
    sentence; None when the reader reads it all (or it is no zip, or a URL: not fetched)."""
    if is_url(path) or not os.path.isfile(path):
        return None
    from weightstore.pytorch_reader._extent import zip_extent

    try:
        extent = zip_extent(path)
    except OSError:
        return None  # the reader's own open reported what is wrong with the file
    return None if extent is None else extent.describe()
