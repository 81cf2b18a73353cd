"""The rules every container reader shares, tested once over every registered format.

`weightstore.formats.FORMATS` lists the formats; each gets the same three tensors written by
`MAKERS` (the library's own writers; the PyTorch file is a hand-assembled zip laid out as
``torch.save`` lays one out, so no case needs torch), opened every way its format record allows
(a path, bytes, a caller's buffer). Each rule holds for every reader: names and their file
order, dtypes and shapes from the header, the values and slices, the metadata written, the
context manager, arrays outliving their reader, and a missing tensor as a typed error naming
it. A format registered without a maker fails `test_every_registered_format_has_a_maker`, so
a new format cannot skip the contract. Format-specific rules stay in each format's tests.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

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
from weightstore import burnpack, gguf, safetensors
from weightstore.dtypes import from_numpy
from weightstore.entry import TensorEntry
from weightstore.errors import TensorNotFoundError
from weightstore.formats import FORMATS, ContainerFormat

TENSORS: dict[str, np.ndarray[Any, Any]] = {
    "a": np.arange(6, dtype="<f4").reshape(2, 3),
    "b": np.array([1, -2], dtype="<i8"),
    "c": np.arange(12, dtype=np.int8).reshape(3, 4),  # int8: GGUF has no uint8 type
}
FILE_ORDER = ["a", "b", "c"]  # the order entries go to the writers
USER_METADATA = {"producer": "contract", "k": "v"}


def _entries() -> list[TensorEntry]:
    return [TensorEntry.from_array(name, TENSORS[name]) for name in FILE_ORDER]


class Made(NamedTuple):
    """What a maker wrote: the metadata the reader must show, and the order of the bytes."""

    metadata: Mapping[str, object]
    byte_order: list[str]


def _burnpack(path: Path) -> Made:
    path.write_bytes(burnpack.write_bytes(_entries(), USER_METADATA))
    return Made(USER_METADATA, FILE_ORDER)  # burnpack writes entries in the order given


def _safetensors(path: Path) -> Made:
    data = safetensors.write_bytes(_entries(), USER_METADATA)
    path.write_bytes(data)
    (size,) = struct.unpack("<Q", data[:8])  # the layout read by hand: JSON offsets
    header = json.loads(data[8 : 8 + size])
    header.pop("__metadata__")
    return Made(USER_METADATA, sorted(header, key=lambda name: header[name]["data_offsets"]))


_STORAGE_CLASS = {"<f4": "FloatStorage", "<i8": "LongStorage", "|i1": "CharStorage"}


def _pytorch(path: Path) -> Made:
    """A zip checkpoint of `TENSORS` as ``torch.save`` lays one out: storages keyed 0, 1, 2 in
    pickle order, their bytes in key order."""
    pairs = []
    for key, name in enumerate(FILE_ORDER):
        array = TENSORS[name]
        strides = tuple(s // array.itemsize for s in array.strides)
        storage = op_storage(str(key), array.size, _STORAGE_CLASS[array.dtype.str])
        pairs.append((op_str(name), op_tensor(storage, 0, array.shape, strides)))
    storages = {str(key): TENSORS[name].tobytes() for key, name in enumerate(FILE_ORDER)}
    write_zip(path, pickle_of(op_dict(pairs)), storages)
    layout_facts = {"format": "zip", "tensor_count": len(TENSORS)}  # it holds no user metadata
    return Made(layout_facts, FILE_ORDER)


def _gguf(path: Path) -> Made:
    path.write_bytes(gguf.GgufWriter(_entries(), USER_METADATA).to_bytes())
    return Made(USER_METADATA, FILE_ORDER)  # GGUF writes entries in the order given


Maker = Callable[[Path], Made]
MAKERS: dict[str, Maker] = {
    "burnpack": _burnpack, "safetensors": _safetensors, "pytorch": _pytorch, "gguf": _gguf,
}  # fmt: skip
"""Format name -> writes `TENSORS` to a path and says what it wrote."""


def _ways_to_open(fmt: ContainerFormat) -> list[str]:
    ways = ["file"]
    if fmt.open_bytes is not None:
        ways.append("bytes")
    if fmt.open_static is not None:
        ways.append("static")
    return ways


CASES = [(fmt.name, way) for fmt in FORMATS for way in _ways_to_open(fmt)]


def _format(name: str) -> ContainerFormat:
    return next(fmt for fmt in FORMATS if fmt.name == name)


def _open(name: str, way: str, path: Path) -> Any:
    fmt = _format(name)
    if way == "bytes":
        assert fmt.open_bytes is not None
        return fmt.open_bytes(path.read_bytes())
    if way == "static":
        assert fmt.open_static is not None
        return fmt.open_static(bytearray(path.read_bytes()))
    return fmt.open_file(path)


@pytest.fixture(params=CASES, ids=[f"{name}-{way}" for name, way in CASES])
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, Made, Path]]:
    """An open reader of `TENSORS`, what its maker wrote, and its file; closed after."""
    name, way = request.param
    path = tmp_path / f"model.{_format(name).extensions[0]}"
    made = MAKERS[name](path)
    reader = _open(name, way, path)
    yield reader, made, path
    reader.close()


def test_every_registered_format_has_a_maker() -> None:
    assert {fmt.name for fmt in FORMATS} == set(MAKERS)


def test_names_membership_and_file_order(case: tuple[Any, Made, Path]) -> None:
    reader, made, _ = case
    assert sorted(reader.names()) == sorted(TENSORS)
    assert list(reader) == reader.names()
    assert len(reader) == len(TENSORS)
    assert all(name in reader for name in TENSORS) and "nope" not in reader
    assert reader.names_in_file_order() == made.byte_order


def test_dtypes_and_shapes_come_from_the_header(
    case: tuple[Any, Made, Path],
) -> None:
    reader, _, _ = case
    for name, array in TENSORS.items():
        info = reader.descriptor(name)
        assert (info.dtype, tuple(info.shape)) == (from_numpy(array.dtype), array.shape), name


def test_get_returns_the_values_as_numpy(case: tuple[Any, Made, Path]) -> None:
    reader, _, _ = case
    for name, array in TENSORS.items():
        got = reader.get(name)
        assert isinstance(got, np.ndarray)
        assert (got.dtype, got.shape) == (array.dtype, array.shape), name
        np.testing.assert_array_equal(got, array)


@pytest.mark.parametrize(
    "key", [np.s_[1:], np.s_[:, ::2], np.s_[::-1, 1], np.s_[1, 2], np.s_[...], np.s_[0]]
)
def test_get_slice_indexes_as_numpy_does(case: tuple[Any, Made, Path], key: Any) -> None:
    reader, _, _ = case
    for name in ("a", "c"):
        expected = TENSORS[name][key]
        got = np.asarray(reader.get_slice(name)[key])
        assert (got.shape, got.dtype) == (np.shape(expected), TENSORS[name].dtype), name
        np.testing.assert_array_equal(got, expected)


def test_metadata_is_what_was_written(case: tuple[Any, Made, Path]) -> None:
    reader, made, _ = case
    expected, metadata = made.metadata, reader.metadata()
    assert isinstance(metadata, Mapping)
    assert {key: metadata.get(key) for key in expected} == dict(expected)


@pytest.mark.parametrize("name", [fmt.name for fmt in FORMATS])
def test_the_reader_is_a_context_manager(name: str, tmp_path: Path) -> None:
    path = tmp_path / f"model.{_format(name).extensions[0]}"
    MAKERS[name](path)
    with _format(name).open_file(path) as reader:
        assert sorted(reader.names()) == sorted(TENSORS)
        kept = reader.get("a")
    np.testing.assert_array_equal(kept, TENSORS["a"])  # arrays outlive their reader


@pytest.mark.parametrize("name", [fmt.name for fmt in FORMATS])
def test_arrays_outlive_the_reader(name: str, tmp_path: Path) -> None:
    path = tmp_path / f"model.{_format(name).extensions[0]}"
    MAKERS[name](path)
    reader = _format(name).open_file(path)
    arrays = {tensor: reader.get(tensor) for tensor in TENSORS}
    reader.close()
    for tensor, array in TENSORS.items():
        np.testing.assert_array_equal(arrays[tensor], array)


@pytest.mark.parametrize("method", ["get", "get_slice", "descriptor"])
def test_a_missing_tensor_is_a_typed_error_naming_it(
    case: tuple[Any, Made, Path], method: str
) -> None:
    reader, _, _ = case
    with pytest.raises(TensorNotFoundError) as caught:
        getattr(reader, method)("nope")
    assert caught.value.tensor == "nope"
    assert isinstance(caught.value, KeyError)


@pytest.mark.parametrize("name", [fmt.name for fmt in FORMATS])
def test_a_missing_tensor_names_the_file(name: str, tmp_path: Path) -> None:
    path = tmp_path / f"model.{_format(name).extensions[0]}"
    MAKERS[name](path)
    with _format(name).open_file(path) as reader, pytest.raises(TensorNotFoundError) as caught:
        reader.get("nope")
    assert caught.value.path == str(path)
    assert str(path) in str(caught.value)
