"""Counting the bytes a load reads: every file of one format (SafeTensors unless told) opened
in pread mode through a source that adds up what each `read` returns (headers, the format
probe and tensor data)."""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Iterator
from types import ModuleType
from unittest import mock

from weightstore.io._source import PreadSource
from weightstore.safetensors import _reader


class ReadCounter:
    """Bytes read so far, by file."""

    def __init__(self) -> None:
        self.bytes: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.bytes.values())

    def by_file(self) -> dict[str, int]:
        return dict(self.bytes)


class _CountingSource(PreadSource):
    def __init__(self, path: str, counter: ReadCounter) -> None:
        super().__init__(path)
        self._counter = counter

    def read(self, offset: int, size: int, what: str, tensor: str | None = None) -> memoryview:
        view = super().read(offset, size, what, tensor)
        self._counter.bytes[os.path.basename(self._name or "")] += size
        return view


@contextlib.contextmanager
def counting_reads(reader_module: ModuleType = _reader) -> Iterator[ReadCounter]:
    """Within the block, the readers whose module is `reader_module` (the one that calls
    ``open_source``: SafeTensors' by default) read with pread and count every byte."""
    counter = ReadCounter()

    def open_counting(path: str | os.PathLike[str], mode: str = "mmap") -> PreadSource:
        return _CountingSource(os.fspath(path), counter)

    with mock.patch.object(reader_module, "open_source", open_counting):
        yield counter
