"""torch.distributed.checkpoint on weightstore files: resharding saves and loads with no pickle
and no torn checkpoints (docs/distributed.md).

Pass a storage writer or reader of this module to ``torch.distributed.checkpoint``::

    import torch.distributed.checkpoint as dcp
    from weightstore.dcp import BurnpackStorageReader, BurnpackStorageWriter

    dcp.save(state, storage_writer=BurnpackStorageWriter("ckpt/step-100"))
    dcp.load(state, storage_reader=BurnpackStorageReader("ckpt/step-100"))

DCP keeps its planners and resharding; the checkpoint is one burnpack (or SafeTensors) file per
rank and a JSON index that is its only commit point. Its non-tensor values are stored as plain
values, never as a pickle. Without torch.distributed, `open_dcp` (and any store:
``BurnpackStore.from_file("ckpt/step-100")``) reads the whole tensors back.

Importing this module costs nothing: each name loads its module (and torch, for the storage
classes) on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from weightstore.dcp._names import DCP_INDEX_NAME, is_dcp_checkpoint
    from weightstore.dcp._reader import DcpReader, open_dcp
    from weightstore.dcp._storage import (
        BurnpackStorageReader,
        BurnpackStorageWriter,
        SafetensorsStorageReader,
        SafetensorsStorageWriter,
    )
    from weightstore.dcp._values import OpaqueValue

__all__ = [
    "DCP_INDEX_NAME",
    "BurnpackStorageReader",
    "BurnpackStorageWriter",
    "DcpReader",
    "OpaqueValue",
    "SafetensorsStorageReader",
    "SafetensorsStorageWriter",
    "is_dcp_checkpoint",
    "open_dcp",
]

_LAZY = {
    "BurnpackStorageReader": "weightstore.dcp._storage",
    "BurnpackStorageWriter": "weightstore.dcp._storage",
    "SafetensorsStorageReader": "weightstore.dcp._storage",
    "SafetensorsStorageWriter": "weightstore.dcp._storage",
    "DCP_INDEX_NAME": "weightstore.dcp._names",
    "is_dcp_checkpoint": "weightstore.dcp._names",
    "DcpReader": "weightstore.dcp._reader",
    "open_dcp": "weightstore.dcp._reader",
    "OpaqueValue": "weightstore.dcp._values",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
