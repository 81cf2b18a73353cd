"""The canonical-header path: what the writers write opens column-wise, with the general
parser's result; anything else falls back to the general parser, which names the fault."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest

from tests._optional import need
from weightstore.errors import DescriptorError, MetadataError, TruncatedError, WeightstoreError
from weightstore.safetensors import SafetensorsReader, _reader
from weightstore.safetensors._layout import TensorDescriptor

ml_dtypes = pytest.importorskip("ml_dtypes")


def _package_save(arrays: dict[str, Any], metadata: dict[str, str] | None = None) -> bytes:
    """`arrays` as the safetensors package writes them (the test skips without it)."""
    return bytes(need("safetensors.numpy").save(arrays, metadata=metadata))


def _file(header: dict[str, Any] | str, data: bytes) -> bytes:
    text = header if isinstance(header, str) else json.dumps(header, separators=(",", ":"))
    raw = text.encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


def _general(data: bytes) -> tuple[dict[str, str], dict[str, TensorDescriptor]]:
    """What the general parser makes of `data` (no canonical path)."""
    (size,) = struct.unpack("<Q", data[:8])
    metadata, in_order = _reader._parse_top(_reader.decode_header(data[8 : 8 + size]), None)
    _reader._validate_layout(in_order, len(data) - 8 - size, None)
    return metadata, {d.name: d for d in in_order}


def _canonical(data: bytes) -> Any:
    (size,) = struct.unpack("<Q", data[:8])
    return _reader._parse_canonical(memoryview(data)[8 : 8 + size], len(data) - 8 - size, None)


MIXED = {
    "embed.weight": np.arange(24, dtype=np.float32).reshape(4, 6),
    "half": np.arange(6, dtype=np.float16).reshape(2, 3),
    "brain": np.arange(4, dtype=np.float32).astype(ml_dtypes.bfloat16),
    "double": np.arange(3, dtype=np.float64),
    "counter": np.array(7, dtype=np.int64),  # a scalar: shape []
    "mask": np.array([True, False, True]),
    "bytes": np.arange(5, dtype=np.int8),
    "deep": np.ones((1,) * 20, dtype=np.uint16),
}


@pytest.mark.parametrize("metadata", [None, {}, {"format": "np", "a": "b"}])
def test_files_the_package_writes_take_the_canonical_path_with_the_general_result(
    metadata: dict[str, str] | None,
) -> None:
    data = _package_save(MIXED, metadata=metadata)
    canonical = _canonical(data)
    assert canonical is not None
    general_metadata, general = _general(data)
    assert canonical[0] == general_metadata
    spans = canonical[1]
    assert list(spans) == list(general)  # data order
    for name, descriptor in general.items():
        assert spans[name] == (descriptor.dtype, descriptor.shape, *descriptor.data_offsets)
    reader = SafetensorsReader.from_bytes(data)
    assert dict(reader.descriptors) == general
    assert reader.metadata() == general_metadata
    for name, array in MIXED.items():
        got = reader.get(name)
        assert got.dtype == array.dtype and got.shape == array.shape
        assert got.tobytes() == array.tobytes()


def test_many_small_tensors_read_back_as_views() -> None:
    arrays = {f"t{i}": np.full((4, 4), i, dtype=np.float32) for i in range(300)}
    reader = SafetensorsReader.from_bytes(_package_save(arrays))
    assert len(reader) == 300 and "t299" in reader and "t300" not in reader
    assert reader.names_in_file_order() == sorted(arrays)  # the writer's order: by name
    for name, array in arrays.items():
        got = reader.get(name)
        np.testing.assert_array_equal(got, array)
        assert not got.flags.owndata  # a view of the buffer, not a copy
    at = sorted(arrays).index("t7") * 64
    assert reader.descriptor("t7") == TensorDescriptor(
        "t7", reader.descriptor("t7").dtype, (4, 4), (at, at + 64)
    )


def _valid_header() -> dict[str, Any]:
    return {
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]},
    }


FALLBACKS: dict[str, str] = {
    # each is valid: the general path decides and opens it
    "fields reordered": '{"a":{"shape":[2],"dtype":"F32","data_offsets":[0,8]},'
    '"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}',
    "whitespace": '{"a": {"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
    '"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}',
    "escaped name": '{"\\u0061":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
    '"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}',
    "extra field": '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1},'
    '"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}',
    "header not in data order": '{"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},'
    '"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
    "an empty tensor": '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
    '"e":{"dtype":"F32","shape":[0,3],"data_offsets":[8,8]},'
    '"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}',
    "metadata last": '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
    '"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},"__metadata__":{"k":"v"}}',
}


@pytest.mark.parametrize("header", FALLBACKS.values(), ids=FALLBACKS.keys())
def test_other_valid_layouts_fall_back_and_open_alike(header: str) -> None:
    data = _file(header, bytes(12))
    assert _canonical(data) is None
    reader = SafetensorsReader.from_bytes(data)
    assert dict(reader.descriptors) == _general(data)[1]
    assert reader.get("a").shape == (2,) and reader.get("b").shape == (1,)


def _canonical_text(entries: list[tuple[str, str, str, str, str]], head: str = "{") -> str:
    return (
        head
        + ",".join(
            f'"{n}":{{"dtype":"{d}","shape":[{s}],"data_offsets":[{a},{b}]}}'
            for n, d, s, a, b in entries
        )
        + "}"
    )


HOSTILE: dict[str, tuple[str, int, type[WeightstoreError], str | None]] = {
    # canonical in form, refused by a rule: (header, data size, error, tensor named)
    "repeated name": (
        _canonical_text([("a", "F32", "1", "0", "4"), ("a", "F32", "1", "4", "8")]),
        8, DescriptorError, "a",
    ),
    "overlap": (
        _canonical_text([("a", "F32", "2", "0", "8"), ("b", "F32", "1", "4", "8")]),
        8, DescriptorError, "b",
    ),
    "gap": (
        _canonical_text([("a", "F32", "1", "0", "4"), ("b", "F32", "1", "8", "12")]),
        12, DescriptorError, "b",
    ),
    "tail": (_canonical_text([("a", "F32", "1", "0", "4")]), 8, DescriptorError, None),
    "past the end": (_canonical_text([("a", "F32", "2", "0", "8")]), 4, TruncatedError, "a"),
    "length": (_canonical_text([("a", "F32", "3", "0", "8")]), 8, DescriptorError, "a"),
    "unknown dtype": (_canonical_text([("a", "F33", "1", "0", "4")]), 4, DescriptorError, "a"),
    "leading zero": (_canonical_text([("a", "F32", "1", "00", "4")]), 4, MetadataError, None),
    "tensor named __metadata__": (
        _canonical_text([("__metadata__", "F32", "1", "0", "4")]), 4, MetadataError, None,
    ),
    "metadata not strings": (
        _canonical_text([("a", "F32", "1", "0", "4")], head='{"__metadata__":{"k":1},'),
        4, MetadataError, None,
    ),
    "control character in a name": (
        _canonical_text([("a\nb", "F32", "1", "0", "4")]), 4, MetadataError, None,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_headers_in_canonical_form_are_still_refused(
    case: tuple[str, int, type[WeightstoreError], str | None],
) -> None:
    header, size, error, tensor = case
    data = _file(header, bytes(size))
    assert _canonical(data) is None
    with pytest.raises(error) as raised:
        SafetensorsReader.from_bytes(data)
    if tensor is not None:
        assert raised.value.tensor == tensor


def test_the_collector_is_left_as_it_was() -> None:
    import gc

    data = _package_save(MIXED)
    gc.disable()
    try:
        SafetensorsReader.from_bytes(data)
        assert not gc.isenabled()
    finally:
        gc.enable()
    SafetensorsReader.from_bytes(data)
    assert gc.isenabled()
    with pytest.raises(TruncatedError):
        SafetensorsReader.from_bytes(data[:-1])
    assert gc.isenabled()


def test_lazy_descriptors_behave_as_a_mapping() -> None:
    reader = SafetensorsReader.from_bytes(_file(_valid_header(), bytes(12)))
    descriptors = reader.descriptors
    assert list(descriptors) == ["a", "b"] and len(descriptors) == 2
    assert "a" in descriptors and "c" not in descriptors
    assert descriptors["a"] is descriptors["a"]  # built once
    assert descriptors.get("c") is None
    assert [d.data_offsets for d in descriptors.values()] == [(0, 8), (8, 12)]


def test_mapped_views_outlive_the_reader_and_reads_after_close_fail(tmp_path: Any) -> None:
    path = tmp_path / "m.safetensors"
    path.write_bytes(_package_save(MIXED))
    reader = SafetensorsReader.from_file(path)
    kept = reader.get("embed.weight")
    reader.close()
    np.testing.assert_array_equal(kept, MIXED["embed.weight"])  # still mapped
    with pytest.raises(ValueError, match="closed"):
        reader.get("half")
    kept[0, 0] = -1  # copy-on-write: the file is unchanged
    assert SafetensorsReader.from_file(path).get("embed.weight")[0, 0] == 0


def test_a_file_shrunk_under_its_reader_raises_instead_of_crashing(tmp_path: Any) -> None:
    path = tmp_path / "m.safetensors"
    data = _package_save(MIXED)
    path.write_bytes(data)
    reader = SafetensorsReader.from_file(path)
    with open(path, "r+b") as file:
        file.truncate(len(data) // 2)
    last = reader.names_in_file_order()[-1]
    with pytest.raises(TruncatedError) as raised:
        reader.get(last)
    assert raised.value.tensor == last
