"""Tensor paths: which to select, how to rename them, how to renumber lists.

Everything here works on dot-joined path strings (``encoder.layers.0.weight``) and knows nothing
of file formats, snapshots or torch, so stores and model bridges share one implementation:

* `PathFilter` selects paths (OR of regexes, exact paths, predicates; empty = everything);
* `KeyRemapper` renames them through an ordered chain of regex rules;
* `map_indices_contiguous` closes gaps in numbered lists (``fc.0, fc.2`` -> ``fc.0, fc.1``);
* `strip_enum_variants` drops Burn's enum-variant levels from a path.

Regexes may be written in Rust's syntax (as for Burn) or Python's; `compile_pattern` is the one
place that reads them.
"""

from __future__ import annotations

from weightstore.paths._filter import PathFilter, PathPredicate
from weightstore.paths._indices import (
    ENUM_CONTAINER_PREFIX,
    is_variant_segment,
    map_indices_contiguous,
    map_indices_contiguous_except,
    parse_index,
    strip_enum_variants,
)
from weightstore.paths._regex import compile_pattern
from weightstore.paths._remap import KeyRemapper, RemapRule

__all__ = [
    "ENUM_CONTAINER_PREFIX",
    "KeyRemapper",
    "PathFilter",
    "PathPredicate",
    "RemapRule",
    "compile_pattern",
    "is_variant_segment",
    "map_indices_contiguous",
    "map_indices_contiguous_except",
    "parse_index",
    "strip_enum_variants",
]
