"""Counting the bytes a load reads from rank files: every burnpack or SafeTensors file opened
within the block reads through a pread source that adds up what each `read` returns, split
into tensor data and everything else (the header, the metadata)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from unittest import mock

from weightstore.burnpack import _reader as burnpack_reader
from weightstore.io._source import PreadSource
from weightstore.safetensors import _reader as safetensors_reader

TENSOR_DATA = "tensor data"  # what the readers name a read of a tensor's bytes


class ReadCounter:
    """Bytes read so far: of tensor data, and of headers."""

    def __init__(self) -> None:
        self.data_bytes = 0
        self.header_bytes = 0
        self.files = 0


class _CountingSource(PreadSource):
    def __init__(self, path: str, counter: ReadCounter) -> None:
        super().__init__(path)
        self._counter = counter
        counter.files += 1

    def read(self, offset: int, size: int, what: str, tensor: str | None = None) -> memoryview:
        view = super().read(offset, size, what, tensor)
        if what == TENSOR_DATA:
            self._counter.data_bytes += size
        else:
            self._counter.header_bytes += size
        return view


@contextlib.contextmanager
def counting_reads() -> Iterator[ReadCounter]:
    """Within the block, rank files open through a counting pread source."""
    counter = ReadCounter()

    def open_counting(path: str, mode: str = "mmap", **options: Any) -> PreadSource:
        return _CountingSource(str(path), counter)  # local files only: options are for URLs

    with (
        mock.patch.object(burnpack_reader, "open_source", open_counting),
        mock.patch.object(safetensors_reader, "open_source", open_counting),
    ):
        yield counter
