"""Reading a checkpoint directory in one process, without torch: whole tensors put together
from chunks, slices read from just the chunks they cross, rank files checked against the
index, and stores and the CLI opening the directory. The checkpoints are written here from
their parts (burnpack rank files and the index), so NumPy is the oracle."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weightstore import BurnpackStore, SafetensorsStore, Store, burnpack, load_from
from weightstore.cli import main as cli
from weightstore.dcp._index import (
    CHUNKS_KEY,
    DCP_INDEX_NAME,
    DcpChunk,
    DcpTensor,
    dcp_index_bytes,
    rank_file_name,
)
from weightstore.dcp._reader import open_dcp
from weightstore.dtypes import from_numpy
from weightstore.entry import TensorEntry
from weightstore.errors import SetError, SetMismatchError, SliceError, UnsupportedFormatError
from weightstore.safetensors import SafetensorsReader
from weightstore.sets._index import SET_ID_KEY

SET_ID = "fedcba9876543210fedcba9876543210"

Grid = list[tuple[int, tuple[int, ...], tuple[int, ...]]]  # (rank, offsets, sizes)


def tensors() -> dict[str, tuple[np.ndarray[Any, Any], Grid]]:
    """Whole tensors and how they are split over three ranks' files."""
    matrix = np.arange(7 * 5, dtype=np.float32).reshape(7, 5)
    vector = (np.arange(9) - 4).astype(ml_dtypes.bfloat16)
    return {
        "enc.w": (  # a 2 x 2 grid of uneven blocks over three files
            matrix,
            [(0, (0, 0), (4, 3)), (1, (0, 3), (4, 2)), (2, (4, 0), (3, 3)), (0, (4, 3), (3, 2))],
        ),
        "enc.v": (vector, [(1, (0,), (5,)), (2, (5,), (0,)), (0, (5,), (4,))]),  # one empty
        "step": (np.array(7, np.int64), [(2, (), ())]),
        "none": (np.zeros((4, 0), np.float32), [(0, (0, 0), (4, 0))]),
    }


def write_checkpoint(
    directory: Path, contents: dict[str, tuple[np.ndarray[Any, Any], Grid]] | None = None
) -> Path:
    """A checkpoint as the storage writer lays it out, written from its parts."""
    contents = tensors() if contents is None else contents
    directory.mkdir(exist_ok=True)
    per_file: dict[str, list[TensorEntry]] = {}
    chunks_json: dict[str, dict[str, Any]] = {}
    index_tensors = {}
    for fqn, (array, grid) in contents.items():
        chunks = []
        for rank, offsets, sizes in grid:
            file = rank_file_name(rank, SET_ID, "bpk")
            region = tuple(slice(o, o + s) for o, s in zip(offsets, sizes, strict=True))
            entries = per_file.setdefault(file, [])
            name = fqn if all(e.name != fqn for e in entries) else f"{fqn}@{offsets}"
            entries.append(TensorEntry.from_array(name, np.array(array[region])))  # 0-d stays 0-d
            chunks_json.setdefault(file, {})[name] = {"fqn": fqn, "offsets": list(offsets)}
            chunks.append(DcpChunk(file, name, offsets, sizes))
        index_tensors[fqn] = DcpTensor(from_numpy(array.dtype), array.shape, chunks)
    for file, entries in per_file.items():
        metadata = {SET_ID_KEY: SET_ID, CHUNKS_KEY: json.dumps(chunks_json[file])}
        burnpack.write_file(directory / file, entries, metadata, overwrite=True)
    index = dcp_index_bytes(
        SET_ID,
        index_tensors,
        {"epoch": 3, "sched.betas": (0.9, 0.99)},
        paths=None,
        planner_data=None,
        metadata={"run": "unit"},
        container="burnpack",
        dcp_version="1.0.0",
    )
    (directory / DCP_INDEX_NAME).write_bytes(index)
    return directory


def test_whole_tensors_are_put_together_from_their_chunks(tmp_path: Path) -> None:
    with open_dcp(str(write_checkpoint(tmp_path / "ckpt"))) as reader:
        assert reader.names() == ["enc.v", "enc.w", "none", "step"]
        for name, (array, _) in tensors().items():
            got = reader.get(name)
            assert got.dtype == array.dtype and got.shape == array.shape, name
            assert np.array_equal(got, array), name
            info = reader.descriptor(name)
            assert info.shape == array.shape and info.dtype == from_numpy(array.dtype)
        assert reader.values() == {"epoch": 3, "sched.betas": (0.9, 0.99)}
        assert reader.metadata()["run"] == "unit"
        assert SET_ID_KEY not in reader.metadata()  # a conversion must not carry it


KEYS: list[Any] = [
    np.s_[:],
    np.s_[2:6],
    np.s_[::-1],
    np.s_[1:7:2, ::-2],
    np.s_[3],
    np.s_[-1, 4],
    np.s_[..., 3:],
    np.s_[5:1:-1, 1:4],
    np.s_[4:4],
    np.s_[:, 2:3],
]


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_a_slice_selects_as_numpy_does(tmp_path: Path, key: Any) -> None:
    matrix = tensors()["enc.w"][0]
    with open_dcp(str(write_checkpoint(tmp_path / "ckpt"))) as reader:
        got = reader.get_slice("enc.w")[key]
        assert got.shape == matrix[key].shape and np.array_equal(got, matrix[key])


_SLICES = st.builds(
    slice,
    st.none() | st.integers(-9, 9),
    st.none() | st.integers(-9, 9),
    st.none() | st.integers(-3, 3).filter(bool),
)


@pytest.fixture(scope="module")
def shared_reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One reader for every example (hypothesis reruns a test many times)."""
    directory = tmp_path_factory.mktemp("slices") / "ckpt"
    with open_dcp(str(write_checkpoint(directory))) as reader:
        yield reader


@settings(max_examples=150, deadline=None)
@given(first=_SLICES | st.integers(-7, 6), second=_SLICES | st.integers(-5, 4))
def test_any_slice_selects_as_numpy_does(shared_reader: Any, first: Any, second: Any) -> None:
    matrix = tensors()["enc.w"][0]
    got = shared_reader.get_slice("enc.w")[first, second]
    assert np.array_equal(got, matrix[first, second]) and got.shape == matrix[first, second].shape


def test_a_bad_slice_is_refused(tmp_path: Path) -> None:
    reader = open_dcp(str(write_checkpoint(tmp_path / "ckpt")))
    with reader, pytest.raises(SliceError, match="out of range") as caught:
        reader.get_slice("enc.w")[7]
    assert caught.value.tensor == "enc.w"


def test_a_rank_file_of_another_save_is_refused(tmp_path: Path) -> None:
    directory = write_checkpoint(tmp_path / "ckpt")
    file = rank_file_name(1, SET_ID, "bpk")
    entries = [TensorEntry.from_array("enc.w", np.zeros((4, 2), np.float32))]
    entries.append(TensorEntry.from_array("enc.v", np.zeros(5, ml_dtypes.bfloat16)))
    other = {SET_ID_KEY: "0" * 32}
    burnpack.write_file(directory / file, entries, other, overwrite=True)
    with open_dcp(str(directory)) as reader, pytest.raises(SetMismatchError) as caught:
        reader.get("enc.w")
    assert caught.value.shard == file


@pytest.mark.parametrize(
    ("entries", "why"),
    [
        ([("enc.v", np.zeros(5, np.float32))], "lacks chunk 'enc.w'"),
        ([("enc.w", np.zeros((4, 3), np.float32))], "as F32 [4, 3], but the index says F32 [4, 2]"),
    ],
    ids=["missing", "shape"],
)
def test_a_rank_file_that_lies_about_a_chunk_is_refused(
    tmp_path: Path, entries: list[tuple[str, Any]], why: str
) -> None:
    directory = write_checkpoint(tmp_path / "ckpt")
    file = rank_file_name(1, SET_ID, "bpk")
    rebuilt = [TensorEntry.from_array(name, array) for name, array in entries]
    burnpack.write_file(directory / file, rebuilt, {SET_ID_KEY: SET_ID}, overwrite=True)
    with open_dcp(str(directory)) as reader, pytest.raises(SetError) as caught:
        reader.get("enc.w")
    assert why in str(caught.value) and caught.value.shard == file


def test_a_restricted_reader_opens_only_its_files(tmp_path: Path) -> None:
    directory = write_checkpoint(tmp_path / "ckpt")
    (directory / rank_file_name(1, SET_ID, "bpk")).write_bytes(b"damaged" * 1000)  # never opened
    with open_dcp(str(directory)) as whole:
        reader = whole.restricted(["step", "none", "unknown"])
        assert reader.names() == ["none", "step"]
        assert int(reader.get("step")) == 7


def test_stores_open_the_directory(tmp_path: Path) -> None:
    directory = write_checkpoint(tmp_path / "ckpt")
    assert isinstance(Store.from_file(directory), BurnpackStore)
    assert isinstance(Store.from_file(directory / DCP_INDEX_NAME), BurnpackStore)
    model = {"enc": {"w": np.zeros((7, 5), np.float32)}, "step": np.zeros((), np.int64)}
    result = load_from(model, BurnpackStore.from_file(directory).allow_partial())
    assert sorted(result.applied) == ["enc.w", "step"]
    assert np.array_equal(model["enc"]["w"], tensors()["enc.w"][0]) and int(model["step"]) == 7
    with pytest.raises(UnsupportedFormatError, match="checkpoint of burnpack files"):
        SafetensorsStore.from_file(directory).keys()


def test_a_filtered_load_opens_only_the_files_it_needs(tmp_path: Path) -> None:
    directory = write_checkpoint(tmp_path / "ckpt")
    (directory / rank_file_name(1, SET_ID, "bpk")).write_bytes(b"damaged" * 1000)  # enc.* only
    model = {"step": np.zeros((), np.int64)}
    load_from(model, BurnpackStore.from_file(directory).with_regex("^step$"))
    assert int(model["step"]) == 7


def test_convert_writes_the_whole_tensors(tmp_path: Path, capsys: Any) -> None:
    directory = write_checkpoint(tmp_path / "ckpt")
    target = tmp_path / "model.safetensors"
    assert cli(["convert", str(directory), str(target)]) == 0
    assert "4 tensors" in capsys.readouterr().out
    with SafetensorsReader.from_file(target) as written:
        for name, (array, _) in tensors().items():
            assert np.array_equal(written.get(name), array), name
        assert written.metadata()["run"] == "unit"
        assert SET_ID_KEY not in written.metadata()


def test_a_checkpoint_of_several_random_grids_reads_whole(tmp_path: Path) -> None:
    chooser = random.Random(3)
    contents: dict[str, tuple[np.ndarray[Any, Any], Grid]] = {}
    for number in range(6):
        rows, cols = chooser.randint(1, 9), chooser.randint(1, 9)
        array = np.arange(rows * cols, dtype=np.int32).reshape(rows, cols) * (number + 1)
        cuts = sorted({0, rows, *chooser.sample(range(rows + 1), min(rows, 2))})
        grid = [(chooser.randint(0, 3), (a, 0), (b - a, cols)) for a, b in itertools.pairwise(cuts)]
        contents[f"t{number}"] = (array, grid)
    with open_dcp(str(write_checkpoint(tmp_path / "ckpt", contents))) as reader:
        for name, (array, _) in contents.items():
            assert np.array_equal(reader.get(name), array), name
