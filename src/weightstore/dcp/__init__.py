"""torch.distributed.checkpoint on weightstore files: resharding saves and loads with no pickle
and no torn checkpoints (docs/dcp.md).

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

from typing import TYPE_CHECKING

from weightstore.base._lazy import lazy_exports

if TYPE_CHECKING:  # the table below, as type checkers see it
    from weightstore.dcp._names import DCP_INDEX_NAME as DCP_INDEX_NAME
    from weightstore.dcp._names import is_dcp_checkpoint as is_dcp_checkpoint
    from weightstore.dcp._reader import DcpReader as DcpReader
    from weightstore.dcp._reader import open_dcp as open_dcp
    from weightstore.dcp._storage import BurnpackStorageReader as BurnpackStorageReader
    from weightstore.dcp._storage import BurnpackStorageWriter as BurnpackStorageWriter
    from weightstore.dcp._storage import SafetensorsStorageReader as SafetensorsStorageReader
    from weightstore.dcp._storage import SafetensorsStorageWriter as SafetensorsStorageWriter
    from weightstore.dcp._values import OpaqueValue as OpaqueValue

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(("DCP_INDEX_NAME", "is_dcp_checkpoint"), "weightstore.dcp._names"),
        **dict.fromkeys(("DcpReader", "open_dcp"), "weightstore.dcp._reader"),
        **dict.fromkeys(
            (
                "BurnpackStorageReader",
                "BurnpackStorageWriter",
                "SafetensorsStorageReader",
                "SafetensorsStorageWriter",
            ),
            "weightstore.dcp._storage",
        ),
        "OpaqueValue": "weightstore.dcp._values",
    },
)
