"""Decoded pickle values: which globals are suspicious, where the scan finds them, and their JSON
form, bounded whatever the file built."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from weightstore.cli._objects import is_object_class, runs_code, scan_globals, to_json
from weightstore.pytorch_reader import GlobalRef, InertObject
from weightstore.pytorch_reader._policy import CODE_RUNNING_GLOBALS


@pytest.mark.parametrize(
    ("module", "name", "runs", "object_class"),
    [
        ("posix", "system", True, False),
        ("os", "system", True, False),
        ("nt", "system", True, False),
        ("subprocess", "Popen", True, False),
        ("subprocess", "check_output", True, False),
        ("importlib", "import_module", True, False),
        ("importlib.machinery", "SourceFileLoader", True, False),
        ("builtins", "eval", True, False),
        ("builtins", "exec", True, False),
        ("builtins", "getattr", True, False),
        ("builtins", "__import__", True, False),
        ("runpy", "run_path", True, False),
        ("operator", "methodcaller", True, False),
        ("torch", "load", True, False),
        ("torch.hub", "load", True, False),
        ("torch.jit._serialization", "load", True, False),
        ("numpy", "load", True, False),
        ("pathlib", "Path.unlink", True, False),  # a method through a data class
        ("types", "FunctionType", True, False),
        ("torch.distributed.rpc", "rpc_sync", True, False),
        # data classes of modules otherwise listed: a training script's paths and namespaces
        ("pathlib", "PosixPath", False, True),
        ("types", "SimpleNamespace", False, True),
        ("torch.distributed.tensor", "DTensor", False, False),  # torch.load allows it
        # a user's classes and other libraries' classes: inert data, listed
        ("__main__", "Net", False, True),
        ("torchvision.models", "resnet", False, True),  # not torch itself
        ("mypkg.models", "Net", False, True),
        ("osmnx", "Graph", False, True),  # "os" is a module, not a prefix of names
        ("builtins", "print", False, True),
        # what state dicts are made of
        ("torch.nn.modules.linear", "Linear", False, False),
        ("collections", "OrderedDict", False, False),
        ("numpy.core.multiarray", "_reconstruct", False, False),
    ],
)
def test_which_globals_run_code_and_which_are_object_classes(
    module: str, name: str, runs: bool, object_class: bool
) -> None:
    assert runs_code(module, name) is runs
    assert is_object_class(module, name) is object_class


def test_the_code_running_list_is_documented() -> None:
    page = (Path(__file__).parents[2] / "docs" / "security.md").read_text()
    missing = [entry for entry in CODE_RUNNING_GLOBALS if f"`{entry}`" not in page]
    assert not missing


def test_the_scan_names_where_each_global_sits() -> None:
    call = InertObject(GlobalRef("posix", "system"), ("rm -rf /",))
    module = InertObject(
        GlobalRef("torch.nn.modules.linear", "Linear"),
        state={"hook": GlobalRef("builtins", "exec")},
    )
    root = {"config": {"cb": call}, "model": module, 3: [call]}
    scan = scan_globals(root)
    assert scan.complete
    found = [(g.qualname, g.where) for g in scan.suspicious]  # each once, where first seen
    assert found == [("posix.system", "config.cb"), ("builtins.exec", "model.state.hook")]


def test_the_scan_survives_cycles_shared_references_and_stops_at_its_budget() -> None:
    loop: list[object] = []
    loop.append(loop)
    assert scan_globals(loop).complete
    shared: list[object] = [GlobalRef("os", "system")]
    for _ in range(64):  # 2**64 paths, 65 distinct lists
        shared = [shared, shared]
    assert [g.qualname for g in scan_globals(shared).suspicious] == ["os.system"]
    wide = [[index] for index in range(100)]
    cut = scan_globals(wide, max_nodes=50)
    assert not cut.complete and cut.flagged


def test_json_keeps_numbers_and_tags_objects() -> None:
    value = {
        "n": 3, "x": 0.5, "nan": float("nan"), "big": 2**70, "b": b"\x00\x01", "none": None,
        "t": (1, 2), "s": {7}, "c": 1 + 2j, "arr": np.zeros((2, 3), np.float16),
        "np": np.int64(4), "obj": InertObject(GlobalRef("posix", "system"), ("ls",)),
        5: "int key",
    }  # fmt: skip
    document = to_json(value)
    assert json.loads(json.dumps(document, allow_nan=False)) == document  # valid JSON
    assert document == {
        "n": 3, "x": 0.5, "nan": "NaN", "big": hex(2**70), "b": {"bytes": 2}, "none": None,
        "t": [1, 2], "s": [7], "c": {"real": 1.0, "imag": 2.0},
        "arr": {"array": {"dtype": "float16", "shape": [2, 3]}}, "np": 4,
        "obj": {"object": "posix.system", "args": ["ls"]}, "5": "int key",
    }  # fmt: skip


def test_json_is_bounded() -> None:
    deep: object = "bottom"
    for _ in range(20):
        deep = [deep]
    assert json.dumps(to_json(deep)).count("[") <= 7
    wide = to_json(list(range(1000)))
    assert len(wide) == 51 and wide[-1] == "..."
    assert len(to_json("x" * 10_000)) == 1000
    assert to_json({str(i): i for i in range(60)})["..."] == "10 more"
