"""Reading a checkpoint without keeping it resident: ``mode="pread"``, `PytorchReader.release`,
and the paused collector of an open (`weightstore.base._gc.collector_paused`)."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest

from weightstore.base._gc import collector_paused
from weightstore.errors import InvalidOptionError, WeightstoreError
from weightstore.pytorch_reader import PytorchReader

torch = pytest.importorskip("torch")


def _checkpoint(path: Path) -> dict[str, np.ndarray]:
    state = {
        "embed.weight": torch.arange(4096 * 3, dtype=torch.float32).reshape(4096, 3),
        "fc.weight": torch.arange(12, dtype=torch.int64).reshape(3, 4).t(),  # strided view
        "fc.bias": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
    }
    state["tied"] = state["embed.weight"]  # one storage, two names
    torch.save(state, path)
    return {name: t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()
            for name, t in state.items()}  # fmt: skip


def test_pread_mode_reads_the_same_values_as_copies(tmp_path: Path) -> None:
    expected = _checkpoint(tmp_path / "m.pt")
    with PytorchReader.from_file(tmp_path / "m.pt", mode="pread") as reader:
        arrays = {name: reader.get(name) for name in reader.names()}
        first, again = reader.get("embed.weight"), reader.get("embed.weight")
    assert list(arrays) == list(expected)
    for name, array in arrays.items():
        np.testing.assert_array_equal(array.astype(expected[name].dtype), expected[name])
    assert not np.shares_memory(first, again)  # a fresh read each time, nothing cached
    first[0, 0] = 99.0  # a copy of its own: writable, and the file is untouched
    with PytorchReader.from_file(tmp_path / "m.pt") as reader:
        assert reader.get("embed.weight")[0, 0] == 0.0


def test_pread_reader_refuses_reads_once_closed(tmp_path: Path) -> None:
    _checkpoint(tmp_path / "m.pt")
    reader = PytorchReader.from_file(tmp_path / "m.pt", mode="pread")
    reader.close()
    with pytest.raises(ValueError, match="closed"):
        reader.get("fc.bias")


def test_an_unknown_mode_is_refused_at_open(tmp_path: Path) -> None:
    _checkpoint(tmp_path / "m.pt")
    with pytest.raises(InvalidOptionError) as caught:
        PytorchReader.from_file(tmp_path / "m.pt", mode="mmapp")  # type: ignore[arg-type]
    assert caught.value.option == "mode"


def test_released_tensors_keep_their_values(tmp_path: Path) -> None:
    expected = _checkpoint(tmp_path / "m.pt")
    with PytorchReader.from_file(tmp_path / "m.pt") as reader:
        held = {name: reader.get(name) for name in reader.names()}
        for name in reader.names():
            reader.release(name)
        reader.release("no such tensor")  # nothing to release: no error
        for name, array in held.items():  # pages read back from the file when touched
            np.testing.assert_array_equal(array.astype(expected[name].dtype), expected[name])
        np.testing.assert_array_equal(reader.get("tied"), expected["embed.weight"])


def test_release_is_a_no_op_in_pread_mode(tmp_path: Path) -> None:
    expected = _checkpoint(tmp_path / "m.pt")
    with PytorchReader.from_file(tmp_path / "m.pt", mode="pread") as reader:
        array = reader.get("embed.weight")
        reader.release("embed.weight")
        np.testing.assert_array_equal(array, expected["embed.weight"])


@pytest.mark.parametrize("enabled", [True, False])
def test_an_open_leaves_the_collector_as_it_found_it(tmp_path: Path, enabled: bool) -> None:
    _checkpoint(tmp_path / "m.pt")
    (tmp_path / "bad.pt").write_bytes(b"\x80\x02]q\x00(K\x01")  # a pickle cut short
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        PytorchReader.from_file(tmp_path / "m.pt").close()
        assert gc.isenabled() is enabled
        with pytest.raises(WeightstoreError):  # a failed open restores it too
            PytorchReader.from_file(tmp_path / "bad.pt")
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


def test_collector_paused_nests_and_restores() -> None:
    was = gc.isenabled()
    try:
        gc.enable()
        with collector_paused():
            assert not gc.isenabled()
            with collector_paused():
                assert not gc.isenabled()
            assert not gc.isenabled()  # only the outermost pause re-enables it
        assert gc.isenabled()
    finally:
        gc.enable() if was else gc.disable()
