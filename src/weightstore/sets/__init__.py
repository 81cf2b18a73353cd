"""Sharded checkpoint sets: a directory of single-file containers and the index that is its
only commit point (docs/sharded.md)."""

from weightstore.sets._discover import SetWarning, find_set
from weightstore.sets._index import MAX_INDEX_SIZE, SET_ID_KEY, SetIndex, read_index
from weightstore.sets._layout import LAYOUTS, SetLayout, ShardName, layout_for, parse_shard_name
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
