"""Every public name of weightstore has a docstring of its own.

Public means: each name in the `__all__` of every module under ``src/weightstore``, and for a
public class every public method, property, classmethod and staticmethod that a weightstore
class defines (methods inherited from builtins or the standard library are not ours to document).

What counts as a docstring:

* functions, classes, methods, properties: their own ``__doc__``, never one `inspect.getdoc`
  borrows from a base class; the signature text a dataclass puts in an undocumented class does
  not count. An override may rely on the documented contract of the weightstore method it
  overrides (``IdentityAdapter.adapt`` needs no copy of ``Adapter.adapt``'s text);
* constants and type aliases: a string literal right after the assignment (an attribute
  docstring, which Sphinx and IDEs show), found in the module that assigns the name;
* modules listed in an `__all__`: their module docstring.

Dunder names (``__version__``) follow a language-wide convention and are not checked.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import types
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "weightstore"  # walked before import
OPTIONAL_DEPENDENCIES = frozenset({"torch", "fsspec", "jax"})  # a module may need one to import
NEVER_IMPORTED = frozenset({"weightstore.__main__"})  # importing it runs the command line


def _module_names() -> list[str]:
    """Every module under the package, by dotted name, in path order."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ("weightstore", *path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


def _source_path(module_name: str) -> Path:
    relative = Path(*module_name.split(".")[1:])
    package = PACKAGE / relative / "__init__.py"
    return package if package.exists() else PACKAGE / relative.with_suffix(".py")


@cache
def _tree(module_name: str) -> ast.Module:
    return ast.parse(_source_path(module_name).read_text(encoding="utf-8"))


def _has_text(doc: str | None) -> bool:
    return bool(doc and doc.strip())


def _is_ours(obj: object) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".")[0] == "weightstore"


def _class_doc_missing(cls: type) -> bool:
    doc = cls.__dict__.get("__doc__")
    if dataclasses.is_dataclass(cls) and doc and doc.startswith(f"{cls.__name__}("):
        return True  # the signature dataclass writes when the class has no docstring
    return not _has_text(doc)


def _member_doc(member: object) -> str | None:
    if isinstance(member, property):
        return member.fget.__doc__ if member.fget is not None else None
    if isinstance(member, (classmethod, staticmethod)):
        return member.__func__.__doc__
    if isinstance(member, types.FunctionType):
        return member.__doc__
    return "not a method"  # a field, a slot, a constant: documented in the class's Attributes


def _documented_in_a_base(cls: type, name: str) -> bool:
    """Whether a weightstore base class documents the method `name` that `cls` overrides."""
    for base in cls.__mro__[1:]:
        if _is_ours(base) and name in base.__dict__:
            return _has_text(_member_doc(base.__dict__[name]))
    return False


def _missing_in_class(cls: type) -> Iterator[str]:
    """Public members that weightstore classes in `cls`'s MRO define without a docstring."""
    for owner in cls.__mro__:
        if not _is_ours(owner):
            continue
        for name, member in owner.__dict__.items():
            if name.startswith("_") or _has_text(_member_doc(member)):
                continue
            if not _documented_in_a_base(owner, name):
                yield f"{owner.__module__}.{owner.__qualname__}.{name}"


def _imported_from(module_name: str, name: str) -> str | None:
    """The module a top-level ``from X import name`` in `module_name` takes `name` from; a lazy
    package names it under ``if TYPE_CHECKING:`` and loads it in ``__getattr__``."""
    body = _tree(module_name).body
    checking = [n for n in body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)]
    for node in [*body, *(inner for block in checking for inner in block.body)]:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return node.module
    return None


def _commented(module_name: str, node: ast.stmt) -> bool:
    """Whether an assignment carries a comment: at the end of its last line, or on the line
    right above it (the style guide's one constants block documents each constant so)."""
    lines = _source_path(module_name).read_text(encoding="utf-8").splitlines()
    last = lines[(node.end_lineno or node.lineno) - 1]
    above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
    return "  # " in last or above.startswith("# ")


def _constant_documented(module_name: str, name: str) -> tuple[str, bool]:
    """Where `name` is assigned (following re-exports) and whether a string or a comment
    documents it."""
    body = _tree(module_name).body
    for node, after in zip(body, [*body[1:], None], strict=True):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            documented = (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
                and _has_text(after.value.value)
            ) or _commented(module_name, node)
            return f"{module_name}.{name}", documented
    source = _imported_from(module_name, name)
    if source is not None and source.split(".")[0] == "weightstore":
        return _constant_documented(source, name)
    return f"{module_name}.{name}", False  # assigned some other way: nothing to find


def _missing_docstrings() -> tuple[list[str], list[str]]:
    """Undocumented public names (and modules that fail to import), and modules that could not
    be imported because an optional dependency is absent."""
    missing: set[str] = set()
    unimported: list[str] = []
    seen: set[int] = set()
    for module_name in _module_names():
        if module_name in NEVER_IMPORTED:
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if (err.name or "").split(".")[0] in OPTIONAL_DEPENDENCIES:
                unimported.append(f"{module_name} (needs {err.name})")
            else:
                missing.add(f"{module_name} (cannot be checked, import fails: {err!r})")
            continue
        except Exception as err:  # a module broken mid-edit is reported, the rest still checked
            missing.add(f"{module_name} (cannot be checked, import fails: {err!r})")
            continue
        for name in getattr(module, "__all__", ()):
            if name.startswith("__") and name.endswith("__"):
                continue
            try:
                obj = getattr(module, name)  # a lazy name may import an optional package
            except ModuleNotFoundError as err:
                if (err.name or "").split(".")[0] not in OPTIONAL_DEPENDENCIES:
                    raise
                unimported.append(f"{module_name}.{name} (needs {err.name})")
                continue
            if isinstance(obj, types.ModuleType):
                if not _has_text(obj.__doc__):
                    missing.add(obj.__name__)
            elif (inspect.isclass(obj) or inspect.isroutine(obj)) and _is_ours(obj):
                if id(obj) in seen:
                    continue
                seen.add(id(obj))
                qualified = f"{obj.__module__}.{obj.__qualname__}"
                if inspect.isclass(obj):
                    if _class_doc_missing(obj):
                        missing.add(qualified)
                    missing.update(_missing_in_class(obj))
                elif not _has_text(obj.__doc__):
                    missing.add(qualified)
            elif not inspect.isclass(obj) and not inspect.isroutine(obj):
                where, documented = _constant_documented(module_name, name)
                if not documented:
                    missing.add(where)
    return sorted(missing), unimported


def test_every_public_name_has_a_docstring() -> None:
    missing, unimported = _missing_docstrings()
    listing = "\n".join(f"  {name}" for name in missing)
    assert not missing, f"{len(missing)} public names have no docstring:\n{listing}"
    if unimported:
        pytest.skip(f"not checked, an optional dependency is absent: {', '.join(unimported)}")
