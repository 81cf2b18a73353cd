"""The reader protocol every weightstore reader shares (`_reader.py`, `TensorSlice` in
`_tensors.py`), and the mapped file's lifetime (`weightstore.io._source.MmapSource`): arrays
outlive a closed reader, and closing unmaps the file once no array views it. Needs no torch."""

from __future__ import annotations

import gc
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.pytorch_reader._support import (
    op_dict,
    op_storage,
    op_str,
    op_tensor,
    pickle_of,
    write_zip,
)
from weightstore.errors import InvalidOptionError, SliceError
from weightstore.pytorch_reader import LazyTensor, PytorchReader, TensorSlice

BYTES = np.arange(6, dtype=np.uint8)  # one-byte elements: always aligned, so read as views
FLOATS = np.array([1.5, -2.0], dtype="<f4")


def _checkpoint(path: Path) -> Path:
    """``{"w": 2x3 uint8, "v": 2 float32}``, "w" first: file order is not name order."""
    root = op_dict(
        [
            (op_str("w"), op_tensor(op_storage("0", 6, "ByteStorage"), 0, (2, 3), (3, 1))),
            (op_str("v"), op_tensor(op_storage("1", 2), 0, (2,), (1,))),
        ]
    )
    return write_zip(path, pickle_of(root), {"0": BYTES.tobytes(), "1": FLOATS.tobytes()})


def test_its_own_side_of_the_reader_protocol(tmp_path: Path) -> None:
    """What the shared contract (tests/container/test_reader_contract.py) leaves to PyTorch:
    names in pickle order, the keys alias, lazy tensors, and its layout's facts as metadata."""
    with PytorchReader.from_file(_checkpoint(tmp_path / "m.pt")) as reader:
        assert reader.names() == list(reader) == ["w", "v"]  # file order
        assert reader.keys() == reader.names()  # the alias
        array = reader.get("w")
        assert isinstance(array, np.ndarray) and not array.flags.owndata  # a view of the file
        np.testing.assert_array_equal(array, BYTES.reshape(2, 3))
        np.testing.assert_array_equal(reader.get("v"), FLOATS)
        lazy = reader.tensor("w")
        assert isinstance(lazy, LazyTensor) and (lazy.shape, lazy.dtype.name) == ((2, 3), "U8")
        assert set(reader.tensors()) == {"w", "v"}
        metadata = reader.metadata()
        assert isinstance(metadata, Mapping) and metadata["format"] == "zip"
        assert metadata["tensor_count"] == 2


def test_from_file_takes_the_constructors_options(tmp_path: Path) -> None:
    root = op_dict([(op_str("model"), op_dict([(op_str("a"), op_str("not a tensor"))]))])
    path = write_zip(tmp_path / "k.pt", pickle_of(root), {})
    with PytorchReader.from_file(path, top_level_key="model", max_nodes=1_000) as reader:
        assert (reader.top_level_key, reader.names()) == ("model", [])
    with pytest.raises(InvalidOptionError):
        PytorchReader.from_file(path, max_depth=0)


@pytest.mark.parametrize(
    "key",
    [
        np.s_[1:],
        np.s_[:, ::2],
        np.s_[::-1, 1],
        np.s_[1, 2],  # every axis an int: still an array, 0-d
        np.s_[...],
        np.s_[..., 0],
        np.s_[[1, 0]],
        np.s_[None, 0],
    ],
)
def test_a_slice_indexes_as_numpy_does(tmp_path: Path, key: Any) -> None:
    expected = BYTES.reshape(2, 3)[key]
    with PytorchReader(_checkpoint(tmp_path / "m.pt")) as reader:
        sliced = reader.get_slice("w")
        got = sliced[key]
    assert isinstance(sliced, TensorSlice) and isinstance(got, np.ndarray)
    assert (got.shape, got.dtype) == (np.shape(expected), np.dtype(np.uint8))
    np.testing.assert_array_equal(got, expected)


def test_a_slice_refuses_a_bad_index_before_reading(tmp_path: Path) -> None:
    reader = PytorchReader(_checkpoint(tmp_path / "m.pt"))
    sliced = reader.get_slice("w")
    assert (sliced.shape, sliced.dtype, len(sliced)) == ((2, 3), np.dtype(np.uint8), 2)
    reader.close()  # reading now fails, so a SliceError shows that nothing was read
    # A zero step or a slice bound that is no int let NumPy's ValueError or TypeError out (found
    # by the fuzz target's out-of-range probes); they are SliceErrors too.
    for key in (np.s_[2], np.s_[0, 0, 0], np.s_["a"], np.s_[::0], np.s_[0, 0:2:0], slice("a")):
        with pytest.raises(SliceError) as caught:
            sliced[key]
        assert (caught.value.tensor, caught.value.path) == ("w", reader.path)
        assert isinstance(caught.value, IndexError)
    with pytest.raises(ValueError, match="closed"):
        sliced[0]


# -- the mapped file's lifetime -----------------------------------------------------------------

_MAPS = Path("/proc/self/maps")
needs_maps = pytest.mark.skipif(not _MAPS.exists(), reason="needs /proc/self/maps (Linux)")


def _is_mapped(path: Path) -> bool:
    return str(path) in _MAPS.read_text()


def test_arrays_outlive_a_closed_reader(tmp_path: Path) -> None:
    reader = PytorchReader(_checkpoint(tmp_path / "m.pt"))
    array = reader.get("w")
    reader.close()
    np.testing.assert_array_equal(array, BYTES.reshape(2, 3))
    array[0, 0] = 9  # copy-on-write: still writable, the file never changes
    assert array[0, 0] == 9
    with pytest.raises(ValueError, match="closed"):
        reader.get("w")


@needs_maps
def test_closing_unmaps_the_file_once_no_array_views_it(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path / "m.pt")
    reader = PytorchReader(path)
    array, view = reader.get("w"), reader.get("v")[1:]
    assert _is_mapped(path)
    del view
    reader.close()
    assert _is_mapped(path)  # `array` still reads the mapping: it stays
    assert array.tolist() == [[0, 1, 2], [3, 4, 5]]
    del array
    gc.collect()
    assert not _is_mapped(path)  # the last array took the mapping with it


@needs_maps
def test_closing_unmaps_at_once_when_no_array_is_left(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path / "m.pt")
    with PytorchReader(path) as reader:
        assert reader.get("w").sum() == 15  # read (the storage is cached), then dropped
        assert _is_mapped(path)
    assert not _is_mapped(path)  # the reader still exists; its cache let go of the mapping
