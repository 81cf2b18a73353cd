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
    # 0: the vocabulary every layer shares: dtypes, errors, and the base package (immutable
    # records, bounded rendering, the collector pause, lazy exports, the version).
    "weightstore.errors": 0,
    "weightstore.dtypes": 0,
    "weightstore.base": 0,
    # 1: the byte layer: where bytes come from and how they reach a disk or an object store
    # atomically; the only fsspec import is io._fs.
    "weightstore.io": 1,
    # 2: the container kit: the reader and writer protocols and bases, lazy slicing, the
    # `ContainerFormat` record each container fills in, and the writer's input (`TensorEntry`).
    # Format-free and model-free, so the containers above may all use them.
    "weightstore.container": 2,
    "weightstore.entry": 2,
    # 2: quantized blocks: the ggml block layouts' NumPy kernels (dequantize, quantize), shared
    # by GGUF and the quantized layouts of other containers; format-free and model-free.
    "weightstore.quantized": 2,
    # 3: container formats; the PyTorch reader is also held to STANDS_ALONE.
    "weightstore.burnpack": 3,
    "weightstore.safetensors": 3,
    "weightstore.pytorch_reader": 3,
    "weightstore.gguf": 3,
    # 4: the format registry and the resolver of what is at a path.
    "weightstore.formats": 4,
    "weightstore.locate": 4,
    # 4: multi-file checkpoints: sharded sets, and DCP checkpoints (all of weightstore.dcp but
    # its torch storage classes and its lazy front door).
    "weightstore.sets": 4,
    "weightstore.dcp": 4,
    "weightstore.training": 4,  # DeepSpeed ZeRO, Orbax: training checkpoints without frameworks
    # 5: snapshots and path strings.
    "weightstore.snapshot": 5,
    "weightstore.paths": 5,
    # 6: snapshot-to-snapshot transforms; the load report (data, diagnosis, text) and the load
    # plan's types and rules, which bridges receive.
    "weightstore.adapters": 6,
    "weightstore.report": 6,
    "weightstore.transfer": 6,
    # 7: model bridges, which receive the plan, and collect/apply (transfer._apply), which walk
    # a model through them. They sit below the stores (design.md draws them above): a store's
    # apply_to/collect_from run the pipeline, and a store still knows no torch, since the torch
    # bridge is imported only for a torch model, inside bridge_for.
    "weightstore.bridge": 7,
    "weightstore.transfer._apply": 7,
    # 8: stores over the registry.
    "weightstore.stores": 8,
    # 9: the simple API, and what runs on torch.distributed.
    "weightstore.record": 9,
    "weightstore.module_snapshot": 9,
    "weightstore.distributed": 9,  # tensor-parallel loads and rank-aware saves over a store
    "weightstore.dcp._storage": 9,  # torch.distributed.checkpoint storage classes
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
                "weightstore.io",  # byte sources: local, memory, and URLs by range reads
                "weightstore.container._format",  # the FORMAT record type: a plain record
                "weightstore.container._slice",  # index rules and byte runs: NumPy and io only
                "weightstore.base._render",  # bounded_repr: standard library only
                "weightstore.base._boxes",  # box_ranges: a get_dequantized_part box, checked
                "weightstore.base._cause",  # what bytes that are no weights are: the errors only
                "weightstore.base._record",  # the record base: standard library only
                "weightstore.base._gc",  # collector_paused: standard library only
                "weightstore.base._lazy",  # lazy exports: standard library only
            }
        ),
        frozenset({"numpy"}),
    ),
    # Path strings only: stores and model bridges share it, whatever they hold.
    "weightstore.paths": StandsAlone(
        frozenset({"weightstore.errors", "weightstore.base._record"}), frozenset()
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
                "weightstore.distributed._torch",
                "weightstore.distributed._fanout",  # broadcasts of tensors read once
                "weightstore.dcp._storage",  # torch.distributed.checkpoint storage
            }
        ),
        lazy_elsewhere=False,
    ),
    "fsspec": HeavyRule(frozenset({"weightstore.io._fs"}), lazy_elsewhere=False),
    # The JAX bridge is imported only for a JAX model (bridge_for), and imports flax only
    # for an NNX module, found without importing it.
    "jax": HeavyRule(frozenset({"weightstore.bridge._jax"}), lazy_elsewhere=False),
    "flax": HeavyRule(frozenset({"weightstore.bridge._jax"}), lazy_elsewhere=False),
    # Orbax's arrays (OCDBT, zarr) decode only through tensorstore, imported on first read.
    "tensorstore": HeavyRule(frozenset({"weightstore.training._orbax"}), lazy_elsewhere=False),
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
        "def f():\n    from weightstore import cli, dtypes\n"
        "from . import _base\n"
        "from .. import errors\n"
    )
    found = {(i.module, i.in_function) for i in _imports_in(ast.parse(code), "weightstore.stores")}
    assert found == {
        ("typing", False),
        ("numpy", False),
        ("weightstore.cli", True),  # a submodule imported by name from its package
        ("weightstore.dtypes", True),
        ("weightstore.stores._base", False),  # relative to the package itself
        ("weightstore.errors", False),
    }


def _every_import(path: Path) -> list[str]:
    """Every weightstore module `path` imports: at module level, inside functions and under
    ``if TYPE_CHECKING:`` alike (a type-only import still ties the two modules together)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module = _module_name(path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found += [t for t in _targets(node, module) if t.split(".")[0] == ROOT]
    return found


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports. Importing ``pkg.sub`` runs ``pkg`` first, but
    that edge is the interpreter's, not the code's: a package's ``__init__`` that imports
    nothing of its submodules ties no knot, so only written imports are edges."""
    modules = {_module_name(path): path for path in _sources()}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        graph[module] = {
            target for target in _every_import(path) if target in modules and target != module
        }
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, with
    an explicit stack: the package is deep enough to make recursion a risk)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles_counting_lazy_and_type_only_imports() -> None:
    cycles = _cycles(_import_graph())
    listing = "\n".join(" <-> ".join(cycle) for cycle in cycles)
    assert not cycles, f"modules that import each other, directly or around a loop:\n{listing}"


def test_the_cycle_finder_finds_a_loop_and_passes_a_chain() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


# Inside a package, siblings import each other at module level; only package boundaries defer.
# These deferrals inside a package remain, each because the sibling brings in what most users
# of the package never pay for: a framework, fsspec, a format's parser, one command's code.
LAZY_SIBLINGS: dict[tuple[str, str], str] = {
    **dict.fromkeys(
        [
            ("weightstore.bridge", "weightstore.bridge._torch"),
            ("weightstore.bridge", "weightstore.bridge._jax"),
            ("weightstore.bridge._sources", "weightstore.bridge._torch"),
            ("weightstore.distributed._load", "weightstore.distributed._torch"),
            ("weightstore.distributed._load", "weightstore.distributed._fanout"),
            ("weightstore.distributed._save", "weightstore.distributed._torch"),
        ],
        "imports torch or jax",
    ),
    **dict.fromkeys(
        [
            ("weightstore.io._open", "weightstore.io._remote_source"),
            ("weightstore.io._atomic", "weightstore.io._remote_write"),
        ],
        "URLs only: brings in fsspec",
    ),
    ("weightstore.bridge", "weightstore.bridge._numpy"): "NumPy models only",
    **dict.fromkeys(
        [
            ("weightstore.training._open", "weightstore.training._nemo"),
            ("weightstore.training._open", "weightstore.training._zero"),
            ("weightstore.training._open", "weightstore.training._orbax"),
        ],
        "asked of every directory a path names: each layout's module loads only when its "
        "names are there",
    ),
    ("weightstore.quantized._dequantize", "weightstore.quantized._ggml_iq"): (
        "IQ types only: their grid tables decode on first use"
    ),
    **dict.fromkeys(
        [
            ("weightstore.quantized._view", "weightstore.quantized._hf_recognise"),
            ("weightstore.quantized._view", "weightstore.quantized._hf_int"),
            ("weightstore.quantized._view", "weightstore.quantized._hf_dequantize"),
        ],
        "files with quantized groups only: every store read builds a view, and the rules "
        "and kernels (ml_dtypes among them) would cost a plain checkpoint's first load",
    ),
    ("weightstore.bridge", "weightstore.bridge._sources"): "saves only: the adapter classes",
    **dict.fromkeys(
        [
            ("weightstore.burnpack", "weightstore.burnpack._writer"),
            ("weightstore.burnpack._format", "weightstore.burnpack._reader"),
            ("weightstore.burnpack._format", "weightstore.burnpack._writer"),
            ("weightstore.safetensors", "weightstore.safetensors._writer"),
            ("weightstore.safetensors._format", "weightstore.safetensors._reader"),
            ("weightstore.safetensors._format", "weightstore.safetensors._writer"),
            ("weightstore.pytorch_reader._format", "weightstore.pytorch_reader._reader"),
            ("weightstore.gguf._format", "weightstore.gguf._split"),
            ("weightstore.gguf._format", "weightstore.gguf._reader"),
            ("weightstore.gguf._format", "weightstore.gguf._writer"),
        ],
        "the registry lists a format without loading its parser (cbor2, NumPy)",
    ),
    **dict.fromkeys(
        [
            ("weightstore.pytorch_reader._archive", "weightstore.pytorch_reader._legacy"),
        ],
        "rare pre-1.6 layouts: brings in tarfile",
    ),
    **dict.fromkeys(
        [
            ("weightstore.cli", "weightstore.cli._demo"),
            ("weightstore.cli", "weightstore.cli._render"),
            ("weightstore.cli", "weightstore.cli._report"),
        ],
        "a command loads only the code of the command run",
    ),
}


def _lazy_sibling_imports() -> set[tuple[str, str]]:
    found = set()
    for path in _sources():
        module = _module_name(path)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        if package == ROOT:
            continue
        for imported in _imports(path):
            if imported.in_function and imported.module.rpartition(".")[0] == package:
                found.add((module, imported.module))
    return found


def test_siblings_inside_a_package_are_imported_at_module_level() -> None:
    found = _lazy_sibling_imports()
    unexplained = sorted(found - LAZY_SIBLINGS.keys())
    assert not unexplained, (
        "import these siblings at module level, or say in LAZY_SIBLINGS why they wait:\n"
        + "\n".join(f"{a} -> {b}" for a, b in unexplained)
    )
    stale = sorted(LAZY_SIBLINGS.keys() - found)
    assert not stale, f"no longer deferred; take them off LAZY_SIBLINGS: {stale}"
