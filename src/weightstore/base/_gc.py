"""`collector_paused()`: run a block with Python's cyclic garbage collector off.

A header parse, a checkpoint open and a store load each allocate a few objects per tensor and
keep them all: none is garbage. In a process that has imported torch the heap holds hundreds of
thousands of tracked objects, and those allocations trip full collections that walk all of
them (20-40 ms of a 100 ms SafeTensors load, 100-200 ms of a `.pt` open on the 2-core
development machine) while the peers, allocating little, escape them. Paused, each costs what
its own work costs. A hostile file's cycles are collected later, as usual, and its size stays
capped by the readers' limits.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


@contextmanager
def collector_paused() -> Iterator[None]:
    """The body runs with the collector off; afterwards it is on again only if it was on
    before, also when the body raises. So pauses nest: only the outermost one re-enables."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
