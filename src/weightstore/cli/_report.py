"""What `weightstore inspect` shows about a file, independent of how it is printed.

Each format of the registry (`weightstore.formats.FORMATS`) has one summarizer in
`SUMMARIZERS`, keyed by the format's name and checked against the registry at import; the CLI
detects the format through the registry and calls it. A new format is one function and one row.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from weightstore.burnpack import BurnpackReader
from weightstore.dtypes import DType
from weightstore.errors import (
    DescriptorError,
    DTypeError,
    UnsupportedObjectError,
)
from weightstore.formats import FORMATS, detect_format
from weightstore.pytorch_reader import PytorchReader
from weightstore.safetensors import SafetensorsReader

__all__ = ["SUMMARIZERS", "FileReport", "TensorRow", "summarize"]


@dataclass(frozen=True, slots=True)
class TensorRow:
    """One tensor as `inspect` lists it; read from the header, no tensor data."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    nbytes: int
    offset: int | None = None  # absolute byte offset, where the format has one

    @property
    def numel(self) -> int:
        """Elements in the tensor."""
        return math.prod(self.shape)


@dataclass(slots=True)
class FileReport:
    """What `inspect` shows about one file, independent of how it is printed."""

    path: str
    format: str  # the registry's name of the format
    file_size: int
    version: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    scalars: dict[str, Any] = field(default_factory=dict)
    tensors: list[TensorRow] = field(default_factory=list)
    # Non-tensor entries (PyTorch checkpoints carry configs, epochs, ...): name -> short repr.
    others: dict[str, str] = field(default_factory=dict)

    @property
    def total_nbytes(self) -> int:
        """Bytes of every listed tensor."""
        return sum(row.nbytes for row in self.tensors)

    @property
    def total_numel(self) -> int:
        """Elements of every listed tensor."""
        return sum(row.numel for row in self.tensors)


def _summarize_burnpack(path: str, options: dict[str, Any]) -> FileReport:
    with BurnpackReader.from_file(path) as pack:
        rows = [
            TensorRow(d.name, d.dtype, d.shape, d.nbytes, pack.data_start + d.data_offsets[0])
            for d in sorted(pack.descriptors.values(), key=lambda d: d.data_offsets)
        ]
        return FileReport(
            path=path,
            format="burnpack",
            file_size=os.path.getsize(path),
            version=str(pack.version),
            metadata=dict(pack.metadata()),
            scalars={key: scalar.value for key, scalar in pack.scalars.items()},
            tensors=rows,
        )


def _summarize_safetensors(path: str, options: dict[str, Any]) -> FileReport:
    with SafetensorsReader.from_file(path) as st:
        rows = [
            TensorRow(d.name, d.dtype, d.shape, d.nbytes, st.data_start + d.data_offsets[0])
            for d in st.descriptors.values()  # already in data order
        ]
        return FileReport(
            path=path,
            format="safetensors",
            file_size=os.path.getsize(path),
            metadata=dict(st.metadata()),
            tensors=rows,
        )


def _summarize_pytorch(path: str, options: dict[str, Any]) -> FileReport:
    with PytorchReader(path, top_level_key=options.get("top_level_key")) as reader:
        meta = reader.metadata()
        rows, broken = [], {}
        for name in reader:
            try:
                tensor = reader.tensor(name)
                rows.append(TensorRow(name, tensor.dtype, tensor.shape, tensor.nbytes))
            except (DTypeError, UnsupportedObjectError, DescriptorError) as err:
                broken[name] = f"unreadable tensor: {err.detail}"  # listed, not fatal
        facts = ("format", "byte_order", "pickle_protocol", "format_version", "storage_alignment")
        return FileReport(
            path=path,
            format="pytorch",
            file_size=os.path.getsize(path),
            metadata={key: str(meta[key]) for key in facts if meta[key] is not None},
            tensors=rows,
            others={**reader.others(), **broken},
        )


Summarizer = Callable[[str, dict[str, Any]], FileReport]
# One summarizer per registered format, by the format's name; checked below at import.
SUMMARIZERS: dict[str, Summarizer] = {
    "burnpack": _summarize_burnpack,
    "safetensors": _summarize_safetensors,
    "pytorch": _summarize_pytorch,
}


assert set(SUMMARIZERS) == {fmt.name for fmt in FORMATS}, "one summarizer per format"


def summarize(path: str | os.PathLike[str], **options: Any) -> FileReport:
    """Detect the format of `path` and describe its contents without reading tensor data."""
    filename = os.fspath(path)
    return SUMMARIZERS[detect_format(filename).name](filename, options)
