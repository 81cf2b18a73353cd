"""Deferred imports, by one mechanism: a package's exports, and a heavy module's name.

`lazy_exports` gives a package (or module) its surface from one table, each public name and
the module that defines it: the package's ``__getattr__`` (PEP 562), ``__dir__`` and
``__all__``. A name's module is imported on the name's first use and the value kept in the
package's globals, so later lookups are plain attribute reads, and ``import weightstore``
loads none of the modules behind its names. A name the package binds itself (defined there,
or imported at module level) has the package as its module, or the module it is imported
from; `__getattr__` is never asked for it.

The table is what runs; what type checkers and IDEs see is the ``if TYPE_CHECKING:`` block
beside it, one explicit re-export (``from m import X as X``) per lazy name, since a computed
``__all__`` is invisible to them. tests/test_lazy_exports.py parses both and holds them equal,
as huggingface_hub's ``check_static_imports`` holds its ``_SUBMOD_ATTRS`` to its stub block.

`import_on_first_use` is the same idea for one heavy dependency inside one module:
``np = import_on_first_use("numpy", globals(), "np")`` costs nothing until NumPy is used.

Standard library only: every layer uses it.
"""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["LazyGetattr", "import_on_first_use", "lazy_exports"]


class LazyGetattr:
    """A package's ``__getattr__``: imports a public name's module on first use and keeps the
    value in the package's globals.

    Attributes:
        package: the package's ``__name__``.
        names: each lazily loaded public name and the module that defines it.
        submodules: names of the package's submodules it exports, imported on first use.
    """

    __slots__ = ("names", "package", "submodules")

    def __init__(self, package: str, names: Mapping[str, str], submodules: frozenset[str]):
        self.package = package
        self.names = dict(names)
        self.submodules = submodules

    def __call__(self, name: str) -> Any:
        home = self.names.get(name)
        if name in self.submodules:
            home = f"{self.package}.{name}"
        elif home is None or home == self.package:  # the package's own: bound, or absent
            raise AttributeError(f"module {self.package!r} has no attribute {name!r}")
        value = _imported(home)
        if name not in self.submodules:
            value = getattr(value, name)
        vars(sys.modules[self.package])[name] = value  # later lookups skip this call
        return value


def _imported(module: str) -> Any:
    """`importlib.import_module` with the cyclic collector paused: an import allocates
    modules, functions and classes and frees none of them, but in a process that has imported
    torch those allocations trip full collections that walk its whole heap (about as long as
    the weightstore modules take to run, measured on the import row). The collector is on
    again afterwards only if it was on before, so pauses nest (`base._gc`)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return importlib.import_module(module)
    finally:
        if enabled:
            gc.enable()


def lazy_exports(
    package: str, names: Mapping[str, str], submodules: Iterable[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``__getattr__``, ``__dir__`` and ``__all__`` for `package`, from its one table.

    Use it as ``__getattr__, __dir__, __all__ = lazy_exports(__name__, {...})``.

    Args:
        package: the package's ``__name__``.
        names: every public name and the module that defines it (the package itself for a
            name it defines); names it does not bind are imported from there on first use.
        submodules: names of submodules exported as attributes, imported on first use.

    Returns:
        The package's ``__getattr__``, its ``__dir__`` (the globals and ``__all__``, sorted),
        and ``__all__`` (every name and submodule, constants first, then classes, then the
        rest: the order ruff keeps a written ``__all__`` in).
    """
    modules = frozenset(submodules)
    both = modules & names.keys()
    if both:
        raise ValueError(f"{package}: {sorted(both)} named both as submodules and as names")
    public = sorted(modules | names.keys(), key=_listing_order)
    getter = LazyGetattr(package, names, modules)

    def listing() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(public))

    return getter, listing, public


def _listing_order(name: str) -> tuple[int, str]:
    """``SCREAMING_CASE`` names, then ``CamelCase``, then the rest; by code point in each."""
    return (0 if name.isupper() else 1 if name[:1].isupper() else 2, name)


class _ModuleOnFirstUse:
    """A heavy module's stand-in in one module's globals: the first attribute read imports
    the module and puts it in the stand-in's place, so later reads are a plain global."""

    __slots__ = ("_alias", "_name", "_namespace")

    def __init__(self, name: str, namespace: dict[str, Any], alias: str) -> None:
        self._name, self._namespace, self._alias = name, namespace, alias

    def __getattr__(self, attribute: str) -> Any:
        module = importlib.import_module(self._name)
        self._namespace[self._alias] = module
        return getattr(module, attribute)

    def __repr__(self) -> str:
        return f"<{self._name}, imported on first use>"


def import_on_first_use(name: str, namespace: dict[str, Any], alias: str) -> Any:
    """Bind `alias` in `namespace` (a module's ``globals()``) to module `name`, imported when
    first used: ``import weightstore`` and header-only work never pay for NumPy or ml_dtypes.

    Use it as ``np = import_on_first_use("numpy", globals(), "np")`` beside an
    ``if TYPE_CHECKING: import numpy as np`` for the type checker.
    """
    return _ModuleOnFirstUse(name, namespace, alias)
