"""Sharded checkpoint sets: a directory of single-file containers and the index that is its
only commit point (docs/sharded.md).

Each name loads its module on first use (`__getattr__`), as the package root does: the command
line asks `_discover` whether every path it is given names a set, and that question must not
load the reader, the writer and the DCP modules with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see; at run time `__getattr__` provides them
    from weightstore.sets._discover import SetWarning, find_set
    from weightstore.sets._index import MAX_INDEX_SIZE, SET_ID_KEY, SetIndex, read_index
    from weightstore.sets._layout import (
        LAYOUTS,
        SetLayout,
        ShardName,
        layout_for,
        parse_shard_name,
    )
    from weightstore.sets._reader import SetReader, SetReport, open_set
    from weightstore.sets._size import parse_size
    from weightstore.sets._writer import (
        DEFAULT_MAX_SHARD_SIZE,
        SetPlan,
        commit_set,
        plan_set,
        plan_shards,
        write_set,
        write_shard,
    )

_HOME: dict[str, str] = {
    **dict.fromkeys(("SetWarning", "find_set"), "_discover"),
    **dict.fromkeys(("MAX_INDEX_SIZE", "SET_ID_KEY", "SetIndex", "read_index"), "_index"),
    **dict.fromkeys(
        ("LAYOUTS", "SetLayout", "ShardName", "layout_for", "parse_shard_name"), "_layout"
    ),
    **dict.fromkeys(("SetReader", "SetReport", "open_set"), "_reader"),
    "parse_size": "_size",
    **dict.fromkeys(
        (
            "DEFAULT_MAX_SHARD_SIZE",
            "SetPlan",
            "commit_set",
            "plan_set",
            "plan_shards",
            "write_set",
            "write_shard",
        ),
        "_writer",
    ),
}

__all__ = [
    "DEFAULT_MAX_SHARD_SIZE",
    "LAYOUTS",
    "MAX_INDEX_SIZE",
    "SET_ID_KEY",
    "SetIndex",
    "SetLayout",
    "SetPlan",
    "SetReader",
    "SetReport",
    "SetWarning",
    "ShardName",
    "commit_set",
    "find_set",
    "layout_for",
    "open_set",
    "parse_shard_name",
    "parse_size",
    "plan_set",
    "plan_shards",
    "read_index",
    "write_set",
    "write_shard",
]
assert set(__all__) == set(_HOME), "every public name has a home module"


def __getattr__(name: str) -> Any:
    """Import a name's module on first use and keep the name here."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
