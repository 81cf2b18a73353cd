"""The bridge package's structure: no import cycles, torch only in the torch bridge."""

from __future__ import annotations

import ast
from pathlib import Path

import weightstore.bridge

BRIDGE = Path(weightstore.bridge.__file__).parent


def _bridge_imports(path: Path) -> set[str]:
    """Bridge modules `path` imports anywhere in its body, lazily imported ones included."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {n for n in names if n.startswith("weightstore.bridge")}


def test_bridge_modules_form_no_import_cycle() -> None:
    graph = {
        f"weightstore.bridge.{path.stem}": _bridge_imports(path)
        for path in BRIDGE.glob("_*.py")
        if path.name != "__init__.py"
    }
    # The package imports its modules; no module imports the package or leads back to itself.
    for module, imports in graph.items():
        assert "weightstore.bridge" not in imports, module
        seen: set[str] = set()
        stack = list(imports)
        while stack:
            name = stack.pop()
            assert name != module, f"{module} imports itself through {sorted(seen)}"
            if name not in seen:
                seen.add(name)
                stack.extend(graph.get(name, ()))


def test_protocol_module_imports_no_bridge() -> None:
    assert not _bridge_imports(BRIDGE / "_model.py")
