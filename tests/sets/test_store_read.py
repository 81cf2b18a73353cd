"""Stores over sets: every declared store and `Store.from_file` open a directory or an index,
every builder works across the shards, and a filtered load opens only the shards it needs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.sets.test_index import INDEX, split_in_two, tensors, write_hand_set
from tests.sets.test_reader import SHARD_1, SHARD_2, count_opens
from weightstore import BurnpackStore, PytorchStore, SafetensorsStore, Store, load_from, save_into
from weightstore.adapters import FloatCastAdapter
from weightstore.errors import UnsupportedFormatError
from weightstore.sets import SetReader, SetWarning
from weightstore.sets._discover import WHY_STALE_SINGLE


def _model(values: dict[str, Any]) -> dict[str, Any]:
    """A NumPy dict model shaped like `values`, zero-filled."""
    layers: dict[str, Any] = {}
    for name, array in values.items():
        _, number, leaf = name.split(".")
        layers.setdefault(number, {})[leaf] = np.zeros_like(array)
    return {"layers": layers}


def _loaded(model: dict[str, Any]) -> dict[str, Any]:
    return {
        f"layers.{n}.{leaf}": array
        for n, leaves in model["layers"].items()
        for leaf, array in leaves.items()
    }


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SafeTensors files opened during the test, in order."""
    return count_opens(monkeypatch)


@pytest.fixture
def hand_set(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    values = tensors()
    write_hand_set(tmp_path / "set", split_in_two(values), metadata={"note": "x"})
    return tmp_path / "set", values


@pytest.mark.parametrize("path", ["directory", "index"])
@pytest.mark.parametrize("open_store", [SafetensorsStore.from_file, Store.from_file])
def test_a_store_on_a_set_loads_every_tensor(
    hand_set: tuple[Path, dict[str, Any]], path: str, open_store: Any
) -> None:
    directory, values = hand_set
    store = open_store(directory if path == "directory" else directory / INDEX)
    assert type(store) is SafetensorsStore
    assert store.keys() == sorted(values)
    assert store.read_metadata() == {"total_size": "192", "note": "x"}
    snapshot = store.get_tensor("layers.2.weight")
    assert snapshot is not None
    np.testing.assert_array_equal(snapshot.to_numpy(), values["layers.2.weight"])
    model = _model(values)
    result = load_from(model, store)
    assert sorted(result.applied) == sorted(values) and not result.unused
    for name, array in _loaded(model).items():
        np.testing.assert_array_equal(array, values[name])


def test_a_filtered_load_opens_only_the_shards_it_needs(
    hand_set: tuple[Path, dict[str, Any]], opened: list[str]
) -> None:
    directory, values = hand_set
    model = _model(values)
    store = SafetensorsStore.from_file(directory).with_regex(r"^layers\.3\.").allow_partial()
    result = store.apply_to(model)
    assert result.applied == ["layers.3.weight"]
    assert sorted(result.skipped) == ["layers.0.weight", "layers.1.weight", "layers.2.weight"]
    assert opened == [SHARD_2]
    # The report is a single file's: the file tensors left out are unused (read from the
    # index, no shard opened for them).
    assert result.unused == ["layers.0.weight", "layers.1.weight", "layers.2.weight"]
    np.testing.assert_array_equal(model["layers"]["3"]["weight"], values["layers.3.weight"])
    np.testing.assert_array_equal(model["layers"]["0"]["weight"], 0)


def test_a_filter_on_remapped_names_restricts_by_the_new_names(
    hand_set: tuple[Path, dict[str, Any]], opened: list[str]
) -> None:
    directory, values = hand_set
    store = (
        SafetensorsStore.from_file(directory)
        .with_key_remapping(r"^layers\.", "blocks.")
        .with_full_path("blocks.0.weight")
    )
    model = {"blocks": {"0": {"weight": np.zeros((4, 3), np.float32)}}}
    result = store.allow_partial().apply_to(model)
    assert opened == [SHARD_1]
    np.testing.assert_array_equal(model["blocks"]["0"]["weight"], values["layers.0.weight"])
    assert result.unused == ["blocks.1.weight", "blocks.2.weight", "blocks.3.weight"]
    # keys() is the whole source, as for a single file: filters act on loads and saves.
    assert store.keys() == [f"blocks.{n}.weight" for n in range(4)]


def test_a_filter_with_a_predicate_sees_every_shard(
    hand_set: tuple[Path, dict[str, Any]], opened: list[str]
) -> None:
    # A predicate may ask about module types, which only the load knows: nothing is left out.
    directory, _ = hand_set
    store = SafetensorsStore.from_file(directory).with_predicate(lambda path, _: "3" in path)
    assert len(store.keys()) == 4 and sorted(opened) == [SHARD_1, SHARD_2]


def test_an_adapter_works_across_the_set(hand_set: tuple[Path, dict[str, Any]]) -> None:
    directory, values = hand_set
    model = {"layers": {n: {"weight": np.zeros((4, 3), np.float16)} for n in "0123"}}
    store = SafetensorsStore.from_file(directory).with_from_adapter(FloatCastAdapter.to("F16"))
    load_from(model, store)
    for name, array in _loaded(model).items():
        assert array.dtype == np.float16
        np.testing.assert_array_equal(array, values[name].astype(np.float16))


def test_the_partial_load_report_covers_the_set(hand_set: tuple[Path, dict[str, Any]]) -> None:
    directory, values = hand_set
    model = _model(values)
    model["layers"]["9"] = {"weight": np.zeros(2, np.float32)}
    del model["layers"]["1"]
    result = SafetensorsStore.from_file(directory).allow_partial().apply_to(model)
    assert [path for path, _ in result.missing] == ["layers.9.weight"]
    assert result.unused == ["layers.1.weight"]
    assert str(directory) in str(result)


def test_a_burnpack_set_made_by_hand_loads(tmp_path: Path) -> None:
    values = tensors()
    directory = tmp_path / "bpk"
    directory.mkdir()
    halves = split_in_two(values)
    weight_map = {}
    for number, held in enumerate(halves.values(), start=1):
        shard = f"model-{number:05d}-of-00002.bpk"
        save_into(held, BurnpackStore.from_file(directory / shard))
        weight_map.update(dict.fromkeys(held, shard))
    index = {"metadata": {"total_size": 192}, "weight_map": weight_map}
    (directory / "model.bpk.index.json").write_text(json.dumps(index))
    for store in (BurnpackStore.from_file(directory), Store.from_file(directory)):
        assert type(store) is BurnpackStore and store.keys() == sorted(values)
        model = _model(values)
        load_from(model, store)
        for name, array in _loaded(model).items():
            np.testing.assert_array_equal(array, values[name])


def test_a_declared_store_on_another_formats_set_names_it(
    hand_set: tuple[Path, dict[str, Any]],
) -> None:
    directory, _ = hand_set
    with pytest.raises(UnsupportedFormatError) as caught:
        BurnpackStore.from_file(directory).keys()
    assert caught.value.found == "safetensors" and caught.value.path == str(directory)
    with pytest.raises(UnsupportedFormatError) as index:
        PytorchStore.from_file(directory / INDEX).keys()
    assert index.value.found == "safetensors"


def test_store_from_file_on_a_directory_without_a_set(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedFormatError, match="holding no checkpoint set"):
        Store.from_file(tmp_path)


def test_store_from_file_on_a_new_index_path_takes_the_inner_extension(tmp_path: Path) -> None:
    assert type(Store.from_file(tmp_path / "new" / "model.bpk.index.json")) is BurnpackStore
    assert type(Store.from_file(tmp_path / INDEX)) is SafetensorsStore


def test_the_set_report_reaches_the_store(hand_set: tuple[Path, dict[str, Any]]) -> None:
    directory, values = hand_set
    from weightstore import safetensors
    from weightstore.entry import TensorEntry

    stale = [TensorEntry.from_array(n, a + 1) for n, a in values.items()]
    safetensors.write_file(directory / "model.safetensors", stale)
    store = SafetensorsStore.from_file(directory)
    with pytest.warns(SetWarning, match="stale single file"):
        report = store.set_report()
    assert report is not None
    assert report.ignored == ((str(directory / "model.safetensors"), WHY_STALE_SINGLE),)
    assert report.path == str(directory / INDEX) and len(report.shards) == 2
    with pytest.warns(SetWarning):
        model = _model(values)
        load_from(model, store)
    for name, array in _loaded(model).items():  # the set's values, not the stale file's
        np.testing.assert_array_equal(array, values[name])
    assert SafetensorsStore.from_file(directory / "model.safetensors").set_report() is None


def test_a_torch_model_loads_each_shard_once(
    hand_set: tuple[Path, dict[str, Any]], opened: list[str]
) -> None:
    torch = pytest.importorskip("torch")
    directory, values = hand_set
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList(torch.nn.Linear(3, 4, bias=False) for _ in range(4))
    load_from(model, SafetensorsStore.from_file(directory))
    assert sorted(opened) == [SHARD_1, SHARD_2]
    for name, array in values.items():
        assert torch.equal(model.get_parameter(name).detach(), torch.from_numpy(array))
    meta = torch.nn.Module()
    with torch.device("meta"):
        meta.layers = torch.nn.ModuleList(torch.nn.Linear(3, 4, bias=False) for _ in range(4))
    opened.clear()
    load_from(meta, SafetensorsStore.from_file(directory), device="cpu")
    assert sorted(opened) == [SHARD_1, SHARD_2]


def test_a_store_reader_is_a_set_reader(hand_set: tuple[Path, dict[str, Any]]) -> None:
    directory, _ = hand_set
    assert isinstance(SafetensorsStore.from_file(directory)._open(), SetReader)


def test_a_single_file_load_never_imports_the_sets_package(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    save_into({"w": np.ones(2, np.float32)}, SafetensorsStore.from_file(path))
    code = (
        "import sys, numpy as np\n"
        "from weightstore import SafetensorsStore, load_from\n"
        f"load_from({{'w': np.zeros(2, np.float32)}}, SafetensorsStore.from_file({str(path)!r}))\n"
        "print(sorted(m for m in sys.modules if m.startswith('weightstore.sets')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
