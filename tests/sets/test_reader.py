"""`SetReader`: the reader protocol over many shards, each opened lazily and once, checked
against the index when it opens (set id, tensors missing, tensors unlisted)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.sets.test_index import INDEX, split_in_two, tensors, write_hand_set
from weightstore import burnpack, safetensors
from weightstore.entry import TensorEntry
from weightstore.errors import (
    LimitExceeded,
    SetError,
    SetMismatchError,
    TensorNotFoundError,
    UnsupportedFormatError,
)
from weightstore.safetensors import SafetensorsReader
from weightstore.sets import SET_ID_KEY, SetWarning, open_set
from weightstore.sets._discover import WHY_STALE_SINGLE, WHY_STRAY_SHARD

SHARD_1, SHARD_2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
SET_ID = "5e7" + "0" * 29


def count_opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The file names SafeTensors readers are opened on from now on, in order."""
    paths: list[str] = []
    original = SafetensorsReader.from_file.__func__  # type: ignore[attr-defined]

    def counting(cls: type[SafetensorsReader], /, path: Any, **options: Any) -> SafetensorsReader:
        paths.append(Path(path).name)
        return original(cls, path, **options)  # type: ignore[no-any-return]

    monkeypatch.setattr(SafetensorsReader, "from_file", classmethod(counting))
    return paths


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return count_opens(monkeypatch)


def test_a_set_reads_as_one_reader(tmp_path: Path) -> None:
    values = tensors()
    write_hand_set(tmp_path, split_in_two(values), metadata={"format": "pt"})
    with open_set(tmp_path) as reader:
        assert reader.path == str(tmp_path / INDEX) and reader.format.name == "safetensors"
        assert reader.names() == sorted(values) == list(reader) and len(reader) == 4
        assert reader.names_in_file_order() == sorted(values)  # shard 1's, then shard 2's
        assert "layers.3.weight" in reader and "nope" not in reader and 3 not in reader
        for name, array in values.items():
            np.testing.assert_array_equal(reader.get(name), array)
            info = reader.descriptor(name)
            assert (info.dtype.name, info.shape) == ("F32", (4, 3))
        np.testing.assert_array_equal(
            reader.get_slice("layers.2.weight")[1:3], values["layers.2.weight"][1:3]
        )
        assert reader.metadata() == {"total_size": "192", "format": "pt"}
        assert reader.shard_of("layers.3.weight") == str(tmp_path / SHARD_2)
        assert reader.shards == [str(tmp_path / SHARD_1), str(tmp_path / SHARD_2)]
        assert reader.index is not None and reader.index.set_id is None
        infos = reader.tensor_infos()
        assert [(n, d.name, s) for n, d, s, _ in infos] == [
            (n, "F32", (4, 3)) for n in sorted(values)
        ]


def test_opening_a_set_opens_no_shard(tmp_path: Path, opened: list[str]) -> None:
    write_hand_set(tmp_path, split_in_two(tensors()))
    reader = open_set(tmp_path)
    assert reader.listed_names() == sorted(tensors())
    assert reader.shard_of("layers.0.weight").endswith(SHARD_1)
    assert opened == []
    reader.get("layers.3.weight")
    assert opened == [SHARD_2]  # only the shard holding it
    for name in sorted(tensors()) * 3:
        reader.get(name)
    assert opened == [SHARD_2, SHARD_1]  # each shard once, kept open
    reader.close()


def test_a_restricted_reader_never_opens_the_other_shards(
    tmp_path: Path, opened: list[str]
) -> None:
    write_hand_set(tmp_path, split_in_two(tensors()))
    reader = open_set(tmp_path).restricted(["layers.2.weight", "not-in-the-index"])
    assert reader.listed_names() == ["layers.2.weight"]
    assert reader.names() == reader.names_in_file_order() == ["layers.2.weight"]
    assert reader.shards == [str(tmp_path / SHARD_2)]
    reader.get("layers.2.weight")
    with pytest.raises(TensorNotFoundError):
        reader.get("layers.0.weight")  # in the set, outside the restriction
    assert opened == [SHARD_2]


def test_an_unknown_tensor_is_not_found(tmp_path: Path) -> None:
    write_hand_set(tmp_path, split_in_two(tensors()))
    with open_set(tmp_path) as reader, pytest.raises(TensorNotFoundError) as caught:
        reader.get("nope")
    assert caught.value.tensor == "nope" and caught.value.path == str(tmp_path / INDEX)


def test_a_set_of_one_file(tmp_path: Path) -> None:
    values = tensors()
    entries = [TensorEntry.from_array(n, a) for n, a in values.items()]
    safetensors.write_file(tmp_path / "model.safetensors", entries, {"k": "v"})
    with open_set(tmp_path) as reader:
        assert reader.path == str(tmp_path / "model.safetensors") and reader.index is None
        assert reader.names() == sorted(values) and reader.metadata() == {"k": "v"}
        np.testing.assert_array_equal(reader.get("layers.1.weight"), values["layers.1.weight"])


# -- the set id -------------------------------------------------------------------------------


def test_shards_of_the_indexs_save_load(tmp_path: Path) -> None:
    write_hand_set(
        tmp_path,
        split_in_two(tensors()),
        metadata={SET_ID_KEY: SET_ID},
        shard_metadata={SET_ID_KEY: SET_ID},
    )
    with open_set(tmp_path) as reader:
        assert reader.index is not None and reader.index.set_id == SET_ID
        assert len(reader.names()) == 4


def test_a_shard_of_another_save_is_a_mismatch(tmp_path: Path) -> None:
    # Two saves mixed: the index says one id, a shard carries another.
    index = write_hand_set(
        tmp_path,
        split_in_two(tensors()),
        metadata={SET_ID_KEY: SET_ID},
        shard_metadata={SET_ID_KEY: "f" * 32},
    )
    reader = open_set(tmp_path)
    with pytest.raises(SetMismatchError) as caught:
        reader.get("layers.2.weight")
    assert caught.value.path == str(index) and caught.value.shard == str(tmp_path / SHARD_2)
    assert isinstance(caught.value, SetError)
    with pytest.raises(SetMismatchError):  # still refused on the next touch: never cached
        reader.names()


def test_a_shard_without_the_id_of_an_index_that_has_one_is_a_mismatch(tmp_path: Path) -> None:
    write_hand_set(tmp_path, split_in_two(tensors()), metadata={SET_ID_KEY: SET_ID})
    with open_set(tmp_path) as reader, pytest.raises(SetMismatchError, match="carries no set id"):
        reader.get("layers.0.weight")


# -- shards that disagree with the index ------------------------------------------------------


def test_a_tensor_listed_but_absent_is_missing(tmp_path: Path) -> None:
    values = tensors()
    shards = split_in_two(values)
    weight_map = {**{n: SHARD_1 for n in shards[SHARD_1]}, **{n: SHARD_2 for n in shards[SHARD_2]}}
    weight_map["ghost"] = SHARD_2
    write_hand_set(tmp_path, shards, weight_map=weight_map)
    reader = open_set(tmp_path)
    assert "ghost" in reader.listed_names()
    with pytest.warns(SetWarning, match="lacks 'ghost'"):
        assert reader.names() == sorted(values)
    assert reader.missing_from_shards == {str(tmp_path / SHARD_2): ["ghost"]}
    assert "ghost" not in reader
    with pytest.raises(TensorNotFoundError):
        reader.get("ghost")


def test_a_tensor_the_index_does_not_list_is_unlisted_and_never_read(tmp_path: Path) -> None:
    shards = split_in_two(tensors())
    shards[SHARD_2]["smuggled"] = np.zeros(3, np.float32)
    weight_map = {n: s for s, held in shards.items() for n in held if n != "smuggled"}
    write_hand_set(tmp_path, shards, weight_map=weight_map)
    reader = open_set(tmp_path)
    with pytest.warns(SetWarning, match="'smuggled', which the index does not list"):
        names = reader.names()
    assert "smuggled" not in names and reader.unlisted == {str(tmp_path / SHARD_2): ["smuggled"]}
    with pytest.raises(TensorNotFoundError):
        reader.get("smuggled")


def test_a_tensor_also_in_a_shard_the_index_does_not_name_for_it_is_ignored(tmp_path: Path) -> None:
    values = tensors()
    shards = split_in_two(values)
    shards[SHARD_2]["layers.0.weight"] = np.full((4, 3), 9, np.float32)  # a stale duplicate
    weight_map = {n: SHARD_1 if n < "layers.2" else SHARD_2 for n in values}
    write_hand_set(tmp_path, shards, weight_map=weight_map)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: the index is clear about where it lives
        with open_set(tmp_path) as reader:
            np.testing.assert_array_equal(reader.get("layers.0.weight"), values["layers.0.weight"])
            assert reader.names() == sorted(values) and reader.unlisted == {}


def test_a_shard_missing_from_disk_fails_at_open(tmp_path: Path, opened: list[str]) -> None:
    index = write_hand_set(tmp_path, split_in_two(tensors()))
    (tmp_path / SHARD_1).unlink()
    with pytest.raises(SetError, match="does not exist") as caught:
        open_set(tmp_path)
    assert (caught.value.path, caught.value.shard) == (str(index), SHARD_1)
    assert opened == []  # found by a stat, before any shard opened


def test_a_shard_of_another_format_is_named(tmp_path: Path) -> None:
    write_hand_set(tmp_path, split_in_two(tensors()))
    burnpack.write_file(
        tmp_path / SHARD_2, [TensorEntry.from_array("layers.2.weight", np.ones(2))], overwrite=True
    )
    with open_set(tmp_path) as reader, pytest.raises(UnsupportedFormatError) as caught:
        reader.get("layers.2.weight")
    assert caught.value.found == "burnpack" and caught.value.path == str(tmp_path / SHARD_2)


# -- files in the directory that are not the set ---------------------------------------------


def test_a_stale_single_file_never_leaks_into_the_load(tmp_path: Path) -> None:
    values, stale = tensors(0), tensors(1)
    write_hand_set(tmp_path, split_in_two(values))
    entries = [TensorEntry.from_array(n, a) for n, a in stale.items()]
    safetensors.write_file(tmp_path / "model.safetensors", entries)
    with pytest.warns(SetWarning, match="model.safetensors \\(stale single file"):
        reader = open_set(tmp_path)
    assert reader.ignored == [(str(tmp_path / "model.safetensors"), WHY_STALE_SINGLE)]
    for name, array in values.items():
        np.testing.assert_array_equal(reader.get(name), array)
    reader.close()


def test_stray_shards_never_leak_into_the_load(tmp_path: Path) -> None:
    values = tensors(0)
    write_hand_set(tmp_path, split_in_two(values))
    stray = {"layers.0.weight": tensors(1)["layers.0.weight"], "extra": np.ones(2, np.float32)}
    for name in ("model-00001-of-00003.safetensors", "model-00002-of-00002.0badc0de.safetensors"):
        safetensors.write_file(
            tmp_path / name, [TensorEntry.from_array(n, a) for n, a in stray.items()]
        )
    with pytest.warns(SetWarning, match="stray shard"):
        reader = open_set(tmp_path)
    assert sorted(reader.ignored) == [
        (str(tmp_path / "model-00001-of-00003.safetensors"), WHY_STRAY_SHARD),
        (str(tmp_path / "model-00002-of-00002.0badc0de.safetensors"), WHY_STRAY_SHARD),
    ]
    assert reader.names() == sorted(values)
    np.testing.assert_array_equal(reader.get("layers.0.weight"), values["layers.0.weight"])
    report = reader.report()
    assert (
        report.ignored == tuple(reader.ignored) and report.unlisted == {} and report.missing == {}
    )
    reader.close()


def test_shards_beside_a_single_file_are_strays(tmp_path: Path) -> None:
    # A sharded save replaced by an unsharded one whose cleanup was interrupted.
    values = tensors(0)
    entries = [TensorEntry.from_array(n, a) for n, a in values.items()]
    safetensors.write_file(tmp_path / "model.safetensors", entries)
    safetensors.write_file(tmp_path / SHARD_1, [TensorEntry.from_array("old", np.ones(2))])
    with pytest.warns(SetWarning):
        reader = open_set(tmp_path)
    assert reader.ignored == [(str(tmp_path / SHARD_1), WHY_STRAY_SHARD)]
    assert reader.names() == sorted(values)
    reader.close()


def test_reader_options_reach_every_shard(tmp_path: Path) -> None:
    values = tensors()
    write_hand_set(tmp_path, split_in_two(values))
    with open_set(tmp_path, mode="pread") as reader:
        np.testing.assert_array_equal(reader.get("layers.3.weight"), values["layers.3.weight"])
    with open_set(tmp_path, max_header_size=8) as small, pytest.raises(LimitExceeded):
        small.get("layers.0.weight")


def test_an_index_with_no_tensors_is_an_empty_set(tmp_path: Path) -> None:
    (tmp_path / INDEX).write_text('{"metadata": {"total_size": 0}, "weight_map": {}}')
    with open_set(tmp_path) as reader:
        assert reader.names() == [] and reader.format.name == "safetensors"
