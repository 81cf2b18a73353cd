"""The SafeTensors container (``.safetensors``): a u64 length, a JSON header, packed tensors.

This package knows byte layouts only, nothing of models or torch. `SafetensorsReader` opens a
file by its header and hands out tensors as NumPy views, or parts of them through `get_slice`;
`SafetensorsWriter` streams `TensorEntry` objects into a file atomically or into bytes,
byte-identical to the `safetensors` package for the same tensors and metadata.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from weightstore.base._lazy import lazy_exports
from weightstore.safetensors._format import FORMAT as FORMAT
from weightstore.safetensors._layout import DATA_ALIGNMENT as DATA_ALIGNMENT
from weightstore.safetensors._layout import DTYPE_RANK as DTYPE_RANK
from weightstore.safetensors._layout import EXTENSION as EXTENSION
from weightstore.safetensors._layout import MAX_HEADER_SIZE as MAX_HEADER_SIZE
from weightstore.safetensors._layout import METADATA_KEY as METADATA_KEY
from weightstore.safetensors._layout import PREFIX_SIZE as PREFIX_SIZE
from weightstore.safetensors._layout import TensorDescriptor as TensorDescriptor

if TYPE_CHECKING:  # the lazy part of the table below, as type checkers see it
    from weightstore.container._slice import TensorSlice as TensorSlice
    from weightstore.entry import TensorEntry
    from weightstore.safetensors._reader import SafetensorsReader as SafetensorsReader
    from weightstore.safetensors._writer import SafetensorsWriter as SafetensorsWriter

# The reader and writer (and NumPy) load on first use: the format registry imports this package
# for `FORMAT`, and most programs open few formats.
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "FORMAT": "weightstore.safetensors._format",
        **dict.fromkeys(
            (
                "DATA_ALIGNMENT", "DTYPE_RANK", "EXTENSION", "MAX_HEADER_SIZE", "METADATA_KEY",
                "PREFIX_SIZE", "TensorDescriptor",
            ),
            "weightstore.safetensors._layout",
        ),
        "SafetensorsReader": "weightstore.safetensors._reader",
        "SafetensorsWriter": "weightstore.safetensors._writer",
        "TensorSlice": "weightstore.container._slice",
        **dict.fromkeys(("write_bytes", "write_file"), __name__),
    },
)  # fmt: skip


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
