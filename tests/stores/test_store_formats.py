"""One store over the registry: the format picked from content, and wrong-format diagnoses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from weightstore import (
    BurnpackStore,
    PytorchStore,
    SafetensorsStore,
    Store,
    burnpack,
    load_from,
    safetensors,
    save_into,
)
from weightstore.entry import TensorEntry
from weightstore.errors import InvalidOptionError, SetError, UnsupportedFormatError

WEIGHT = np.arange(6, dtype=np.float32).reshape(2, 3)


def _model() -> dict[str, Any]:
    return {"w": np.zeros_like(WEIGHT)}


def _write_all(tmp_path: Path) -> dict[str, Path]:
    entries = [TensorEntry.from_array("w", WEIGHT)]
    paths = {"burnpack": tmp_path / "m.bpk", "safetensors": tmp_path / "m.safetensors"}
    burnpack.write_file(paths["burnpack"], entries)
    safetensors.write_file(paths["safetensors"], entries)
    pickle_path = tmp_path / "m.pt"
    pickle_path.write_bytes(b"\x80\x02}q\x00.")  # an empty dict pickled: a PyTorch file
    paths["pytorch"] = pickle_path
    return paths


def test_store_from_file_picks_the_format_from_content(tmp_path: Path) -> None:
    paths = _write_all(tmp_path)
    expected = {"burnpack": BurnpackStore, "safetensors": SafetensorsStore,
                "pytorch": PytorchStore}  # fmt: skip
    for name, path in paths.items():
        disguised = path.rename(tmp_path / f"{name}.bin")
        store = Store.from_file(disguised)
        assert type(store) is expected[name] and store.format_name == name
    model = _model()
    load_from(model, Store.from_file(tmp_path / "burnpack.bin"))
    np.testing.assert_array_equal(model["w"], WEIGHT)


def test_store_from_file_on_a_new_path_uses_its_extension(tmp_path: Path) -> None:
    save_into({"w": WEIGHT}, Store.from_file(tmp_path / "new.safetensors"))
    assert formats_of(tmp_path / "new.safetensors") == "safetensors"
    assert type(Store.from_file(tmp_path / "new.bpk")) is BurnpackStore
    with pytest.raises(UnsupportedFormatError, match="extension names no format"):
        Store.from_file(tmp_path / "new.unknown")


def test_store_from_file_follows_burns_extension_rule(tmp_path: Path) -> None:
    save_into({"w": WEIGHT}, BurnpackStore.from_file(tmp_path / "model"))  # -> model.bpk
    store = Store.from_file(tmp_path / "model")
    assert type(store) is BurnpackStore and store.keys() == ["w"]


def test_a_file_named_without_extension_opens_as_the_reader_opens_it(tmp_path: Path) -> None:
    # Before, BurnpackReader.from_file("c") opened c while BurnpackStore.from_file("c") looked
    # for c.bpk: one rule now serves reader, writer and store.
    exact = tmp_path / "c"
    exact.write_bytes(burnpack.write_bytes([TensorEntry.from_array("w", WEIGHT)]))
    assert BurnpackStore.from_file(exact).keys() == ["w"]
    with burnpack.BurnpackReader.from_file(exact) as pack:
        assert pack.names() == ["w"]


def test_store_from_bytes_picks_the_format() -> None:
    data = safetensors.write_bytes([TensorEntry.from_array("w", WEIGHT)])
    assert type(Store.from_bytes(data)) is SafetensorsStore
    assert type(Store.from_static(data)) is SafetensorsStore
    with pytest.raises(InvalidOptionError):
        Store.from_bytes()
    with pytest.raises(InvalidOptionError) as caught:
        PytorchStore.from_bytes(b"\x80\x02}q\x00.")
    assert caught.value.format == "pytorch"


@pytest.mark.parametrize(
    ("store_type", "actual"),
    [(SafetensorsStore, "pytorch"), (SafetensorsStore, "burnpack"), (BurnpackStore, "safetensors"),
     (BurnpackStore, "pytorch"), (PytorchStore, "safetensors"), (PytorchStore, "burnpack")],
)  # fmt: skip
def test_a_store_on_another_formats_file_names_the_real_format(
    tmp_path: Path, store_type: Any, actual: str
) -> None:
    # Before: a SafetensorsStore on a .pt reported a 578 PB header and advised raising a limit.
    path = _write_all(tmp_path)[actual]
    with pytest.raises(UnsupportedFormatError) as caught:
        store_type.from_file(path).keys()
    assert caught.value.found == actual and caught.value.path == str(path)
    assert "Store.from_file" in caught.value.detail


def test_a_store_on_a_sharded_index_reads_the_set(tmp_path: Path) -> None:
    # Before sets were read: SafetensorsStore on model.safetensors.index.json reported an 8 EB
    # header. Now the index opens its set, and a shard it names but the directory lacks is
    # the error, naming both.
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": {"w": "model-1.safetensors"}}))
    with pytest.raises(SetError) as caught:
        SafetensorsStore.from_file(index).keys()
    assert caught.value.path == str(index)
    assert caught.value.shard == "model-1.safetensors"


def test_in_memory_stores_diagnose_foreign_bytes_too() -> None:
    data = burnpack.write_bytes([TensorEntry.from_array("w", WEIGHT)])
    with pytest.raises(UnsupportedFormatError) as caught:
        SafetensorsStore.from_bytes(data).keys()
    assert caught.value.found == "burnpack"


def formats_of(path: Path) -> str:
    from weightstore.formats import detect_format

    return detect_format(path).name
