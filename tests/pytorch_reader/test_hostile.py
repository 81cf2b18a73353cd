"""Hostile files: pickles that would run commands, import modules, or exhaust memory and time.
Reading them runs nothing (a marker file is never created) and either yields inert records or
fails with one of our errors."""

from __future__ import annotations

import contextlib
import os
import struct
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.pytorch_reader._support import (
    exercise,
    op_call,
    op_dict,
    op_global,
    op_int,
    op_list,
    op_storage,
    op_str,
    op_tensor,
    op_tuple,
    pickle_of,
    write_zip,
)
from weightstore.errors import LimitExceeded, WeightstoreError
from weightstore.pytorch_reader import InertObject, PytorchReader
from weightstore.pytorch_reader._layout import MAGIC_NUMBER, PROTOCOL_VERSION


def _system(module: str) -> Callable[[Path], bytes]:
    return lambda marker: op_call(op_global(module, "system"), op_str(f"touch {marker}"))


def _evaluate(name: str) -> Callable[[Path], bytes]:
    code = "open({!r}, 'w').close()"
    return lambda marker: op_call(op_global("builtins", name), op_str(code.format(str(marker))))


def _popen(marker: Path) -> bytes:
    return op_call(op_global("subprocess", "Popen"), op_list(op_str("touch"), op_str(str(marker))))


def _import_then_call(marker: Path) -> bytes:
    module = op_call(op_global("importlib", "import_module"), op_str("os"))
    system = op_call(op_global("builtins", "getattr"), module, op_str("system"))
    return op_call(system, op_str(f"touch {marker}"))


PAYLOADS: dict[str, Callable[[Path], bytes]] = {
    "os.system": _system("os"),
    "posix.system": _system("posix"),
    "builtins.eval": _evaluate("eval"),
    "builtins.exec": _evaluate("exec"),
    "subprocess.Popen": _popen,
    "importlib.import_module": _import_then_call,
}
WEIGHT = np.arange(4, dtype="<f4")


def _root(payload: bytes, storage: bytes) -> bytes:
    tensor = op_tensor(storage, 0, (4,), (1,))
    return op_dict([(op_str("weight"), tensor), (op_str("evil"), payload)])


def _write(layout: str, path: Path, payload: bytes) -> Path:
    if layout == "zip":
        return write_zip(
            path, pickle_of(_root(payload, op_storage("0", 4))), {"0": WEIGHT.tobytes()}
        )
    if layout == "plain":
        path.write_bytes(pickle_of(op_dict([(op_str("evil"), payload)])))
        return path
    storage = (
        op_tuple(
            op_str("storage"),
            op_global("torch", "FloatStorage"),
            op_str("k0"),
            op_str("cpu"),
            op_int(4),
            b"N",
        )
        + b"Q"
    )
    path.write_bytes(
        pickle_of(op_int(MAGIC_NUMBER))
        + pickle_of(op_int(PROTOCOL_VERSION))
        + pickle_of(op_dict([(op_str("little_endian"), b"\x88")]))
        + pickle_of(_root(payload, storage))
        + pickle_of(op_list(op_str("k0")))
        + struct.pack("<q", 4)
        + WEIGHT.tobytes()
    )
    return path


@pytest.mark.parametrize("layout", ["zip", "legacy", "plain"])
@pytest.mark.parametrize("target", list(PAYLOADS))
def test_a_payload_is_recorded_and_never_run(tmp_path: Path, layout: str, target: str) -> None:
    marker = tmp_path / "marker"
    path = _write(layout, tmp_path / "evil.pt", PAYLOADS[target](marker))
    exercise(path)
    with PytorchReader(path) as reader:
        evil = reader.load_object("evil")
        if layout != "plain":
            assert reader.names() == ["weight"]
            assert reader.get("weight").tolist() == [0, 1, 2, 3]
    assert isinstance(evil, InertObject)
    if target != "importlib.import_module":
        assert evil.class_name == target
    assert not marker.exists()


class Payload:
    """What an attacker pickles: torch.save runs `__reduce__` and writes `os.system(...)`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("legacy", [False, True])
def test_a_payload_written_by_torch_save(tmp_path: Path, legacy: bool) -> None:
    torch = pytest.importorskip("torch")
    marker = tmp_path / "marker"
    path = tmp_path / "evil.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save(
            {"w": torch.ones(2), "evil": Payload(marker)},
            path,
            _use_new_zipfile_serialization=not legacy,
        )
    with PytorchReader(path) as reader:
        assert reader.names() == ["w"]
        evil = reader.load_object("evil")
    assert isinstance(evil, InertObject) and evil.class_name == f"{os.system.__module__}.system"
    assert evil.args == (f"touch {marker}",)
    assert not marker.exists()


def test_a_module_named_in_the_file_is_never_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "ws_canary_module.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    body = op_call(op_global("ws_canary_module", "anything"), op_int(1))
    path = _write("zip", tmp_path / "canary.pt", body)
    with PytorchReader(path) as reader:
        assert isinstance(reader.load_object("evil"), InertObject)
    assert not marker.exists()
    assert "ws_canary_module" not in sys.modules


@pytest.mark.parametrize(
    ("body", "limits"),
    [
        (b"(" * 100_000, {}),  # marks opened without end
        (b"N" * 50_000, {"max_stack_size": 10_000}),  # a stack that only grows
        (b"N" + b"\x94" * 20_000, {"max_memo_size": 1_000}),  # a memo that only grows
        (b"](" + b"N" * 20_000 + b"e", {"max_container_size": 1_000}),  # one huge list
        (b"}N" + b"\x85" * 50_000 + b"Ns", {}),  # a key too deep to hash
    ],
    ids=["marks", "stack", "memo", "list", "deep key"],
)
def test_bombs_stop_at_a_limit(tmp_path: Path, body: bytes, limits: dict[str, int]) -> None:
    path = write_zip(tmp_path / "bomb.pt", pickle_of(body), {})
    with pytest.raises(LimitExceeded):
        PytorchReader(path, **limits)


def test_garbage_after_a_valid_header_raises_our_errors(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    path = tmp_path / "garbage.pt"
    for start in (b"\x80\x02", b"\x80\x05\x95", b"PK\x03\x04", b"(", b"c"):
        for _ in range(20):
            path.write_bytes(start + rng.integers(0, 256, 200, dtype=np.uint8).tobytes())
            with contextlib.suppress(WeightstoreError):
                exercise(path)
