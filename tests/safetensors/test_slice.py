"""Partial reads: NumPy's own slicing is the contract, and only the needed bytes are read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.safetensors.conftest import Opener
from weightstore import safetensors
from weightstore.entry import TensorEntry
from weightstore.errors import SliceError
from weightstore.io._source import MemorySource
from weightstore.safetensors import SafetensorsReader


class CountingSource(MemorySource):
    """An in-memory source that records every range asked of it."""

    def __init__(self, buffer: bytes) -> None:
        super().__init__(buffer, name="counted.safetensors")
        self.reads: list[tuple[int, int]] = []

    def read(self, offset: int, size: int, what: str, tensor: str | None = None) -> memoryview:
        self.reads.append((offset, size))
        return super().read(offset, size, what, tensor)


def _counted(array: np.ndarray[Any, Any]) -> tuple[SafetensorsReader, CountingSource]:
    source = CountingSource(safetensors.write_bytes([TensorEntry.from_array("x", array)]))
    reader = SafetensorsReader(source)
    source.reads.clear()  # forget the header reads
    return reader, source


# -- equality with NumPy --------------------------------------------------------------------------


@st.composite
def _index_item(draw: st.DrawFn, size: int) -> Any:
    bound = st.none() | st.integers(-size - 2, size + 2)
    if size and draw(st.booleans()):
        return draw(st.integers(-size, size - 1))
    step = draw(st.none() | st.integers(-3, 3).filter(bool))
    return slice(draw(bound), draw(bound), step)


@st.composite
def _shape_and_key(draw: st.DrawFn) -> tuple[tuple[int, ...], Any]:
    shape = tuple(draw(st.lists(st.integers(0, 5), max_size=4)))
    count = draw(st.integers(0, len(shape)))  # indices given; the rest of the axes are implied
    if draw(st.booleans()):
        # An ellipsis at position e: e items index the leading axes, the rest the trailing ones.
        e = draw(st.integers(0, count))
        head = [draw(_index_item(size)) for size in shape[:e]]
        tail = [draw(_index_item(size)) for size in shape[len(shape) - (count - e) :]]
        key: tuple[Any, ...] = (*head, Ellipsis, *tail)
    else:
        key = tuple(draw(_index_item(size)) for size in shape[:count])
    if len(key) == 1 and draw(st.booleans()):
        return shape, key[0]  # a bare index, not wrapped in a tuple
    return shape, key


@settings(max_examples=300, deadline=None)
@given(_shape_and_key(), st.sampled_from(["<f4", "<i2", "u1", "<f8"]))
def test_slices_equal_numpy_slicing(case: tuple[tuple[int, ...], Any], dtype: str) -> None:
    shape, key = case
    full = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
    reader, source = _counted(full)
    got = reader.get_slice("x")[key]
    expected = np.asarray(full[key])
    assert got.shape == expected.shape and got.dtype == expected.dtype
    assert np.array_equal(got, expected)
    assert sum(size for _, size in source.reads) <= full.nbytes


def test_every_backend_slices_the_same(open_reader: Opener, tmp_path: Path) -> None:
    full = np.arange(4 * 5 * 6, dtype="<f4").reshape(4, 5, 6)
    path = tmp_path / "x.safetensors"
    path.write_bytes(safetensors.write_bytes([TensorEntry.from_array("x", full)]))
    keys: list[Any] = [
        np.s_[1:3], np.s_[:, 2], np.s_[::-1, ::2, -1], np.s_[..., 1:5:3], np.s_[-1, -2, -3],
        np.s_[2:0:-1, :, 4], np.s_[:, 10:], np.s_[...], (),
    ]  # fmt: skip
    with open_reader(path) as reader:
        view = reader.get_slice("x")
        assert view.shape == (4, 5, 6) and view.dtype == np.float32 and len(view) == 4
        for key in keys:
            assert np.array_equal(view[key], full[key]), key


def test_zero_dimensional_tensor() -> None:
    reader = SafetensorsReader.from_bytes(
        safetensors.write_bytes([TensorEntry.from_array("s", np.array(2.5, "<f8"))])
    )
    assert reader.get_slice("s")[()].shape == ()
    assert float(reader.get_slice("s")[...]) == 2.5
    with pytest.raises(SliceError):
        reader.get_slice("s")[0]


# -- what is read ---------------------------------------------------------------------------------


def test_row_range_is_one_read_of_those_rows() -> None:
    reader, source = _counted(np.zeros((10, 100), "<f4"))
    reader.get_slice("x")[2:4]
    assert source.reads == [(reader.data_start + 2 * 400, 800)]


def test_column_reads_one_element_per_row() -> None:
    reader, source = _counted(np.zeros((10, 100), "<f4"))
    reader.get_slice("x")[:, 3]
    assert len(source.reads) == 10 and all(size == 4 for _, size in source.reads)


def test_stepped_rows_are_separate_reads_and_touching_runs_merge() -> None:
    reader, source = _counted(np.zeros((10, 100), "<f4"))
    reader.get_slice("x")[::2]
    assert [size for _, size in source.reads] == [400] * 5
    source.reads.clear()
    reader.get_slice("x")[3:7, :]  # rows 3..6 touch: one read
    assert [size for _, size in source.reads] == [1600]


def test_step_in_the_last_axis_reads_each_row_span_once() -> None:
    reader, source = _counted(np.zeros((3, 4, 10), "<f4"))
    reader.get_slice("x")[1, :, 1:8:3]  # elements 1, 4, 7 of each of 4 rows
    assert [size for _, size in source.reads] == [7 * 4] * 4


def test_empty_selection_reads_nothing() -> None:
    reader, source = _counted(np.zeros((10, 100), "<f4"))
    assert reader.get_slice("x")[5:5].shape == (0, 100)
    assert source.reads == []


def test_single_run_from_a_mapped_file_is_a_view(tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    full = np.arange(20, dtype="<f4").reshape(4, 5)
    path.write_bytes(safetensors.write_bytes([TensorEntry.from_array("x", full)]))
    with SafetensorsReader.from_file(path) as reader:
        rows = reader.get_slice("x")[1:3]
        assert not rows.flags.owndata and rows.tolist() == full[1:3].tolist()


# -- refusals -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "fragment"),
    [
        (np.s_[4], "index 4 is out of range for axis 0 with size 4"),
        (np.s_[:, -6], "index -6 is out of range for axis 1 with size 5"),
        (np.s_[0, 0, 0], "3 indices given for 2 dimensions"),
        (np.s_[..., 0, ...], "only one ellipsis"),
        (np.s_[::0], "slice step cannot be zero"),
        (np.s_[None], "not supported"),
        (np.s_[True], "not supported"),
        (np.s_[1.0], "not an integer"),
        (np.s_["a":], "slice"),
        (np.s_[[0, 1]], "not an integer"),
    ],
)
def test_bad_index_names_file_and_tensor(key: Any, fragment: str) -> None:
    reader, source = _counted(np.zeros((4, 5), "<f4"))
    with pytest.raises(SliceError, match=fragment) as caught:
        reader.get_slice("x")[key]
    assert isinstance(caught.value, IndexError)
    assert (caught.value.path, caught.value.tensor) == ("counted.safetensors", "x")
    assert source.reads == []  # refused before reading


def test_numpy_integers_are_indices() -> None:
    reader, _ = _counted(np.arange(20, dtype="<i4").reshape(4, 5))
    assert reader.get_slice("x")[np.int64(-1), np.uint8(2)].tolist() == 17
