"""`durable(False)` saves: the atomic scratch-file-then-name step stays, the fsyncs go.

fsync is counted by wrapping `os.fsync` (durability itself cannot be observed without pulling
the power); atomicity is checked as in test_atomic_faults: killed children, failed writes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pytest

from tests.test_atomic_faults import (
    OLD,
    _new_contents,
    _run_child,
    posix_only,
    scratch,  # noqa: F401  (the fixture: both ways of holding the bytes; usefixtures)
)
from weightstore import (
    BurnpackStore,
    PytorchStore,
    SafetensorsStore,
    burnpack,
    load_from,
    safetensors,
    save_into,
)
from weightstore.entry import TensorEntry
from weightstore.errors import InvalidOptionError
from weightstore.io._atomic import write_all, write_atomic


@pytest.fixture
def fsync_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every descriptor `os.fsync` was called with, the real fsync still running."""
    calls: list[int] = []
    plain_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        calls.append(fd)
        plain_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    return calls


def _model() -> dict[str, Any]:
    rng = np.random.default_rng(7)
    return {
        "layer": {
            "weight": rng.standard_normal((3, 4)).astype(np.float32),
            "bias": rng.standard_normal(3).astype(np.float32),
        }
    }


def _entries() -> list[TensorEntry]:
    return [TensorEntry.from_array("w", np.arange(6, dtype=np.float32).reshape(2, 3))]


# -- write_atomic ---------------------------------------------------------------------------------


@pytest.mark.usefixtures("scratch")
@pytest.mark.parametrize("overwrite", [True, False], ids=["overwrite", "new-file"])
def test_a_durable_save_fsyncs_the_file_and_its_directory(
    tmp_path: Path, fsync_calls: list[int], overwrite: bool
) -> None:
    target = tmp_path / "model.bin"
    if overwrite:
        target.write_bytes(OLD)
    write_atomic(target, lambda file: write_all(file, memoryview(b"new")), overwrite=overwrite)
    on_windows = os.name != "posix"  # no directory fsync there
    assert len(fsync_calls) == (1 if on_windows else 2)
    assert target.read_bytes() == b"new" and os.listdir(tmp_path) == ["model.bin"]


@pytest.mark.usefixtures("scratch")
@pytest.mark.parametrize("overwrite", [True, False], ids=["overwrite", "new-file"])
def test_a_non_durable_save_is_whole_and_calls_no_fsync(
    tmp_path: Path, fsync_calls: list[int], overwrite: bool
) -> None:
    target = tmp_path / "model.bin"
    if overwrite:
        target.write_bytes(OLD)
    written = write_atomic(
        target, lambda file: write_all(file, memoryview(b"new")), overwrite=overwrite, durable=False
    )
    assert written == str(target)
    assert fsync_calls == []
    assert target.read_bytes() == b"new" and os.listdir(tmp_path) == ["model.bin"]


@pytest.mark.usefixtures("scratch")
def test_a_failed_non_durable_save_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "model.bin"
    target.write_bytes(OLD)

    def write(file: BinaryIO) -> None:
        write_all(file, memoryview(b"partial"))
        raise RuntimeError("the source ran dry")

    with pytest.raises(RuntimeError):
        write_atomic(target, write, overwrite=True, durable=False)
    assert os.listdir(tmp_path) == ["model.bin"] and target.read_bytes() == OLD


@posix_only
@pytest.mark.parametrize("scratch_kind", ["anonymous", "named"])
def test_killed_non_durable_saves_leave_old_or_new(tmp_path: Path, scratch_kind: str) -> None:
    target = tmp_path / "model.bpk"
    target.write_bytes(OLD)
    for kill_at in ("3", "publish"):  # mid-write, and just before the rename
        _run_child(target, scratch_kind, True, "n", kill_at, durable=False)
        assert target.read_bytes() == OLD  # neither kill point reaches the rename
    _run_child(target, scratch_kind, True, "f", None, durable=False)
    assert os.listdir(tmp_path) == ["model.bpk"]  # the completed save removed the leftovers
    assert target.read_bytes() == _new_contents("f")


# -- writers --------------------------------------------------------------------------------------

WRITE_FILES: list[Callable[..., str]] = [burnpack.write_file, safetensors.write_file]


@pytest.mark.parametrize("write_file", WRITE_FILES, ids=["burnpack", "safetensors"])
@pytest.mark.parametrize("durable", [True, False])
def test_write_file_takes_durable(
    tmp_path: Path, fsync_calls: list[int], write_file: Callable[..., str], durable: bool
) -> None:
    path = write_file(tmp_path / "model.st", _entries(), durable=durable)
    assert (len(fsync_calls) > 0) is durable
    in_memory = (burnpack if write_file is burnpack.write_file else safetensors).write_bytes
    assert Path(path).read_bytes() == in_memory(_entries())  # the same bytes either way


def test_a_writers_save_takes_durable(tmp_path: Path, fsync_calls: list[int]) -> None:
    writer = safetensors.SafetensorsWriter(_entries())
    writer.save(tmp_path / "model.safetensors", durable=False)
    assert fsync_calls == []
    writer.save(tmp_path / "model.safetensors", overwrite=True)
    assert len(fsync_calls) > 0


# -- stores ---------------------------------------------------------------------------------------

SAVING_STORES = [BurnpackStore, SafetensorsStore]


@pytest.mark.parametrize("store_type", SAVING_STORES, ids=["burnpack", "safetensors"])
def test_stores_save_durably_by_default(
    tmp_path: Path, fsync_calls: list[int], store_type: Any
) -> None:
    store = store_type.from_file(tmp_path / "model.bin")
    assert store.options.durable is True
    save_into(_model(), store)
    assert len(fsync_calls) > 0


@pytest.mark.parametrize("store_type", SAVING_STORES, ids=["burnpack", "safetensors"])
def test_stores_skip_fsync_when_not_durable(
    tmp_path: Path, fsync_calls: list[int], store_type: Any
) -> None:
    base = store_type.from_file(tmp_path / "model.bin")
    store = base.durable(False)
    assert store.options.durable is False and base.options.durable is True
    assert store.durable().options.durable is True
    save_into(_model(), store)
    assert fsync_calls == []
    assert os.listdir(tmp_path) == ["model.bin"]  # no scratch file left beside it
    loaded = {"layer": {"weight": np.zeros((3, 4), np.float32), "bias": np.zeros(3, np.float32)}}
    load_from(loaded, store_type.from_file(tmp_path / "model.bin"))
    for name in ("weight", "bias"):
        np.testing.assert_array_equal(loaded["layer"][name], _model()["layer"][name])


def test_a_memory_store_accepts_durable_and_writes_the_same_bytes() -> None:
    durable = SafetensorsStore.from_bytes()
    fast = SafetensorsStore.from_bytes().durable(False)
    save_into(_model(), durable)
    save_into(_model(), fast)
    assert durable.get_bytes() == fast.get_bytes()


def test_the_pytorch_store_refuses_durable_as_it_refuses_saving() -> None:
    with pytest.raises(InvalidOptionError) as caught:
        PytorchStore.from_file("x.pt").durable(False)
    assert (caught.value.option, caught.value.format) == ("durable", "pytorch")
    assert "durable" in BurnpackStore.from_bytes().format.store_options
