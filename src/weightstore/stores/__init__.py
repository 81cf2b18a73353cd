"""Stores: where a model's tensors are saved to and loaded from, with their options.

`Store` is the one implementation, over the format registry; `Store.from_file` picks the format
from a file's content. `BurnpackStore`, `SafetensorsStore`, `PytorchStore` and `GgufStore` fix
the format.
"""

from __future__ import annotations

from weightstore.errors import LoadFailedError
from weightstore.stores._base import Store
from weightstore.stores._declared import BurnpackStore, GgufStore, PytorchStore, SafetensorsStore
from weightstore.stores._options import StoreOptions

__all__ = [
    "BurnpackStore",
    "GgufStore",
    "LoadFailedError",
    "PytorchStore",
    "SafetensorsStore",
    "Store",
    "StoreOptions",
]
