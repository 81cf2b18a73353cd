"""The paths package: its public names, its layering, and the examples in its docstrings."""

from __future__ import annotations

import ast
import doctest
from pathlib import Path

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


def test_paths_import_nothing_but_the_standard_library_and_errors() -> None:
    folder = Path(weightstore.paths.__file__).parent
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                module = node.module
            elif isinstance(node, ast.Import):
                module = node.names[0].name
            else:
                continue
            if module.startswith("weightstore"):
                assert module.startswith(("weightstore.errors", "weightstore.paths")), path.name
            assert module.split(".")[0] not in {"torch", "numpy"}, path.name


@pytest.mark.parametrize("module", [_filter, _indices, _regex, _remap])
def test_docstring_examples_run(module: object) -> None:
    failed, _ = doctest.testmod(module)  # type: ignore[arg-type]
    assert failed == 0
