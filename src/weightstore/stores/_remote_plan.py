"""Telling a remote reader, before a load reads anything, which tensors the load will read whole.

A load from a URL reads best in a few large, concurrent requests (`weightstore.io._remote_source`),
which needs the whole list up front, while the load itself asks for one tensor at a time. So
`Store._apply_snapshots` hands the snapshots it is about to apply here first, and each reader
behind them gets the names of the tensors that will be read whole (`plan_reads`):

- a snapshot the store made (``reader.get`` bound to a name, `snapshot.ReaderLoad`) is
  planned, unless the store's filter drops it by name;
- a snapshot that reads a slice (`weightstore.distributed`) or anything else is not: its reads
  are exactly the bytes it needs, so planning the whole tensor would fetch more.

The filter is applied here to the names as the load sees them, the way `stores._sets` restricts
a set; when it cannot decide from names alone (predicates, adapters, renumbering), every
snapshot the store made is planned. A planned tensor the load then never reads (a name the model
lacks) may still be fetched with its neighbours; nothing outside the planned tensors is.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from weightstore.stores._sets import wanted_names

if TYPE_CHECKING:
    from weightstore.snapshot import TensorSnapshot
    from weightstore.stores._options import StoreOptions

__all__ = ["plan_reads_for_load"]


def plan_reads_for_load(
    snapshots: Iterable[TensorSnapshot], options: StoreOptions, path: str
) -> None:
    """Announce to each reader behind `snapshots` the tensors a load with `options` reads
    whole (see the module docstring)."""
    listed = list(snapshots)
    # The snapshots carry the names after remapping already: the filter sees them as they are.
    unmapped = options.replace(remapper=None)
    wanted = wanted_names(unmapped, [s.full_path for s in listed], path)
    kept = None if wanted is None else set(wanted)
    readers: dict[int, tuple[Any, list[str]]] = {}
    for snapshot in listed:
        if kept is not None and snapshot.full_path not in kept:
            continue
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
