"""The names of a DCP checkpoint on disk: its index file, and telling a DCP directory from others.

Apart from the rest of the package so that asking it of every path (`weightstore.locate`) loads
no DCP module.
"""

from __future__ import annotations

import os
from typing import Final

__all__ = [
    "DCP_INDEX_NAME",
    "TORCH_DCP_METADATA_NAME",
    "is_dcp_checkpoint",
    "is_torch_dcp_checkpoint",
]

DCP_INDEX_NAME: Final = "dcp.index.json"
"""The index of a `torch.distributed.checkpoint` directory saved through `weightstore.dcp`
(docs/dcp.md); its rank files are read through `weightstore.dcp._reader`."""


def is_dcp_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a directory holding a DCP index, or such an index; reads nothing.
    Here, with the other names, so that asking it of every path loads no DCP module."""
    filename = os.fspath(path)
    if os.path.isdir(filename):
        return os.path.isfile(os.path.join(filename, DCP_INDEX_NAME))
    return os.path.basename(filename) == DCP_INDEX_NAME and os.path.isfile(filename)


TORCH_DCP_METADATA_NAME: Final = ".metadata"
"""The index torch's own ``FileSystemWriter`` writes beside its ``__R_I.distcp`` files, a pickle
(`weightstore.dcp._torch_metadata` reads it without running it)."""


def is_torch_dcp_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a directory holding torch's DCP ``.metadata``, or that file; reads
    nothing."""
    filename = os.fspath(path)
    if os.path.isdir(filename):
        return os.path.isfile(os.path.join(filename, TORCH_DCP_METADATA_NAME))
    return os.path.basename(filename) == TORCH_DCP_METADATA_NAME and os.path.isfile(filename)
