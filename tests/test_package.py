"""The package surface and its layering rules."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import weightstore

PACKAGE = Path(weightstore.__file__).parent


PUBLIC = [
    "Adapter",
    "ApplyError",
    "ApplyResult",
    "ArchiveError",
    "BurnpackReader",
    "BurnpackStore",
    "BurnpackWriter",
    "ChainAdapter",
    "DType",
    "DTypeError",
    "DescriptorError",
    "DestinationExistsError",
    "EntryError",
    "FormatError",
    "HeaderError",
    "IdentityAdapter",
    "InvalidOptionError",
    "KeyNotFoundError",
    "KeyRemapper",
    "LimitExceeded",
    "LoadFailedError",
    "MetadataError",
    "MissingStorageError",
    "ModuleRecord",
    "ModuleSnapshot",
    "PathFilter",
    "PickleError",
    "PytorchStore",
    "RemapCollisionError",
    "SafetensorsStore",
    "Scalar",
    "SliceError",
    "Store",
    "TensorEntry",
    "TensorNotFoundError",
    "TensorSnapshot",
    "TruncatedError",
    "UnsupportedFormatError",
    "UnsupportedObjectError",
    "UnsupportedVersionError",
    "WeightstoreError",
    "__version__",
    "apply",
    "burnpack",
    "collect",
    "detect_format",
    "dtypes",
    "into_record",
    "load_from",
    "load_record",
    "map_indices_contiguous",
    "save_into",
    "to_data",
    "to_torch",
    "try_load_record",
]


def test_public_names() -> None:
    assert weightstore.__all__ == PUBLIC  # a change to the public surface is a deliberate act
    for name in weightstore.__all__:
        assert hasattr(weightstore, name), name


def test_import_does_not_import_torch() -> None:
    code = "import sys, weightstore, weightstore.cli; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node except those under ``if TYPE_CHECKING:`` (imports for annotations only)."""
    nodes: list[ast.AST] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            stack.extend(node.orelse)
            continue
        nodes.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return nodes


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_only_the_torch_bridge_imports_torch() -> None:
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("bridge/torch") or relative == "bridge/_torch.py":
            continue
        assert not any(n == "torch" or n.startswith("torch.") for n in _imports(path)), relative


def test_containers_know_nothing_of_models() -> None:
    upper = ("weightstore.stores", "weightstore.bridge", "weightstore.record", "weightstore.cli",
             "weightstore.adapters", "weightstore.snapshot")  # fmt: skip
    for folder in ("burnpack", "safetensors", "pytorch_reader"):
        for path in (PACKAGE / folder).rglob("*.py"):
            for name in _imports(path):
                assert not name.startswith(upper), f"{path.name} imports {name}"


def test_pytorch_reader_stands_alone() -> None:
    allowed = ("weightstore.dtypes", "weightstore.errors", "weightstore.pytorch_reader")
    for path in (PACKAGE / "pytorch_reader").rglob("*.py"):
        for name in _imports(path):
            if name.startswith("weightstore"):
                assert name.startswith(allowed), f"{path.name} imports {name}"
