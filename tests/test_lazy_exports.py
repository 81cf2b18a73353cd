"""Each lazy package's surface is one table (`weightstore.base._lazy.lazy_exports`), and what
type checkers see of it is the same table.

The table is what runs: ``__getattr__`` imports a name's module on first use. Type checkers and
IDEs read the source instead: the explicit re-exports (``from m import X as X``, under
``if TYPE_CHECKING:`` for a lazy name) and the definitions. A name in the table that the source
does not bind is typed as ``Any``; a re-export that the table lacks type-checks and then fails
at run time. So the source is parsed with `ast` and must bind exactly the table's names from
exactly the table's modules (as huggingface_hub's ``utils/check_static_imports.py`` holds its
``_SUBMOD_ATTRS`` to its ``TYPE_CHECKING`` block), and at run time ``__all__``, ``dir()`` and
every name's value are checked against the same table.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from weightstore.base._lazy import LazyGetattr, import_on_first_use, lazy_exports

SOURCE = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SOURCE / "weightstore"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _calls_lazy_exports(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "lazy_exports"
        for node in ast.walk(tree)
    )


def _lazy_modules() -> dict[str, Path]:
    """Every module whose source calls `lazy_exports`, by module name."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "_lazy.py" and path.parent.name == "base":
            continue
        if _calls_lazy_exports(ast.parse(path.read_text(encoding="utf-8"))):
            found[_module_name(path)] = path
    return found


LAZY_MODULES = _lazy_modules()


def _is_type_checking(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


@dataclass
class StaticSurface:
    """What a type checker sees a module export, read from its source."""

    reexports: dict[str, str]  # ``from m import X as X``: name -> m
    type_only: set[str]  # the re-exports made under ``if TYPE_CHECKING:``
    defined: set[str]  # public names the module defines (def, class, assignment)


def _reexports(node: ast.stmt, into: dict[str, str]) -> list[str]:
    if not isinstance(node, ast.ImportFrom) or node.level or node.module is None:
        return []
    names = [alias.name for alias in node.names if alias.asname == alias.name]
    into.update(dict.fromkeys(names, node.module))
    return names


def _assigned(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in _assigned(element)]
    return []


def static_surface(source: str) -> StaticSurface:
    surface = StaticSurface({}, set(), set())
    for node in ast.parse(source).body:
        if _is_type_checking(node):
            assert isinstance(node, ast.If)
            for inner in node.body:
                surface.type_only.update(_reexports(inner, surface.reexports))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            surface.defined.add(node.name)
        elif isinstance(node, ast.Assign):
            surface.defined.update(name for t in node.targets for name in _assigned(t))
        elif isinstance(node, ast.AnnAssign):
            surface.defined.update(_assigned(node.target))
        else:
            _reexports(node, surface.reexports)
    surface.defined = {
        name for name in surface.defined if not name.startswith("_") or name == "__version__"
    }
    return surface


def _getter(module: ModuleType) -> LazyGetattr:
    getter = vars(module).get("__getattr__")
    assert isinstance(getter, LazyGetattr), f"{module.__name__}.__getattr__ is no lazy_exports"
    return getter


def _resolve(home: str, name: str | None) -> Any:
    """``getattr(import_module(home), name)`` (the module itself when `name` is None), or
    `_MISSING` when it needs an optional dependency that is not installed."""
    try:
        module = importlib.import_module(home)
    except ModuleNotFoundError as err:
        if err.name in {"torch", "jax", "flax"} and importlib.util.find_spec(err.name) is None:
            return _MISSING
        raise
    return module if name is None else getattr(module, name)


_MISSING = object()


def test_the_lazy_modules_are_found() -> None:
    assert {"weightstore", "weightstore.burnpack", "weightstore.sets"} <= set(LAZY_MODULES)


def test_no_module_writes_its_own_lazy_loader() -> None:
    # One mechanism: a module-level __getattr__ or __dir__ comes from lazy_exports.
    written = [
        f"{_module_name(path)}:{node.lineno}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, ast.FunctionDef) and node.name in {"__getattr__", "__dir__"}
    ]
    assert not written, f"use weightstore.base._lazy.lazy_exports instead: {written}"


@pytest.mark.parametrize("name", sorted(LAZY_MODULES))
def test_the_source_binds_exactly_the_table(name: str) -> None:
    module = importlib.import_module(name)
    getter = _getter(module)
    surface = static_surface(LAZY_MODULES[name].read_text(encoding="utf-8"))
    submodules = {n for n, home in surface.reexports.items() if home == name}
    assert submodules == set(getter.submodules), "submodules re-exported as `from pkg import m`"
    static = {n: home for n, home in surface.reexports.items() if n not in submodules}
    static.update(dict.fromkeys(surface.defined, name))
    assert static == getter.names, (
        f"{name}: names bound in the source but not in the table: "
        f"{sorted(static.keys() - getter.names.keys())}; in the table but not bound: "
        f"{sorted(getter.names.keys() - static.keys())}; from another module: "
        f"{sorted(n for n in static.keys() & getter.names.keys() if static[n] != getter.names[n])}"
    )


@pytest.mark.parametrize("name", sorted(LAZY_MODULES))
def test_a_type_only_name_is_not_loaded_with_its_package(name: str) -> None:
    # What the package re-exports for type checkers only is what it promises to load late.
    surface = static_surface(LAZY_MODULES[name].read_text(encoding="utf-8"))
    code = f"import json, {name} as m\nprint(json.dumps(sorted(vars(m))))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(done.stdout)) & surface.type_only
    assert not loaded, f"{name} loads these with itself: {sorted(loaded)}"


@pytest.mark.parametrize("name", sorted(LAZY_MODULES))
def test_all_and_dir_are_the_table(name: str) -> None:
    module = importlib.import_module(name)
    getter = _getter(module)
    assert set(module.__all__) == set(getter.names) | set(getter.submodules)
    kinds = [0 if n.isupper() else 1 if n[0].isupper() else 2 for n in module.__all__]
    assert kinds == sorted(kinds), "constants, then classes, then the rest, as ruff sorts"
    for kind in set(kinds):
        group = [n for n, k in zip(module.__all__, kinds, strict=True) if k == kind]
        assert group == sorted(group)
    assert set(module.__all__) <= set(dir(module))


@pytest.mark.parametrize("name", sorted(LAZY_MODULES))
def test_every_name_resolves_to_its_modules_object(name: str) -> None:
    module = importlib.import_module(name)
    getter = _getter(module)
    for export, home in getter.names.items():
        expected = _resolve(home, export)
        if expected is _MISSING:
            continue
        if home != name:  # through the lazy path itself, whatever is cached already
            assert getter(export) is expected, export
        assert getattr(module, export) is expected, export
    for submodule in getter.submodules:
        assert getter(submodule) is _resolve(f"{name}.{submodule}", None)


@pytest.mark.parametrize("name", sorted(LAZY_MODULES))
def test_an_unknown_name_is_the_usual_attribute_error(name: str) -> None:
    module = importlib.import_module(name)
    with pytest.raises(AttributeError, match=f"^module '{name}' has no attribute 'no_such_name'$"):
        module.no_such_name  # noqa: B018


def test_a_first_use_imports_the_module_and_keeps_the_name() -> None:
    code = (
        "import sys, weightstore\n"
        "assert 'Store' not in vars(weightstore) and 'weightstore.stores' not in sys.modules\n"
        "store = weightstore.Store\n"
        "assert vars(weightstore)['Store'] is store is sys.modules['weightstore.stores'].Store\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the helper on a package of its own ----------------------------------------------------------


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    root = tmp_path / "lazypkg"
    root.mkdir()
    (root / "__init__.py").write_text(
        textwrap.dedent(
            """
            from weightstore.base._lazy import lazy_exports

            def here():
                return "here"

            __getattr__, __dir__, __all__ = lazy_exports(
                __name__,
                {"Thing": "lazypkg._things", "here": __name__, "gone": __name__},
                submodules=("extra",),
            )
            """
        )
    )
    (root / "_things.py").write_text("class Thing:\n    pass\n")
    (root / "extra.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module("lazypkg")
    for loaded in [m for m in sys.modules if m == "lazypkg" or m.startswith("lazypkg.")]:
        del sys.modules[loaded]


def test_the_helper_loads_on_first_use_and_caches(package: ModuleType) -> None:
    assert "lazypkg._things" not in sys.modules
    assert package.__all__ == ["Thing", "extra", "gone", "here"]  # classes before the rest
    thing = package.Thing
    assert thing is sys.modules["lazypkg._things"].Thing
    assert vars(package)["Thing"] is thing  # the next lookup is a plain attribute
    assert package.extra.VALUE == 1 and vars(package)["extra"] is sys.modules["lazypkg.extra"]
    assert {"Thing", "extra", "gone", "here"} <= set(dir(package))


def test_a_name_the_package_should_define_but_does_not_is_an_attribute_error(
    package: ModuleType,
) -> None:
    assert package.here() == "here"
    with pytest.raises(AttributeError, match="has no attribute 'gone'"):
        package.gone  # noqa: B018  (its own module, and not there: no import loop)


def test_a_name_cannot_be_both_a_submodule_and_a_name() -> None:
    with pytest.raises(ValueError, match="both"):
        lazy_exports("weightstore", {"burnpack": "weightstore.burnpack"}, submodules=["burnpack"])


def test_import_on_first_use_replaces_itself_with_the_module() -> None:
    namespace: dict[str, Any] = {}
    namespace["js"] = import_on_first_use("json", namespace, "js")
    assert "imported on first use" in repr(namespace["js"])
    assert namespace["js"].dumps([1]) == "[1]"
    assert namespace["js"] is sys.modules["json"]


# -- the checker itself ---------------------------------------------------------------------------


def test_the_source_reader_sees_reexports_definitions_and_type_only_names() -> None:
    source = textwrap.dedent(
        """
        from typing import TYPE_CHECKING
        from a.b import X as X
        from a.b import helper
        if TYPE_CHECKING:
            import numpy as np
            from a.c import Y as Y
            from a.d import Annotation
        def f(): ...
        class K: ...
        CONSTANT = 1
        _private = 2
        __getattr__, __dir__, __all__ = lazy_exports(__name__, {})
        """
    )
    surface = static_surface(source)
    assert surface.reexports == {"X": "a.b", "Y": "a.c"}
    assert surface.type_only == {"Y"}
    assert surface.defined == {"f", "K", "CONSTANT"}
