"""Sharded checkpoint sets: a directory of single-file containers and the index that is its
only commit point (docs/sharded.md).

Each name loads its module on first use (`weightstore.base._lazy`), as the package root's do:
the command line asks `_discover` whether every path it is given names a set, and that question
must not load the reader, the writer and the DCP modules with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from weightstore.base._lazy import lazy_exports

if TYPE_CHECKING:  # the table below, as type checkers see it
    from weightstore.errors import SetWarning as SetWarning
    from weightstore.sets._discover import find_set as find_set
    from weightstore.sets._index import MAX_INDEX_SIZE as MAX_INDEX_SIZE
    from weightstore.sets._index import SET_ID_KEY as SET_ID_KEY
    from weightstore.sets._index import SetIndex as SetIndex
    from weightstore.sets._index import read_index as read_index
    from weightstore.sets._layout import LAYOUTS as LAYOUTS
    from weightstore.sets._layout import SetLayout as SetLayout
    from weightstore.sets._layout import ShardName as ShardName
    from weightstore.sets._layout import layout_for as layout_for
    from weightstore.sets._layout import parse_shard_name as parse_shard_name
    from weightstore.sets._reader import SetReader as SetReader
    from weightstore.sets._reader import SetReport as SetReport
    from weightstore.sets._reader import open_set as open_set
    from weightstore.sets._size import parse_size as parse_size
    from weightstore.sets._writer import DEFAULT_MAX_SHARD_SIZE as DEFAULT_MAX_SHARD_SIZE
    from weightstore.sets._writer import SetPlan as SetPlan
    from weightstore.sets._writer import commit_set as commit_set
    from weightstore.sets._writer import plan_set as plan_set
    from weightstore.sets._writer import plan_shards as plan_shards
    from weightstore.sets._writer import write_set as write_set
    from weightstore.sets._writer import write_shard as write_shard

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "SetWarning": "weightstore.errors",
        "find_set": "weightstore.sets._discover",
        **dict.fromkeys(
            ("MAX_INDEX_SIZE", "SET_ID_KEY", "SetIndex", "read_index"), "weightstore.sets._index"
        ),
        **dict.fromkeys(
            ("LAYOUTS", "SetLayout", "ShardName", "layout_for", "parse_shard_name"),
            "weightstore.sets._layout",
        ),
        **dict.fromkeys(("SetReader", "SetReport", "open_set"), "weightstore.sets._reader"),
        "parse_size": "weightstore.sets._size",
        **dict.fromkeys(
            (
                "DEFAULT_MAX_SHARD_SIZE", "SetPlan", "commit_set", "plan_set", "plan_shards",
                "write_set", "write_shard",
            ),
            "weightstore.sets._writer",
        ),
    },
)  # fmt: skip
