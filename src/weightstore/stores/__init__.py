"""Stores: where a model's tensors are saved to and loaded from, with their options."""

from __future__ import annotations

from weightstore.stores._base import LoadFailedError, Store, StoreOptions
from weightstore.stores._containers import BurnpackStore, PytorchStore, SafetensorsStore

__all__ = [
    "BurnpackStore",
    "LoadFailedError",
    "PytorchStore",
    "SafetensorsStore",
    "Store",
    "StoreOptions",
]
