"""Writing burnpack: round trips, streaming order, atomic saves."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from weightstore import burnpack
from weightstore.burnpack import BurnpackReader, BurnpackWriter, Scalar
from weightstore.dtypes import ALL_DTYPES, from_name
from weightstore.entry import TensorEntry
from weightstore.errors import DestinationExistsError, DTypeError, EntryError

BURNPACK_NUMPY_DTYPES = [d for d in ALL_DTYPES if d.burnpack is not None and d.numpy is not None]


def _roundtrip(entries: list[TensorEntry], **kwargs: Any) -> BurnpackReader:
    return BurnpackReader.from_bytes(burnpack.write_bytes(entries, **kwargs))


@pytest.mark.parametrize("dtype", BURNPACK_NUMPY_DTYPES, ids=lambda d: d.name)
def test_every_dtype_round_trips_bytes(dtype: Any) -> None:
    raw = np.random.default_rng(1).integers(0, 256, size=dtype.nbytes((3, 5)), dtype=np.uint8)
    if dtype.kind == "b":
        raw = (raw % 2).astype(np.uint8)  # bools must be 0 or 1 bytes to be valid NumPy bools
    entry = TensorEntry("t", dtype, (3, 5), raw.tobytes(), param_id=7)
    pack = _roundtrip([entry])
    descriptor = pack.descriptor("t")
    assert (descriptor.dtype, descriptor.shape, descriptor.param_id) == (dtype, (3, 5), 7)
    assert bytes(pack.get_bytes("t")) == raw.tobytes()
    assert pack.get("t").shape == (3, 5)


def test_arrays_round_trip_values_including_bf16() -> None:
    arrays = {
        "f": np.linspace(-1, 1, 12, dtype="<f4").reshape(3, 4),
        "h": np.array([0.5, -2.0], np.float16),
        "bf": np.array([1.5, -3.25, 1e30], ml_dtypes.bfloat16),
        "i": np.array([-(2**63), 2**63 - 1], "<i8"),
        "b": np.array([True, False, True]),
        "scalar": np.array(3.5, "<f8"),
        "empty": np.zeros((0, 4), "<f4"),
        "zeros": np.zeros((2, 2), "<i2"),
    }
    pack = _roundtrip([TensorEntry.from_array(name, a) for name, a in arrays.items()])
    for name, array in arrays.items():
        got = pack.get(name)
        assert got.dtype == array.dtype and got.shape == array.shape
        assert got.tobytes() == array.tobytes()


def test_metadata_and_scalars_round_trip() -> None:
    scalars: dict[str, Any] = {"epoch": Scalar("UInt", 42), "lr": 0.001, "ok": True, "d": -3}
    pack = _roundtrip([], metadata={"b": "2", "a": "1"}, scalars=scalars)
    assert pack.metadata() == {"a": "1", "b": "2"}
    assert pack.scalars == {
        "epoch": Scalar("UInt", 42),
        "lr": Scalar("Float", 0.001),
        "ok": Scalar("Bool", True),
        "d": Scalar("Int", -3),
    }


def test_descriptors_sorted_but_data_in_write_order() -> None:
    entries = [
        TensorEntry.from_array("z", np.ones(3, "<f4")),
        TensorEntry.from_array("a", np.full(70, 2, "<f4")),
    ]
    pack = _roundtrip(entries)
    assert pack.names() == ["a", "z"]
    assert pack.descriptor("z").data_offsets == (0, 12)
    assert pack.descriptor("a").data_offsets == (256, 536)


def test_zero_length_tensors_take_no_space() -> None:
    entries = [
        TensorEntry.from_array("x", np.ones(3, "<u1")),
        TensorEntry.from_array("e", np.zeros(0, "<f4")),
        TensorEntry.from_array("y", np.ones(1, "<u1")),
    ]
    pack = _roundtrip(entries)
    assert pack.descriptor("e").data_offsets == (256, 256)
    assert pack.descriptor("y").data_offsets == (256, 257)


tensor_sets = st.dictionaries(
    st.text(min_size=1, max_size=12),
    hnp.arrays(
        dtype=st.sampled_from(["<f4", "<f8", "<i4", "<u2", "<i1", "|b1", "<f2"]),
        shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5),
    ),
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(tensor_sets, st.booleans())
def test_hypothesis_tensor_sets_round_trip(arrays: dict[str, Any], use_providers: bool) -> None:
    entries = []
    for name, array in arrays.items():
        entry = TensorEntry.from_array(name, array)
        if use_providers:
            entry = entry.replace(data=lambda array=array: array)
        entries.append(entry)
    written = burnpack.write_bytes(entries)
    assert len(written) == BurnpackWriter(entries).size
    pack = BurnpackReader.from_bytes(written)
    assert sorted(pack.names()) == sorted(arrays)
    for name, array in arrays.items():
        assert pack.get(name).tobytes() == array.tobytes()
        assert pack.get(name).shape == array.shape


def test_providers_run_once_in_write_order_and_lazily() -> None:
    calls: list[str] = []

    def provider(name: str, value: int) -> Any:
        def produce() -> np.ndarray[Any, Any]:
            calls.append(name)
            return np.full(4, value, "<i4")

        return produce

    entries = [
        TensorEntry("b", from_name("I32"), (4,), provider("b", 1)),
        TensorEntry("a", from_name("I32"), (4,), provider("a", 2)),
    ]
    writer = BurnpackWriter(entries)
    assert calls == []  # planning reads no data
    data = writer.to_bytes()
    assert calls == ["b", "a"]
    assert BurnpackReader.from_bytes(data).get("a").tolist() == [2, 2, 2, 2]


def test_provider_with_wrong_length_names_the_tensor() -> None:
    entry = TensorEntry("w", from_name("F32"), (4,), lambda: bytes(12))
    with pytest.raises(EntryError, match="12 bytes") as caught:
        burnpack.write_bytes([entry])
    assert caught.value.tensor == "w"


def test_duplicate_names_are_refused() -> None:
    entry = TensorEntry.from_array("w", np.ones(1, "<f4"))
    with pytest.raises(EntryError, match="twice"):
        BurnpackWriter([entry, entry])


def test_dtype_burnpack_cannot_hold_is_refused() -> None:
    with pytest.raises(DTypeError, match="C64 cannot be stored in burnpack"):
        BurnpackWriter([TensorEntry.from_array("c", np.ones(2, np.complex64))])


def test_big_endian_arrays_are_written_little_endian() -> None:
    array = np.array([1.0, 2.0], ">f4")
    pack = _roundtrip([TensorEntry.from_array("x", array)])
    assert pack.get("x").tolist() == [1.0, 2.0]


def test_non_contiguous_arrays_are_written_in_c_order() -> None:
    array = np.arange(12, dtype="<i4").reshape(3, 4).T
    pack = _roundtrip([TensorEntry.from_array("x", array)])
    np.testing.assert_array_equal(pack.get("x"), array)


# -- files ---------------------------------------------------------------------------------------


def test_save_appends_extension_and_refuses_to_overwrite(tmp_path: Path) -> None:
    entries = [TensorEntry.from_array("x", np.ones(2, "<f4"))]
    written = burnpack.write_file(tmp_path / "model", entries)
    assert written == str(tmp_path / "model.bpk")
    with pytest.raises(DestinationExistsError):
        burnpack.write_file(tmp_path / "model", entries)
    burnpack.write_file(tmp_path / "model", entries, overwrite=True)
    assert burnpack.write_file(tmp_path / "raw", entries, auto_extension=False).endswith("raw")


def test_failed_save_keeps_the_destination_and_leaves_no_scratch(tmp_path: Path) -> None:
    target = tmp_path / "model.bpk"
    target.write_bytes(b"previous contents")

    def failing() -> bytes:
        raise RuntimeError("source went away")

    entries = [
        TensorEntry.from_array("ok", np.ones(1000, "<f4")),
        TensorEntry("bad", from_name("F32"), (4,), failing),
    ]
    with pytest.raises(RuntimeError, match="source went away"):
        burnpack.write_file(target, entries, overwrite=True)
    assert target.read_bytes() == b"previous contents"
    assert os.listdir(tmp_path) == ["model.bpk"]


def test_saved_file_reads_back(tmp_path: Path) -> None:
    entries = [TensorEntry.from_array("x", np.arange(5, dtype="<i8"), param_id=2**64 - 1)]
    path = burnpack.write_file(tmp_path / "m.bpk", entries, {"k": "v"})
    with BurnpackReader.from_file(path) as pack:
        assert pack.get("x").tolist() == [0, 1, 2, 3, 4]
        assert pack.descriptor("x").param_id == 2**64 - 1
        assert pack.metadata() == {"k": "v"}
