"""The SafeTensors container (``.safetensors``): a u64 length, a JSON header, packed tensors.

This package knows byte layouts only, nothing of models or torch. `SafetensorsReader` opens a
file by its header and hands out tensors as NumPy views, or parts of them through `get_slice`;
`SafetensorsWriter` streams `TensorEntry` objects into a file atomically or into bytes,
byte-identical to the `safetensors` package for the same tensors and metadata.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from weightstore._slice import TensorSlice
from weightstore.entry import TensorEntry
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
    return SafetensorsWriter(entries, metadata, keep_order=keep_order).to_bytes()


def write_file(
    path: str | os.PathLike[str],
    entries: Iterable[TensorEntry],
    metadata: Mapping[str, str] | None = None,
    *,
    keep_order: bool = False,
    overwrite: bool = False,
) -> str:
    """Save a SafeTensors file atomically; returns the path written."""
    writer = SafetensorsWriter(entries, metadata, keep_order=keep_order)
    return writer.save(path, overwrite=overwrite)
