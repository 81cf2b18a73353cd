"""Which globals a checkpoint may name: one policy for the stores, the loads and the CLI.

The reader runs nothing a pickle names (`_objects`), but ``torch.load(weights_only=False)`` on
the same file imports every global and calls those reached by REDUCE, NEWOBJ and BUILD. So the
decoded value is scanned for the globals it keeps, and each is judged one of two ways:

* **runs code** (`runs_code`): a callable that executes, imports, opens or reaches arbitrary
  attributes when called: ``os.system``, ``builtins.eval``, ``subprocess.*``, ``importlib.*``,
  ``torch.load``... The list is explicit (`CODE_RUNNING_GLOBALS`). A file naming one fails every
  command and every load unless objects are allowed (``--allow-objects``,
  ``Store.allow_objects()``).
* **an object class**: any other global outside torch, NumPy and collections, such as a user's
  ``__main__.Net`` that ``torch.save(model)`` pickles. Rebuilt as an inert record, it is data,
  as ``argparse.Namespace`` is; it is listed with its import path and a warning, and passes.

The scan walks the decoded value (dicts, lists, inert objects' arguments and state), every
shared object once, at most `MAX_SCAN_NODES` values and `MAX_SCAN_DEPTH` levels; a scan cut
short counts as a finding, so a file cannot hide a global behind a billion shared references.
It sees the globals that the decoded value keeps: a global the pickle names and then discards
never reaches the value, which is why this is a flag, not a proof.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any, Final

from weightstore.base._record import ValueRecord
from weightstore.base._render import bounded_repr
from weightstore.pytorch_reader._objects import GlobalRef, InertObject

__all__ = [
    "CODE_RUNNING_GLOBALS",
    "DATA_MODULE_ROOTS",
    "INERT_CLASSES",
    "MAX_SCAN_DEPTH",
    "MAX_SCAN_NODES",
    "FoundGlobal",
    "Scan",
    "is_object_class",
    "runs_code",
    "scan_globals",
]

DATA_MODULE_ROOTS: Final = frozenset({"torch", "numpy", "collections"})
"""Top-level modules whose globals (less `CODE_RUNNING_GLOBALS`) are neither flagged nor
listed as object classes: the classes a state dict is made of."""

# fmt: off
CODE_RUNNING_GLOBALS: Final = (
    # processes, the shell, the file system, the network
    "os", "posix", "nt", "subprocess", "pty", "shutil", "socket", "tempfile", "pathlib",
    "glob", "io", "_io", "multiprocessing", "threading", "_thread", "signal", "asyncio",
    "webbrowser", "platform", "commands", "popen2",
    # imports and interpreters
    "importlib", "pkgutil", "runpy", "imp", "zipimport", "sys", "code", "codeop", "pdb",
    "bdb", "ctypes", "_ctypes", "types", "pickle", "_pickle", "cPickle", "marshal", "shelve",
    "dill", "cloudpickle", "joblib",
    # builtins that execute, import, open or reach any attribute
    "builtins.eval", "builtins.exec", "builtins.compile", "builtins.__import__",
    "builtins.open", "builtins.getattr", "builtins.setattr", "builtins.delattr",
    "builtins.globals", "builtins.locals", "builtins.vars", "builtins.input",
    "builtins.breakpoint", "builtins.help", "builtins.exit", "builtins.quit",
    "operator.attrgetter", "operator.methodcaller",
    # torch and NumPy entry points that load files or run code themselves
    "torch.load", "torch.serialization", "torch.hub", "torch.jit", "torch.package",
    "torch.utils.cpp_extension", "torch._C", "torch.ops", "torch.distributed.rpc",
    "torch.distributed.elastic", "torch.distributed.launcher", "torch.distributed.run",
    "numpy.load", "numpy.f2py", "numpy.distutils", "numpy.ctypeslib", "numpy.testing",
)
# fmt: on
"""Globals (``module.name``) and modules (every global under them) that would run code when
``torch.load`` imports and calls them."""

INERT_CLASSES: Final = frozenset({
    "pathlib.Path", "pathlib.PosixPath", "pathlib.WindowsPath", "pathlib.PurePath",
    "pathlib.PurePosixPath", "pathlib.PureWindowsPath", "types.SimpleNamespace",
})  # fmt: skip
"""Classes inside modules `CODE_RUNNING_GLOBALS` lists that only hold data: a training
script's arguments keep paths (``output_dir=PosixPath(...)``) and namespaces. Exactly these
names: ``pathlib.Path.unlink``, a method reached through the class, still runs code."""

MAX_SCAN_NODES: Final = 2_000_000
"""Values the scan visits before it stops and says so: a 405B model's state dict, optimizer
state included, is far fewer containers."""
MAX_SCAN_DEPTH: Final = 10_000
"""Nesting the scan follows before it stops and says so; real checkpoints nest under 20."""


class FoundGlobal(ValueRecord):
    """A global the decoded value keeps, outside the data modules.

    Attributes:
        module: the module as the file spells it (``"posix"``).
        name: the name inside it (``"system"``).
        where: the dotted path of the value that holds it (``"config.loss"``; ``""``: the
            whole file).
    """

    module: str
    name: str
    where: str

    @property
    def qualname(self) -> str:
        """``module.name``, the import path."""
        return f"{self.module}.{self.name}"


class Scan(ValueRecord):
    """The result of `scan_globals`.

    Attributes:
        suspicious: each global that runs code (`runs_code`) once, where first found.
        complete: False when the scan stopped at its node or depth limit.
        classes: each other global outside the data modules (a user's class) once, where
            first found: inert data, listed and warned about.
    """

    suspicious: tuple[FoundGlobal, ...]
    complete: bool
    classes: tuple[FoundGlobal, ...] = ()

    @property
    def flagged(self) -> bool:
        """Whether the file fails unless objects are allowed: a global that runs code, or a
        scan cut short."""
        return bool(self.suspicious) or not self.complete


def runs_code(module: str, name: str) -> bool:
    """Whether ``module.name`` is one of `CODE_RUNNING_GLOBALS` (or lies in a module listed),
    and not one of the data classes `INERT_CLASSES` names."""
    qualname = f"{module}.{name}"
    if qualname in INERT_CLASSES:
        return False
    return any(
        qualname.startswith(entry + ".") or qualname == entry for entry in CODE_RUNNING_GLOBALS
    )


def is_object_class(module: str, name: str) -> bool:
    """Whether ``module.name`` is inert data from outside torch, NumPy and collections (a
    user's class): listed, never refused."""
    return not runs_code(module, name) and module.split(".")[0] not in DATA_MODULE_ROOTS


def scan_globals(
    root: object,
    *,
    max_nodes: int = MAX_SCAN_NODES,
    max_depth: int = MAX_SCAN_DEPTH,
    every: bool = False,
) -> Scan:
    """Every global outside the data modules reachable from `root`, the decoded value of a
    checkpoint, each with the first place the walk (in the file's order) finds it; with
    `every`, those of the data modules too (as classes), for a pickle whose globals are
    known exactly (torch's DCP metadata)."""
    found: dict[tuple[str, str], FoundGlobal] = {}
    seen: set[int] = set()
    # Depth first over lazy child iterators: memory grows with depth, never with a list's width.
    stack: list[Iterator[tuple[str, object]]] = [iter([("", root)])]
    visited = 0
    complete = True
    while stack:
        step = next(stack[-1], None)
        if step is None:
            stack.pop()
            continue
        visited += 1
        if visited > max_nodes or len(stack) > max_depth:
            complete = False
            break
        where, value = step
        if isinstance(value, GlobalRef):
            key = (value.module, value.name)
            if key not in found and (every or runs_code(*key) or is_object_class(*key)):
                found[key] = FoundGlobal(value.module, value.name, where)
            continue
        children = _children(value)
        if children is None or id(value) in seen:
            continue
        seen.add(id(value))
        stack.append(_placed(where, children))
    code = tuple(g for g in found.values() if runs_code(g.module, g.name))
    classes = tuple(g for g in found.values() if not runs_code(g.module, g.name))
    return Scan(code, complete, classes)


def _placed(where: str, children: Iterator[tuple[str, object]]) -> Iterator[tuple[str, object]]:
    """`children` with each segment joined under `where`, lazily."""
    for segment, child in children:
        yield (f"{where}.{segment}" if where and segment else where or segment), child


def _children(value: object) -> Iterator[tuple[str, object]] | None:
    """A container's (segment, child) pairs, keys included; None for a leaf."""
    if isinstance(value, dict):
        return _dict_children(value)
    if isinstance(value, list | tuple | set | frozenset):
        return ((str(index), item) for index, item in enumerate(value))
    if isinstance(value, InertObject):
        return _inert_children(value)
    argparse = sys.modules.get("argparse")  # a Namespace exists only once argparse is loaded
    if argparse is not None and isinstance(value, argparse.Namespace):
        return _dict_children(vars(value))
    return None


def _dict_children(value: dict[Any, Any]) -> Iterator[tuple[str, object]]:
    for key, item in value.items():
        segment = key_text(key)
        yield segment, key
        yield segment, item


def _inert_children(value: InertObject) -> Iterator[tuple[str, object]]:
    yield "", value.callee  # the global that was called sits where the object sits
    yield from ((f"args.{i}", arg) for i, arg in enumerate(value.args))
    yield from ((f"kwargs.{key}", arg) for key, arg in value.kwargs.items())
    yield "state", value.state
    yield from ((f"items.{i}", item) for i, item in enumerate(value.listitems))
    yield "dictitems", value.dictitems


_MAX_EXACT_INT_BITS: Final = 64  # larger ints are shown in hex: str() of a huge int is refused


def key_text(key: object) -> str:
    """A dict key as a path segment: strings as they are, numbers printed, others rendered."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool | float) or key is None:
        return str(key)
    if isinstance(key, int):
        return str(key) if key.bit_length() <= _MAX_EXACT_INT_BITS else hex(key)
    return bounded_repr(key, limit=40)
