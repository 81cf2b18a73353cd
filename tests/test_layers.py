"""The package's import layering, checked on every module's source: lower layers never import
upper ones, so each file can be read knowing only what lies beneath it.

`LAYERS` is the one table: a module or package name and its rank. A module may import
weightstore modules of its own rank or below, never above; a module the table does not place
fails, so a new module is placed on purpose. Imports are read with `ast`, at module level and
inside functions alike (a lazy import is still a dependency); imports under
``if TYPE_CHECKING:`` are for annotations only and are exempt.

Two rules are stricter than a rank: some packages stand alone (`STANDS_ALONE`: the PyTorch
reader needs only NumPy and the vocabulary, paths need only the errors), and the optional heavy
dependencies are imported only where `HEAVY_IMPORTS` allows, so that
``import weightstore`` stays fast and works without them.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TypeGuard

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "weightstore"  # read, not imported
ROOT = "weightstore"

# The layers, lowest first. A key covers the module of that name and, for a
# package, every module inside it; the longest key wins. The package root covers only its own
# __init__ (it re-exports the public surface, so it sits on top).
LAYERS: dict[str, int] = {
    # 0: the vocabulary every layer shares.
    "weightstore._version": 0,
    "weightstore.errors": 0,
    "weightstore.dtypes": 0,
    "weightstore._render": 0,  # bounded rendering of file content, for every message
    "weightstore._record": 0,  # the immutable record base, in place of frozen dataclasses
    "weightstore._gc": 0,  # pausing the garbage collector over allocation-heavy work
    # 1: byte sources: where bytes come from and how they reach a disk atomically.
    "weightstore._bytesource": 1,
    "weightstore._atomic": 1,
    "weightstore._remote": 1,  # URLs: the fsspec filesystem behind one, imported on first use
    "weightstore._remote_source": 1,  # a URL as a byte source: planned, concurrent range reads
    "weightstore._remote_write": 1,  # saves to URLs: uploads completed whole, a set's folder
    # 2: what every container shares: the reader and writer protocols, the writer's input
    # (`TensorEntry`), lazy slicing, and the `ContainerFormat` record each container fills in.
    # Format-free and model-free, so the containers above may all use them.
    "weightstore._reader_base": 2,
    "weightstore._writer_base": 2,
    "weightstore._slice": 2,
    "weightstore._format": 2,
    "weightstore.entry": 2,
    # 3: container formats; the PyTorch reader is also held to STANDS_ALONE.
    "weightstore.burnpack": 3,
    "weightstore.safetensors": 3,
    "weightstore.pytorch_reader": 3,
    # 4: the format registry: the list of FORMAT records and detection.
    "weightstore.formats": 4,
    # 4: sharded sets: a directory of single-file containers and its index.
    "weightstore.sets": 4,
    # 5: snapshots and path strings.
    "weightstore.snapshot": 5,
    "weightstore.paths": 5,
    # 6: snapshot-to-snapshot transforms, and the load report built from paths.
    "weightstore.adapters": 6,
    "weightstore.apply_result": 6,
    # 7: model bridges, and collect/apply, which walk a model through them. They sit below the
    # stores (design.md draws them above): a store's apply_to/collect_from run the pipeline,
    # and a store still knows no torch, since the torch bridge is imported only for a torch
    # model, inside bridge_for.
    "weightstore.bridge": 7,
    "weightstore.transfer": 7,
    # 8: stores over the registry.
    "weightstore.stores": 8,
    # 9: the simple API.
    "weightstore.record": 9,
    "weightstore.module_snapshot": 9,
    "weightstore.distributed": 9,  # tensor-parallel loads and rank-aware saves over a store
    "weightstore.dcp": 9,  # torch.distributed.checkpoint storage on weightstore files
    # 10: the commands people type, and the package root that re-exports everything.
    "weightstore.cli": 10,
    "weightstore.__main__": 10,
    ROOT: 10,
}


@dataclass(frozen=True)
class StandsAlone:
    """What a self-contained package may import besides itself and the standard library."""

    weightstore: frozenset[str]  # weightstore modules (and packages)
    third_party: frozenset[str]  # top-level names of installed distributions


STANDS_ALONE: dict[str, StandsAlone] = {
    # A reader of untrusted pickles that can be read, fuzzed or lifted out on its own.
    "weightstore.pytorch_reader": StandsAlone(
        frozenset(
            {
                "weightstore.dtypes",
                "weightstore.errors",
                "weightstore._bytesource",
                "weightstore._format",  # the FORMAT record type: a plain record, no behaviour
                "weightstore._render",  # bounded_repr: standard library only
                "weightstore._record",  # the record base: standard library only
                "weightstore._gc",  # collector_paused: standard library only
            }
        ),
        frozenset({"numpy"}),
    ),
    # Path strings only: stores and model bridges share it, whatever they hold.
    "weightstore.paths": StandsAlone(
        frozenset({"weightstore.errors", "weightstore._record"}), frozenset()
    ),
}


@dataclass(frozen=True)
class HeavyRule:
    """Where one optional dependency may be imported."""

    allowed_in: frozenset[str]  # modules that may import it at all
    lazy_elsewhere: bool  # whether other modules may import it inside a function


HEAVY_IMPORTS: dict[str, HeavyRule] = {
    "torch": HeavyRule(
        frozenset(
            {
                "weightstore.bridge._torch",
                "weightstore.bridge._distributed",
                "weightstore.bridge._dcp",  # torch.distributed.checkpoint storage
            }
        ),
        lazy_elsewhere=False,
    ),
    "fsspec": HeavyRule(frozenset({"weightstore._remote"}), lazy_elsewhere=False),
    # The JAX bridge is imported only for a JAX model (bridge_for), and imports flax only
    # for an NNX module, found without importing it.
    "jax": HeavyRule(frozenset({"weightstore.bridge._jax"}), lazy_elsewhere=False),
    "flax": HeavyRule(frozenset({"weightstore.bridge._jax"}), lazy_elsewhere=False),
}


@dataclass(frozen=True)
class Import:
    """One import statement's target, as a dotted module name."""

    module: str
    line: int
    in_function: bool


def _module_name(path: Path) -> str:
    parts = (ROOT, *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_package(module: str) -> bool:
    return (PACKAGE.joinpath(*module.split(".")[1:]) / "__init__.py").exists()


def _is_module(module: str) -> bool:
    relative = PACKAGE.joinpath(*module.split(".")[1:])
    return relative.with_suffix(".py").exists() or (relative / "__init__.py").exists()


def _is_type_checking(node: ast.AST) -> TypeGuard[ast.If]:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(node: ast.Import | ast.ImportFrom, module: str) -> Iterator[str]:
    """The modules an import statement loads; ``from pkg import sub`` loads ``pkg.sub``."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:  # relative: resolve against the importing module's package
        package = module if _is_package(module) else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        yield submodule if base.split(".")[0] == ROOT and _is_module(submodule) else base


@cache
def _imports(path: Path) -> list[Import]:
    """Every import in the file outside ``if TYPE_CHECKING:`` blocks (parsed once per run)."""
    return _imports_in(ast.parse(path.read_text(encoding="utf-8")), _module_name(path))


def _imports_in(tree: ast.Module, module: str) -> list[Import]:
    """Every import in `tree`, read as the source of `module`, outside TYPE_CHECKING blocks."""
    found: list[Import] = []
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, in_function = stack.pop()
        if _is_type_checking(node):
            stack.extend((child, in_function) for child in node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.extend(Import(t, node.lineno, in_function) for t in _targets(node, module))
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))
    return list(dict.fromkeys(found))  # ``from pkg import a, b`` loads pkg once


def _layer(module: str) -> tuple[str, int] | None:
    """The table key that places `module`, and its rank; None when no key covers it."""
    if module == ROOT:
        return ROOT, LAYERS[ROOT]
    covering = [key for key in LAYERS if key != ROOT and (module + ".").startswith(key + ".")]
    if not covering:
        return None
    key = max(covering, key=len)
    return key, LAYERS[key]


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_every_module_has_a_place_in_the_table() -> None:
    unplaced = [_module_name(path) for path in _sources() if _layer(_module_name(path)) is None]
    assert not unplaced, f"place these modules in LAYERS: {unplaced}"


def test_no_module_imports_a_layer_above_its_own() -> None:
    violations = []
    for path in _sources():
        module = _module_name(path)
        placed = _layer(module)
        if placed is None:
            continue  # reported by the test above
        key, rank = placed
        for found in _imports(path):
            if found.module.split(".")[0] != ROOT:
                continue
            target = _layer(found.module)
            if target is None:
                violations.append(f"{module}:{found.line} imports unplaced {found.module}")
            elif target[1] > rank:
                violations.append(
                    f"{module}:{found.line} ({key}, layer {rank}) imports {found.module} "
                    f"({target[0]}, layer {target[1]})"
                )
    assert not violations, "imports against the layer table:\n" + "\n".join(violations)


def _allowed_alone(imported: str, package: str, rule: StandsAlone) -> bool:
    top = imported.split(".")[0]
    if top != ROOT:
        return top in sys.stdlib_module_names or top in rule.third_party
    return _within(imported, package) or any(_within(imported, n) for n in rule.weightstore)


@pytest.mark.parametrize("package", sorted(STANDS_ALONE))
def test_a_standalone_package_imports_only_what_it_is_allowed(package: str) -> None:
    rule = STANDS_ALONE[package]
    violations = []
    for path in _sources():
        module = _module_name(path)
        if _within(module, package):
            violations += [
                f"{module}:{found.line} imports {found.module}"
                for found in _imports(path)
                if not _allowed_alone(found.module, package, rule)
            ]
    allowed = sorted(rule.weightstore | rule.third_party)
    listing = "\n".join(violations)
    assert not violations, f"{package} may import only {allowed} and the stdlib:\n{listing}"


@pytest.mark.parametrize("dependency", sorted(HEAVY_IMPORTS))
def test_heavy_dependencies_are_imported_only_where_allowed(dependency: str) -> None:
    rule = HEAVY_IMPORTS[dependency]
    violations = []
    for path in _sources():
        module = _module_name(path)
        if module in rule.allowed_in:
            continue
        for found in _imports(path):
            if found.module.split(".")[0] != dependency:
                continue
            if not (rule.lazy_elsewhere and found.in_function):
                where = "inside a function" if found.in_function else "at module level"
                violations.append(f"{module}:{found.line} imports {found.module} {where}")
    listing = "\n".join(violations)
    assert not violations, f"{dependency} imported where it is not allowed:\n{listing}"


def test_the_import_reader_sees_lazy_and_relative_imports_and_skips_type_checking() -> None:
    code = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import torch\nelse:\n    import numpy\n"
        "def f():\n    from weightstore import cli, _version\n"
        "from . import _base\n"
        "from .. import errors\n"
    )
    found = {(i.module, i.in_function) for i in _imports_in(ast.parse(code), "weightstore.stores")}
    assert found == {
        ("typing", False),
        ("numpy", False),
        ("weightstore.cli", True),  # a submodule imported by name from its package
        ("weightstore._version", True),
        ("weightstore.stores._base", False),  # relative to the package itself
        ("weightstore.errors", False),
    }
