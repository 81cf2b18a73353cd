"""Stores: where a model's tensors are saved to and loaded from, with their options.

`Store` is the one implementation, over the format registry; `Store.from_file` picks the format
from a file's content. `BurnpackStore`, `SafetensorsStore` and `PytorchStore` fix the format.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from weightstore.stores._base import Store
from weightstore.stores._declared import BurnpackStore, PytorchStore, SafetensorsStore
from weightstore.stores._options import StoreOptions

if TYPE_CHECKING:
    from weightstore.stores._load_failure import LoadFailedError

__all__ = [
    "BurnpackStore",
    "LoadFailedError",
    "PytorchStore",
    "SafetensorsStore",
    "Store",
    "StoreOptions",
]


def __getattr__(name: str) -> Any:
    """`LoadFailedError` on first use: its module brings the load report's machinery, which a
    program that only opens a store has no use for yet."""
    if name != "LoadFailedError":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from weightstore.stores._load_failure import LoadFailedError

    globals()[name] = LoadFailedError
    return LoadFailedError
