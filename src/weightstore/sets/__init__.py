"""Sharded checkpoint sets: a directory of single-file containers and the index that is its
only commit point (docs/sharded.md)."""

from weightstore.sets._layout import LAYOUTS, SetLayout, ShardName, layout_for, parse_shard_name

__all__ = ["LAYOUTS", "SetLayout", "ShardName", "layout_for", "parse_shard_name"]
