"""The package surface; the layering rules are in test_layers.py."""

from __future__ import annotations

import ast
import builtins
import inspect
import subprocess
import sys
from pathlib import Path

import weightstore
from weightstore import errors

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "weightstore"  # read, not imported


def test_the_surface_is_the_table() -> None:
    # The table (`_EXPORTS`) is the one list; tests/test_lazy_exports.py holds the TYPE_CHECKING
    # block, __all__ and dir() to it. Here: the names this package promises besides.
    table = weightstore.__getattr__.names
    submodules = {"burnpack", "dtypes", "formats", "gguf", "pytorch_reader", "safetensors"}
    assert set(weightstore.__all__) == set(table) | submodules
    for name in weightstore.__all__:
        assert hasattr(weightstore, name), name


def test_every_error_is_exported_from_the_root() -> None:
    classes = {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == errors.__name__
        and not name.startswith("_")
    }
    assert classes == set(errors.__all__)
    for name in errors.__all__:
        assert getattr(weightstore, name) is getattr(errors, name), name


def _family(tree: ast.Module, family: set[str]) -> list[tuple[str, int]]:
    """Classes in `tree` deriving (by the name of a base) from the error family or a warning."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
        if bases & family:
            found.append((node.name, node.lineno))
    return found


def test_every_error_and_warning_class_is_defined_in_errors() -> None:
    # Exceptions that never leave their module (a stand-in's refusal the pickle machine turns
    # into a PickleError, ...) derive from builtins and may stay; anything of the family may not.
    family = {
        name
        for name, value in [*vars(errors).items(), *vars(builtins).items()]
        if inspect.isclass(value)
        and (issubclass(value, Warning) or issubclass(value, errors.WeightstoreError))
    }
    elsewhere = [
        f"{path.relative_to(PACKAGE)}:{line} {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.parent != PACKAGE / "errors"
        for name, line in _family(ast.parse(path.read_text(encoding="utf-8")), family)
    ]
    assert not elsewhere, f"move these into the weightstore.errors package: {elsewhere}"


def test_every_container_reader_and_writer_is_exported_from_the_root() -> None:
    # Every registered format's reader (and writer, where it has one) is a root name, or none
    # would be: one rule, whichever formats are registered.
    from weightstore.formats import FORMATS

    for fmt in FORMATS:
        (package,) = [
            module
            for name, module in list(sys.modules.items())
            if name.count(".") == 1
            and name.startswith("weightstore.")
            and getattr(module, "FORMAT", None) is fmt
        ]
        classes = [
            name
            for name in package.__all__
            if name.endswith(("Reader", "Writer")) and inspect.isclass(getattr(package, name))
        ]
        assert any(name.endswith("Reader") for name in classes), package.__name__
        for name in classes:
            assert getattr(weightstore, name) is getattr(package, name), name


def test_import_does_not_import_torch() -> None:
    code = "import sys, weightstore, weightstore.cli; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_import_does_not_load_the_pickle_machine() -> None:
    # The registry imports the PyTorch reader's package for its FORMAT on every import; the
    # reader itself (machine, opcode table) loads only when a checkpoint is opened.
    code = (
        "import sys, weightstore; "
        "print(any(m.startswith('weightstore.pytorch_reader._') and m != "
        "'weightstore.pytorch_reader._format' and m != 'weightstore.pytorch_reader._layout' "
        "for m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
