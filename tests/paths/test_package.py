"""The paths package: its public names and the examples in its docstrings (its imports are
checked with every other package's in tests/test_layers.py)."""

from __future__ import annotations

import doctest

import pytest

import weightstore.paths
from weightstore.paths import _filter, _indices, _regex, _remap

PUBLIC = [
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


def test_public_names_are_pinned() -> None:
    assert weightstore.paths.__all__ == PUBLIC
    for name in PUBLIC:
        assert hasattr(weightstore.paths, name), name


@pytest.mark.parametrize("module", [_filter, _indices, _regex, _remap])
def test_docstring_examples_run(module: object) -> None:
    failed, _ = doctest.testmod(module)  # type: ignore[arg-type]
    assert failed == 0
