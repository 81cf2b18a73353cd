"""The SafeTensors container (``.safetensors``): a u64 length, a JSON header, packed tensors.

This package knows byte layouts only, nothing of models or torch. `SafetensorsReader` opens a
file by its header and hands out tensors as NumPy views, or parts of them through `get_slice`;
`SafetensorsWriter` streams `TensorEntry` objects into a file atomically or into bytes,
byte-identical to the `safetensors` package for the same tensors and metadata.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from weightstore.safetensors._format import FORMAT
from weightstore.safetensors._layout import (
    DATA_ALIGNMENT,
    DTYPE_RANK,
    EXTENSION,
    MAX_HEADER_SIZE,
    METADATA_KEY,
    PREFIX_SIZE,
    TensorDescriptor,
)

if TYPE_CHECKING:
    from weightstore.container._slice import TensorSlice
    from weightstore.entry import TensorEntry
    from weightstore.safetensors._reader import SafetensorsReader
    from weightstore.safetensors._writer import SafetensorsWriter

__all__ = [
    "DATA_ALIGNMENT",
    "DTYPE_RANK",
    "EXTENSION",
    "FORMAT",
    "MAX_HEADER_SIZE",
    "METADATA_KEY",
    "PREFIX_SIZE",
    "SafetensorsReader",
    "SafetensorsWriter",
    "TensorDescriptor",
    "TensorSlice",
    "write_bytes",
    "write_file",
]


def write_bytes(
    entries: Iterable[TensorEntry],
    metadata: Mapping[str, str] | None = None,
    *,
    keep_order: bool = False,
) -> bytes:
    """A SafeTensors file in memory; shorthand for ``SafetensorsWriter(...).to_bytes()``."""
    from weightstore.safetensors._writer import SafetensorsWriter

    return SafetensorsWriter(entries, metadata, keep_order=keep_order).to_bytes()


def write_file(
    path: str | os.PathLike[str],
    entries: Iterable[TensorEntry],
    metadata: Mapping[str, str] | None = None,
    *,
    keep_order: bool = False,
    overwrite: bool = False,
    durable: bool = True,
) -> str:
    """Save a SafeTensors file atomically; returns the path written. ``durable=False`` skips
    the fsyncs but keeps the atomic rename (`ContainerWriter.save`)."""
    from weightstore.safetensors._writer import SafetensorsWriter

    writer = SafetensorsWriter(entries, metadata, keep_order=keep_order)
    return writer.save(path, overwrite=overwrite, durable=durable)


# The reader and writer (and NumPy) load on first use: the format registry imports this package
# for `FORMAT`, and most programs open few formats.
_LAZY: dict[str, str] = {
    "SafetensorsReader": "weightstore.safetensors._reader",
    "SafetensorsWriter": "weightstore.safetensors._writer",
    "TensorSlice": "weightstore.container._slice",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
