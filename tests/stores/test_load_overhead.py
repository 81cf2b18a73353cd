"""What a store load does per call, beyond the tensors: the collector paused and put back, the
file opened once, snapshots built from the reader's spans."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests._opens import counting_opens
from weightstore import BurnpackStore, SafetensorsStore, load_from, save_into
from weightstore.base._gc import collector_paused
from weightstore.burnpack import BurnpackReader
from weightstore.errors import UnsupportedFormatError
from weightstore.safetensors import SafetensorsReader
from weightstore.snapshot import reader_snapshots
from weightstore.stores import LoadFailedError

WEIGHTS: dict[str, np.ndarray[Any, Any]] = {
    "a": np.arange(6, dtype=np.float32).reshape(2, 3),
    "b": np.ones(4, dtype=np.int64),
}


@pytest.fixture
def collector_on() -> Iterator[None]:
    """The collector on for the test, and as the test found it afterwards."""
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


@pytest.mark.usefixtures("collector_on")
def test_gc_paused_restores_an_enabled_collector_also_on_error() -> None:
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(KeyError), collector_paused():
        raise KeyError("x")
    assert gc.isenabled()


@pytest.mark.usefixtures("collector_on")
def test_gc_paused_leaves_a_disabled_collector_disabled_and_nests() -> None:
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()
    gc.enable()
    with collector_paused():
        with collector_paused():
            pass
        assert not gc.isenabled()  # the inner pause does not switch the outer one's off
    assert gc.isenabled()


@pytest.mark.usefixtures("collector_on")
def test_a_store_load_runs_with_the_collector_off_and_restores_it(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    path = tmp_path / "w.safetensors"
    source = torch.nn.Linear(3, 2)
    save_into(source, SafetensorsStore.from_file(path))
    model, seen = torch.nn.Linear(3, 2), []
    model.register_load_state_dict_pre_hook(lambda *_: seen.append(gc.isenabled()))
    result = load_from(model, SafetensorsStore.from_file(path))
    assert sorted(result.applied) == ["bias", "weight"] and gc.isenabled()
    assert seen == [False]  # the model's own load code ran with the collector off
    assert torch.equal(model.weight, source.weight)


@pytest.mark.usefixtures("collector_on")
def test_a_failed_store_load_restores_the_collector(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    save_into({"a": WEIGHTS["a"]}, SafetensorsStore.from_file(path))
    with pytest.raises(LoadFailedError):
        load_from({"a": np.zeros(3, dtype=np.float32)}, SafetensorsStore.from_file(path))
    assert gc.isenabled()
    with pytest.raises(UnsupportedFormatError):  # fails while reading, before matching
        load_from({"a": WEIGHTS["a"]}, BurnpackStore.from_file(path))
    assert gc.isenabled()


@pytest.mark.parametrize(
    ("store_type", "name"), [(SafetensorsStore, "w.safetensors"), (BurnpackStore, "w.bpk")]
)
def test_a_load_opens_the_file_once(
    tmp_path: Path, store_type: type[SafetensorsStore], name: str
) -> None:
    path = tmp_path / name
    save_into(WEIGHTS, store_type.from_file(path))
    model = {name: np.zeros_like(array) for name, array in WEIGHTS.items()}
    with counting_opens(path) as opens, store_type.from_file(path) as store:
        load_from(model, store)
        store.keys(), store.read_metadata()
    assert len(opens) == 1  # the format check read the reader's own bytes
    np.testing.assert_array_equal(model["b"], WEIGHTS["b"])


def test_a_store_of_another_format_names_the_file_s_own(tmp_path: Path) -> None:
    path = tmp_path / "w.bpk"
    save_into(WEIGHTS, BurnpackStore.from_file(path))
    with counting_opens(path) as opens, pytest.raises(UnsupportedFormatError) as caught:
        SafetensorsStore.from_file(path).keys()
    assert len(opens) == 1 and caught.value.found == "burnpack"


def test_reader_snapshots_match_the_descriptors(tmp_path: Path) -> None:
    path = tmp_path / "w.bpk"
    save_into(WEIGHTS, BurnpackStore.from_file(path))
    save_into(WEIGHTS, SafetensorsStore.from_file(tmp_path / "w.safetensors"))
    with BurnpackReader.from_file(path) as pack:
        snapshots = reader_snapshots(pack)
        expected = [pack.descriptor(name) for name in pack.names_in_file_order()]
        assert [(s.full_path, s.dtype, s.shape, s.param_id) for s in snapshots] == [
            (d.name, d.dtype, d.shape, d.param_id) for d in expected
        ]
        assert all(s.param_id is not None for s in snapshots)  # burnpack saves give every one
        np.testing.assert_array_equal(snapshots[0].to_numpy(), pack.get(snapshots[0].full_path))
    with SafetensorsReader.from_file(tmp_path / "w.safetensors") as st:
        order = st.names_in_file_order()
        assert sorted(order) == ["a", "b"]
        assert st.tensor_infos() == [
            (name, st.descriptor(name).dtype, WEIGHTS[name].shape, None) for name in order
        ]
