"""Shared by the SafeTensors tests: one fixture that opens a file through every backend."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from weightstore.safetensors import SafetensorsReader

Opener = Callable[[Path], SafetensorsReader]
OPENERS: dict[str, Opener] = {
    "mmap": lambda p: SafetensorsReader.from_file(p),
    "pread": lambda p: SafetensorsReader.from_file(p, mode="pread"),
    "bytes": lambda p: SafetensorsReader.from_bytes(p.read_bytes()),
    "static": lambda p: SafetensorsReader.from_static(bytearray(p.read_bytes())),
}


@pytest.fixture(params=sorted(OPENERS))
def open_reader(request: pytest.FixtureRequest) -> Opener:
    """Opens a path with mmap, pread, `from_bytes` or `from_static`, one test run each."""
    opener: Opener = OPENERS[request.param]
    return opener
