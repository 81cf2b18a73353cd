"""Burn's burnpack (``.bpk``) container: a 10-byte header, CBOR metadata, 256-aligned tensors.

This package knows byte layouts only, nothing of models. `BurnpackReader` opens a file by its
header and hands out tensors as NumPy views; `BurnpackWriter` streams `TensorEntry` objects into
a file atomically or into bytes, byte-identical to Burn's own writer.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from weightstore.base._lazy import lazy_exports
from weightstore.burnpack._format import EXTENSION as EXTENSION
from weightstore.burnpack._format import FORMAT as FORMAT
from weightstore.burnpack._format import MAGIC as MAGIC
from weightstore.burnpack._format import MAGIC_BYTES as MAGIC_BYTES

if TYPE_CHECKING:  # the lazy part of the table below, as type checkers see it
    from weightstore.burnpack._layout import FORMAT_VERSION as FORMAT_VERSION
    from weightstore.burnpack._layout import HEADER_SIZE as HEADER_SIZE
    from weightstore.burnpack._layout import MAX_CBOR_DEPTH as MAX_CBOR_DEPTH
    from weightstore.burnpack._layout import MAX_FILE_SIZE as MAX_FILE_SIZE
    from weightstore.burnpack._layout import MAX_METADATA_SIZE as MAX_METADATA_SIZE
    from weightstore.burnpack._layout import MAX_TENSOR_COUNT as MAX_TENSOR_COUNT
    from weightstore.burnpack._layout import MAX_TENSOR_SIZE as MAX_TENSOR_SIZE
    from weightstore.burnpack._layout import TENSOR_ALIGNMENT as TENSOR_ALIGNMENT
    from weightstore.burnpack._layout import Scalar as Scalar
    from weightstore.burnpack._layout import TensorDescriptor as TensorDescriptor
    from weightstore.burnpack._layout import data_start as data_start
    from weightstore.burnpack._reader import BurnpackReader as BurnpackReader
    from weightstore.burnpack._writer import BurnpackWriter as BurnpackWriter
    from weightstore.entry import TensorEntry

# The layout, reader and writer (and cbor2, NumPy) load on first use: the format registry
# imports this package for `FORMAT`, and most programs never open a burnpack file.
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(
            ("EXTENSION", "FORMAT", "MAGIC", "MAGIC_BYTES"), "weightstore.burnpack._format"
        ),
        **dict.fromkeys(
            (
                "FORMAT_VERSION", "HEADER_SIZE", "MAX_CBOR_DEPTH", "MAX_FILE_SIZE",
                "MAX_METADATA_SIZE", "MAX_TENSOR_COUNT", "MAX_TENSOR_SIZE", "TENSOR_ALIGNMENT",
                "Scalar", "TensorDescriptor", "data_start",
            ),
            "weightstore.burnpack._layout",
        ),
        "BurnpackReader": "weightstore.burnpack._reader",
        "BurnpackWriter": "weightstore.burnpack._writer",
        **dict.fromkeys(("write_bytes", "write_file"), __name__),
    },
)  # fmt: skip


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
