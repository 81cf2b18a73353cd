"""Telling a remote reader, before a load reads anything, which tensors the load will read whole.

A load from a URL reads best in a few large, concurrent requests (`weightstore.io._remote_source`),
which needs the whole list up front, while the load itself asks for one tensor at a time. So
the load (`transfer._apply.apply`) hands the snapshots it is about to read, once matching
against the model, the filter, remapping, ties and adapters have settled them, to
`announce_reads`, and each reader behind them gets the names it will be asked for whole
(`plan_reads`):

- a snapshot the store made (``reader.get`` bound to a name, `snapshot.ReaderLoad`) is
  announced under the name the file holds;
- a snapshot that reads a slice (`weightstore.distributed`), or one a layout rule builds from
  several, is not: its reads are exactly the bytes it needs, each fetched on its own.

So a model holding one of a file's tensors fetches that tensor (and the header), not the file.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from weightstore.snapshot import TensorSnapshot

__all__ = ["announce_reads"]


def announce_reads(snapshots: Iterable[TensorSnapshot]) -> None:
    """Announce to each reader behind `snapshots` the tensors a load will read whole, in the
    order given (see the module docstring)."""
    readers: dict[int, tuple[Any, list[str]]] = {}
    for snapshot in snapshots:
        found = _reader_and_name(snapshot.load)
        if found is not None:
            reader, name = found
            readers.setdefault(id(reader), (reader, []))[1].append(name)
    for reader, names in readers.values():
        plan = getattr(reader, "plan_reads", None)
        if plan is not None:
            plan(names)


def _reader_and_name(load: Any) -> tuple[Any, str] | None:
    """The reader and tensor name of a store's own snapshot load (`snapshot.ReaderLoad`, a
    partial of ``reader.get``), else None."""
    if not isinstance(load, functools.partial) or len(load.args) != 1 or load.keywords:
        return None
    method, name = load.func, load.args[0]
    if getattr(method, "__name__", None) != "get" or not isinstance(name, str):
        return None
    reader = getattr(method, "__self__", None)
    return None if reader is None else (reader, name)
