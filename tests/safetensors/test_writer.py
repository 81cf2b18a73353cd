"""Writing SafeTensors: the package's bytes and order, early refusals, streaming, atomic saves."""

from __future__ import annotations

import io
import os
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from weightstore import safetensors
from weightstore.dtypes import ALL_DTYPES, from_name, from_safetensors
from weightstore.entry import TensorEntry
from weightstore.errors import DestinationExistsError, DTypeError, EntryError
from weightstore.safetensors import SafetensorsReader, SafetensorsWriter

safetensors_numpy = pytest.importorskip("safetensors.numpy")

# Every dtype the package's NumPy layer writes, with names that fight the dtype order.
NUMPY_ARRAYS: dict[str, np.ndarray[Any, Any]] = {
    "a.f64": np.linspace(-1, 1, 6).reshape(2, 3),
    "b.f32": np.arange(4, dtype=np.float32),
    "c.f16": np.array([0.5, -2.0], np.float16),
    "d.i64": np.array([-(2**63), 2**63 - 1], np.int64),
    "e.u64": np.array([2**64 - 1], np.uint64),
    "f.i32": np.array([[1], [-2]], np.int32),
    "g.u32": np.array([7], np.uint32),
    "h.i16": np.array([-3, 4, 5], np.int16),
    "i.u16": np.array([65535], np.uint16),
    "j.i8": np.array([-128, 127], np.int8),
    "k.u8": np.arange(5, dtype=np.uint8),
    "l.bool": np.array([True, False, True]),
    "m.c64": np.array([1 + 2j], np.complex64),
    "scalar": np.array(3.5, np.float32),
    "empty": np.zeros((0, 4), np.float32),
    't\u00e9"\x01\x7f\n': np.zeros(1, np.int8),  # JSON escaping and raw UTF-8 in a name
}


def _entries(arrays: dict[str, np.ndarray[Any, Any]]) -> list[TensorEntry]:
    return [TensorEntry.from_array(name, array) for name, array in arrays.items()]


# -- the package's bytes ------------------------------------------------------------------------


@pytest.mark.parametrize("metadata", [None, {}, {"format": "np"}, {"k\u00e9": "v\n\x02"}])
def test_bytes_identical_to_safetensors_numpy_save(metadata: dict[str, str] | None) -> None:
    expected = safetensors_numpy.save(NUMPY_ARRAYS, metadata=metadata)
    assert safetensors.write_bytes(_entries(NUMPY_ARRAYS), metadata) == expected


def test_many_metadata_keys_differ_only_in_the_package_s_random_order() -> None:
    metadata = {f"key{i}": str(i) for i in (5, 3, 9, 1, 7)}
    ours = SafetensorsReader.from_bytes(safetensors.write_bytes(_entries(NUMPY_ARRAYS), metadata))
    expected = safetensors_numpy.save(NUMPY_ARRAYS, metadata=metadata)
    theirs = SafetensorsReader.from_bytes(expected)
    assert ours.header_size == theirs.header_size and ours.metadata() == theirs.metadata()
    assert ours.descriptors == theirs.descriptors
    assert (
        safetensors.write_bytes(_entries(NUMPY_ARRAYS), metadata)[ours.data_start :]
        == (expected[theirs.data_start :])
    )


def test_bytes_identical_to_safetensors_torch_save_for_ml_dtypes() -> None:
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    tensors = {
        "bf": torch.tensor([1.5, -3.25], dtype=torch.bfloat16),
        "e4m3": torch.tensor([0.5, 2.0], dtype=torch.float8_e4m3fn),
        "e5m2": torch.tensor([-1.0], dtype=torch.float8_e5m2),
        "f": torch.ones(3),
        "i": torch.arange(3, dtype=torch.int64),
    }
    arrays = {
        "bf": np.array([1.5, -3.25], ml_dtypes.bfloat16),
        "e4m3": np.array([0.5, 2.0], ml_dtypes.float8_e4m3fn),
        "e5m2": np.array([-1.0], ml_dtypes.float8_e5m2),
        "f": np.ones(3, np.float32),
        "i": np.arange(3, dtype=np.int64),
    }
    expected = safetensors_torch.save(tensors, metadata={"format": "pt"})
    assert safetensors.write_bytes(_entries(arrays), {"format": "pt"}) == expected


def test_keep_order_lays_out_tensors_as_given() -> None:
    entries = _entries({"z": np.zeros(1, np.uint8), "a": np.zeros(1, np.float64)})
    default = SafetensorsWriter(entries)
    kept = SafetensorsWriter(entries, keep_order=True)
    assert [d.name for d in default.descriptors] == ["a", "z"]
    assert [d.name for d in kept.descriptors] == ["z", "a"]
    assert kept.descriptors[1].data_offsets == (1, 9)


# -- round trips --------------------------------------------------------------------------------


SAFETENSORS_NUMPY_DTYPES = [d for d in ALL_DTYPES if d.safetensors and d.numpy is not None]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_round_trip_through_our_reader(data: st.DataObject) -> None:
    arrays = {}
    for i in range(data.draw(st.integers(0, 4))):
        dtype = data.draw(st.sampled_from(SAFETENSORS_NUMPY_DTYPES))
        shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
        raw = data.draw(st.binary(min_size=dtype.nbytes(shape), max_size=dtype.nbytes(shape)))
        if dtype.is_bool:
            raw = bytes(b & 1 for b in raw)
        arrays[f"t{i}"] = (dtype, shape, raw)
    metadata = data.draw(st.none() | st.dictionaries(st.text(max_size=5), st.text(max_size=5)))
    entries = [TensorEntry(name, d, s, raw) for name, (d, s, raw) in arrays.items()]
    reader = SafetensorsReader.from_bytes(safetensors.write_bytes(entries, metadata))
    assert reader.metadata() == (metadata or {})
    for name, (dtype, shape, raw) in arrays.items():
        descriptor = reader.descriptor(name)
        assert (descriptor.dtype, descriptor.shape) == (dtype, shape)
        assert reader.get(name).tobytes() == raw
        start = reader.data_start + descriptor.data_offsets[0]
        assert start % dtype.itemsize == 0  # the package's order keeps every tensor aligned


def test_packed_sub_byte_tensor_round_trips_as_bytes() -> None:
    entry = TensorEntry("f4", from_safetensors("F4"), (2, 3), b"\x12\x34\x56")
    reader = SafetensorsReader.from_bytes(safetensors.write_bytes([entry]))
    assert reader.descriptor("f4").nbytes == 3
    assert bytes(reader.get_bytes("f4")) == b"\x12\x34\x56"


def test_write_to_and_write_into_match_to_bytes() -> None:
    writer = SafetensorsWriter(_entries(NUMPY_ARRAYS), {"k": "v"})
    stream = io.BytesIO()
    writer.write_to(stream)
    assert stream.getvalue() == writer.to_bytes()
    assert writer.size == len(stream.getvalue())
    with pytest.raises(EntryError, match="buffer is"):
        writer.write_into(bytearray(writer.size - 1))


# -- refusals, all before any data is produced -------------------------------------------------


def _never() -> bytes:
    raise AssertionError("data was requested although the writer should have refused first")


def _lazy(name: str, dtype: str = "U8", shape: tuple[int, ...] = (1,)) -> TensorEntry:
    return TensorEntry(name, from_safetensors(dtype), shape, _never)


@pytest.mark.parametrize("metadata", [{"k": 1}, {1: "v"}, {"k": None}, {"k": "\ud800"}])
def test_metadata_must_be_str_to_str(metadata: Any) -> None:
    with pytest.raises(EntryError, match="metadata must map str to str"):
        SafetensorsWriter([_lazy("a")], metadata)


def test_duplicate_names() -> None:
    with pytest.raises(EntryError, match="twice") as caught:
        SafetensorsWriter([_lazy("a"), _lazy("b"), _lazy("a")])
    assert caught.value.tensor == "a"


@pytest.mark.parametrize("name", ["__metadata__", "\udcff"])
def test_reserved_or_unencodable_name(name: str) -> None:
    with pytest.raises(EntryError):
        SafetensorsWriter([_lazy(name)])


@pytest.mark.parametrize("dtype", ["C128", "FLEX32", "BOOL_U32", "BOOL_U8"])
def test_dtype_safetensors_cannot_hold(dtype: str) -> None:
    entry = TensorEntry("x", from_name(dtype), (1,), _never)
    with pytest.raises(DTypeError) as caught:
        SafetensorsWriter([entry])
    assert caught.value.tensor == "x"


def test_declared_length_must_match_shape_and_dtype() -> None:
    entry = TensorEntry("x", from_safetensors("F32"), (2,), _never, nbytes=7)
    with pytest.raises(EntryError, match="declared 7 bytes") as caught:
        SafetensorsWriter([entry])
    assert caught.value.tensor == "x"


def test_packed_tensor_must_fill_whole_bytes() -> None:
    with pytest.raises(EntryError, match="12 bits"):
        SafetensorsWriter([_lazy("x", "F4", (3,))])


def test_produced_length_is_checked_while_writing() -> None:
    entry = TensorEntry("x", from_safetensors("F32"), (2,), lambda: b"\x00" * 4)
    with pytest.raises(EntryError, match="4 bytes"):
        SafetensorsWriter([entry]).to_bytes()


# -- streaming ----------------------------------------------------------------------------------


def test_one_tensor_alive_at_a_time_in_file_order() -> None:
    calls: list[str] = []
    alive: list[weakref.ref[np.ndarray[Any, Any]]] = []

    def provider(name: str, size: int) -> Callable[[], np.ndarray[Any, Any]]:
        def produce() -> np.ndarray[Any, Any]:
            assert all(ref() is None for ref in alive), "an earlier tensor is still held"
            calls.append(name)
            array = np.full(size, len(calls), np.float32)
            alive.append(weakref.ref(array))
            return array

        return produce

    entries = [
        TensorEntry(n, from_safetensors("F32"), (s,), provider(n, s))
        for n, s in [("b", 1000), ("a", 10), ("c", 100)]
    ]
    writer = SafetensorsWriter(entries)
    assert calls == []  # planning reads nothing
    writer.write_to(io.BytesIO())
    assert calls == ["a", "b", "c"]


# -- atomic saves -------------------------------------------------------------------------------


def test_save_and_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    first = _entries({"w": np.ones(3, np.float32)})
    assert safetensors.write_file(path, first, {"v": "1"}) == str(path)
    assert path.read_bytes() == safetensors.write_bytes(first, {"v": "1"})
    with pytest.raises(DestinationExistsError) as caught:
        safetensors.write_file(path, first)
    assert caught.value.path == str(path)
    safetensors.write_file(path, first, {"v": "2"}, overwrite=True)
    assert SafetensorsReader.from_file(path).metadata() == {"v": "2"}


def test_failure_halfway_leaves_the_destination_untouched(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    safetensors.write_file(path, _entries({"w": np.ones(3, np.float32)}))
    before = path.read_bytes()

    def boom() -> bytes:
        raise RuntimeError("producer failed")

    entries = [
        TensorEntry.from_array("a", np.zeros(1000, np.float32)),
        TensorEntry("b", from_safetensors("F32"), (4,), boom),
    ]
    with pytest.raises(RuntimeError, match="producer failed"):
        SafetensorsWriter(entries).save(path, overwrite=True)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.safetensors"]  # no scratch file left
