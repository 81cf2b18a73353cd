"""Burn's burnpack (``.bpk``) container: a 10-byte header, CBOR metadata, 256-aligned tensors.

This package knows byte layouts only, nothing of models. `BurnpackReader` opens a file by its
header and hands out tensors as NumPy views; `BurnpackWriter` streams `TensorEntry` objects into
a file atomically or into bytes, byte-identical to Burn's own writer.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from weightstore.burnpack._format import EXTENSION, FORMAT, MAGIC, MAGIC_BYTES

if TYPE_CHECKING:
    from weightstore.burnpack._layout import (
        FORMAT_VERSION,
        HEADER_SIZE,
        MAX_CBOR_DEPTH,
        MAX_FILE_SIZE,
        MAX_METADATA_SIZE,
        MAX_TENSOR_COUNT,
        MAX_TENSOR_SIZE,
        TENSOR_ALIGNMENT,
        Scalar,
        TensorDescriptor,
        data_start,
    )
    from weightstore.burnpack._reader import BurnpackReader
    from weightstore.burnpack._writer import BurnpackWriter
    from weightstore.entry import TensorEntry

__all__ = [
    "EXTENSION",
    "FORMAT",
    "FORMAT_VERSION",
    "HEADER_SIZE",
    "MAGIC",
    "MAGIC_BYTES",
    "MAX_CBOR_DEPTH",
    "MAX_FILE_SIZE",
    "MAX_METADATA_SIZE",
    "MAX_TENSOR_COUNT",
    "MAX_TENSOR_SIZE",
    "TENSOR_ALIGNMENT",
    "BurnpackReader",
    "BurnpackWriter",
    "Scalar",
    "TensorDescriptor",
    "data_start",
    "write_bytes",
    "write_file",
]


def write_bytes(
    entries: Iterable[TensorEntry],
    metadata: Mapping[str, str] | None = None,
    scalars: Mapping[str, int | float | bool | Scalar] | None = None,
) -> bytes:
    """A burnpack container in memory; shorthand for ``BurnpackWriter(...).to_bytes()``."""
    from weightstore.burnpack._writer import BurnpackWriter

    return BurnpackWriter(entries, metadata, scalars).to_bytes()


def write_file(
    path: str | os.PathLike[str],
    entries: Iterable[TensorEntry],
    metadata: Mapping[str, str] | None = None,
    scalars: Mapping[str, int | float | bool | Scalar] | None = None,
    *,
    overwrite: bool = False,
    auto_extension: bool = True,
    durable: bool = True,
) -> str:
    """Save a burnpack file atomically; returns the path written (``.bpk`` added if needed).
    ``durable=False`` skips the fsyncs but keeps the atomic rename (`ContainerWriter.save`)."""
    from weightstore.burnpack._writer import BurnpackWriter

    writer = BurnpackWriter(entries, metadata, scalars)
    return writer.save(path, overwrite=overwrite, auto_extension=auto_extension, durable=durable)


# The layout, reader and writer (and cbor2, NumPy) load on first use: the format registry
# imports this package for `FORMAT`, and most programs never open a burnpack file.
_LAZY: dict[str, str] = {
    "BurnpackReader": "_reader",
    "BurnpackWriter": "_writer",
    **dict.fromkeys(
        (
            "FORMAT_VERSION", "HEADER_SIZE", "MAX_CBOR_DEPTH", "MAX_FILE_SIZE",
            "MAX_METADATA_SIZE", "MAX_TENSOR_COUNT", "MAX_TENSOR_SIZE", "TENSOR_ALIGNMENT",
            "Scalar", "TensorDescriptor", "data_start",
        ),
        "_layout",
    ),
}  # fmt: skip


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
