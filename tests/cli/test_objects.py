"""Decoded pickle values: which globals are suspicious, where the scan finds them, and their JSON
form, bounded whatever the file built."""

from __future__ import annotations

import json

import numpy as np
import pytest

from weightstore.cli._objects import is_suspicious, scan_globals, to_json
from weightstore.pytorch_reader import GlobalRef, InertObject


@pytest.mark.parametrize(
    ("module", "name", "suspicious"),
    [
        ("posix", "system", True),
        ("os", "system", True),
        ("builtins", "eval", True),
        ("__main__", "Net", True),
        ("torchvision.models", "resnet", True),  # not torch itself
        ("torch.nn.modules.linear", "Linear", False),
        ("collections", "OrderedDict", False),
        ("numpy.core.multiarray", "_reconstruct", False),
        ("torch", "load", True),
        ("torch.hub", "load", True),
        ("torch.jit._serialization", "load", True),
        ("numpy", "load", True),
    ],
)
def test_suspicious_globals(module: str, name: str, suspicious: bool) -> None:
    assert is_suspicious(module, name) is suspicious


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
