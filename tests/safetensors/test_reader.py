"""Reading SafeTensors: Burn's real files, every backend, and one hostile file per rule."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests._optional import need
from tests.conftest import burn_fixture
from tests.safetensors.conftest import Opener
from weightstore import safetensors
from weightstore.dtypes import from_safetensors
from weightstore.entry import TensorEntry
from weightstore.errors import (
    DescriptorError,
    DTypeError,
    HeaderError,
    LimitExceeded,
    MetadataError,
    TruncatedError,
    WeightstoreError,
)
from weightstore.safetensors import SafetensorsReader

MULTI_LAYER = "safetensors-tests/multi_layer/multi_layer.safetensors"
MNIST = "import-model-weights/mnist.safetensors"

# The fixture: header 648 bytes, no metadata.
MULTI_LAYER_TENSORS = {
    "norm1.num_batches_tracked": ("I64", ()),
    "conv1.bias": ("F32", (4,)),
    "conv1.weight": ("F32", (4, 3, 3, 3)),
    "fc1.bias": ("F32", (16,)),
    "fc1.weight": ("F32", (16, 256)),
    "norm1.bias": ("F32", (4,)),
    "norm1.running_mean": ("F32", (4,)),
    "norm1.running_var": ("F32", (4,)),
    "norm1.weight": ("F32", (4,)),
}

# The fixture: header 1520 bytes, no metadata. Burn's notes give num_batches_tracked
# as 3752, but the file (and the safetensors package reading it) holds 7504 in both norms.
MNIST_TENSORS = {
    "conv1.weight": ("F32", (8, 1, 3, 3)), "conv1.bias": ("F32", (8,)),
    "conv2.weight": ("F32", (16, 8, 3, 3)), "conv2.bias": ("F32", (16,)),
    "conv3.weight": ("F32", (24, 16, 3, 3)), "conv3.bias": ("F32", (24,)),
    "fc1.weight": ("F32", (32, 11616)), "fc1.bias": ("F32", (32,)),
    "fc2.weight": ("F32", (10, 32)), "fc2.bias": ("F32", (10,)),
    **{f"norm1.{p}": ("F32", (24,)) for p in ("weight", "bias", "running_mean", "running_var")},
    **{f"norm2.{p}": ("F32", (10,)) for p in ("weight", "bias", "running_mean", "running_var")},
    "norm1.num_batches_tracked": ("I64", ()), "norm2.num_batches_tracked": ("I64", ()),
}  # fmt: skip


def _check_listing(reader: SafetensorsReader, expected: dict[str, tuple[str, tuple[int, ...]]]):
    assert reader.names() == sorted(expected)
    for name, (dtype, shape) in expected.items():
        descriptor = reader.descriptor(name)
        assert (descriptor.dtype.safetensors, descriptor.shape) == (dtype, shape)
        array = reader.get(name)
        assert array.shape == shape and array.dtype == descriptor.dtype.numpy


# -- Burn's fixtures ------------------------------------------------------------------------------


def test_burn_multi_layer(open_reader: Opener) -> None:
    with open_reader(burn_fixture(MULTI_LAYER)) as reader:
        assert reader.header_size == 648 and reader.metadata() == {}
        _check_listing(reader, MULTI_LAYER_TENSORS)
        # Data order is the package's: I64 first, then F32 by name.
        assert list(reader.descriptors)[:2] == ["norm1.num_batches_tracked", "conv1.bias"]
        assert reader.get("norm1.num_batches_tracked").shape == ()


def test_burn_mnist(open_reader: Opener) -> None:
    with open_reader(burn_fixture(MNIST)) as reader:
        assert reader.header_size == 1520 and reader.metadata() == {}
        _check_listing(reader, MNIST_TENSORS)
        assert int(reader.get("norm1.num_batches_tracked")) == 7504
        assert int(reader.get("norm2.num_batches_tracked")) == 7504


def test_burn_files_match_the_package_and_rebuild_byte_identical() -> None:
    load_file = need("safetensors.numpy").load_file

    for relative in (MULTI_LAYER, MNIST):
        path = burn_fixture(relative)
        expected = load_file(str(path))
        with SafetensorsReader.from_file(path) as reader:
            for name, array in expected.items():
                assert reader.get(name).tobytes() == array.tobytes(), name
            entries = [
                TensorEntry(d.name, d.dtype, d.shape, reader.get_bytes(d.name))
                for d in reader.descriptors.values()
            ]
            rebuilt = safetensors.write_bytes(entries)
        assert rebuilt == path.read_bytes()


# -- views, copies and alignment ------------------------------------------------------------------


def _small() -> bytes:
    entries = [
        TensorEntry.from_array("a", np.arange(6, dtype="<f4").reshape(2, 3)),
        TensorEntry.from_array("b", np.array([1, -2], "<i8")),
    ]
    return safetensors.write_bytes(entries, {"k": "v"})


def test_every_backend_reads_the_same(open_reader: Opener, tmp_path: Path) -> None:
    path = tmp_path / "small.safetensors"
    path.write_bytes(_small())
    with open_reader(path) as reader:
        assert reader.metadata() == {"k": "v"}
        assert reader.get("a").tolist() == [[0, 1, 2], [3, 4, 5]]
        assert reader.get("b").tolist() == [1, -2]
        assert bytes(reader.get_bytes("b")) == struct.pack("<2q", 1, -2)
        assert "a" in reader and len(reader) == 2 and list(reader) == ["a", "b"]


def test_mmap_arrays_are_views_and_writes_never_reach_the_file(tmp_path: Path) -> None:
    path = tmp_path / "small.safetensors"
    path.write_bytes(_small())
    with SafetensorsReader.from_file(path) as reader:
        array = reader.get("a")
        assert not array.flags.owndata
        array[0, 0] = 99.0  # copy-on-write: private to this process
    assert path.read_bytes() == _small()


def test_static_buffer_is_viewed_in_place() -> None:
    buffer = bytearray(_small())
    reader = SafetensorsReader.from_static(buffer)
    array = reader.get("b")
    start = reader.data_start + reader.descriptor("b").data_offsets[0]
    buffer[start : start + 8] = struct.pack("<q", 7)
    assert array[0] == 7


def test_from_bytes_copies_mutable_buffers() -> None:
    buffer = bytearray(_small())
    array = SafetensorsReader.from_bytes(buffer).get("b")
    buffer[:] = bytes(len(buffer))
    assert array.tolist() == [1, -2] and not array.flags.writeable


def test_misaligned_tensor_alone_is_copied(tmp_path: Path) -> None:
    # keep_order puts a 4-byte float right after 3 single bytes, as a careless writer might.
    entries = [
        TensorEntry.from_array("a", np.array([1, 2, 3], np.uint8)),
        TensorEntry.from_array("b", np.array([1.5, -2.5], "<f4")),
    ]
    path = tmp_path / "odd.safetensors"
    path.write_bytes(safetensors.write_bytes(entries, keep_order=True))
    with SafetensorsReader.from_file(path) as reader:
        assert reader.descriptor("b").data_offsets == (3, 11)
        assert not reader.get("a").flags.owndata  # still a view
        b = reader.get("b")
        assert b.flags.aligned and b.flags.owndata
        assert b.tolist() == [1.5, -2.5]


def test_packed_sub_byte_dtype_is_listed_and_readable_as_bytes() -> None:
    data = _craft(
        {"f4": _desc("F4", [2, 2], 0, 2), "f6": _desc("F6_E2M3", [4], 2, 5)}, b"\x12\x34abc"
    )
    reader = SafetensorsReader.from_bytes(data)
    assert reader.names() == ["f4", "f6"]
    assert reader.descriptor("f4").dtype is from_safetensors("F4")
    assert bytes(reader.get_bytes("f4")) == b"\x12\x34"
    assert bytes(reader.get_bytes("f6")) == b"abc"
    with pytest.raises(DTypeError) as caught:
        reader.get("f4")
    assert caught.value.tensor == "f4"
    with pytest.raises(DTypeError):
        reader.get_slice("f6")


# -- hostile files: one per rule ------------------------------------------------------------------


def _desc(dtype: Any, shape: Any, start: Any, end: Any) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [start, end]}


def _craft(top: Any, data: bytes = b"", *, header: bytes | None = None) -> bytes:
    block = json.dumps(top).encode() if header is None else header
    return struct.pack("<Q", len(block)) + block + data


def _open(data: bytes) -> SafetensorsReader:
    return SafetensorsReader.from_bytes(data)


def test_shorter_than_the_length_prefix() -> None:
    with pytest.raises(HeaderError, match="shorter than the 8-byte"):
        _open(b"\x02\x00\x00")


def test_header_size_over_the_limit_is_refused_before_reading() -> None:
    with pytest.raises(LimitExceeded) as caught:
        _open(struct.pack("<Q", 100_000_001) + b"{}")
    assert (caught.value.found, caught.value.limit) == (100_000_001, 100_000_000)
    with pytest.raises(LimitExceeded):
        SafetensorsReader.from_bytes(_craft({}), max_header_size=1)


def test_header_past_end_of_file() -> None:
    with pytest.raises(TruncatedError) as caught:
        _open(struct.pack("<Q", 500) + b"{}")
    assert (caught.value.expected, caught.value.found) == (500, 2)


def test_header_not_utf8() -> None:
    with pytest.raises(MetadataError, match="not UTF-8"):
        _open(_craft({}, header=b'{"\xff":1}'))


@pytest.mark.parametrize(
    "header",
    [
        b"{",
        b"[]",
        b' {"a":1}',
        b'{"a":NaN}',
        b"{} x",
        b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    ],
    ids=["open", "array", "leading space", "nan", "trailing text", "too deep"],
)
def test_header_not_one_json_object(header: bytes) -> None:
    with pytest.raises(MetadataError, match="not valid JSON"):
        _open(_craft({}, header=header))


def test_duplicate_tensor_names() -> None:
    d = json.dumps(_desc("U8", [1], 0, 1))
    with pytest.raises(DescriptorError, match="twice") as caught:
        _open(_craft({}, b"\x01", header=f'{{"a":{d},"a":{d}}}'.encode()))
    assert caught.value.tensor == "a"


def test_duplicate_descriptor_field() -> None:
    header = b'{"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    with pytest.raises(DescriptorError, match="'dtype' appears twice") as caught:
        _open(_craft({}, b"\x01", header=header))
    assert caught.value.tensor == "a"


@pytest.mark.parametrize(
    "header",
    [b'{"__metadata__":{"k":"1","k":"2"}}', b'{"__metadata__":{},"__metadata__":{}}'],
)
def test_duplicate_metadata_keys(header: bytes) -> None:
    with pytest.raises(MetadataError, match="twice"):
        _open(_craft({}, header=header))


@pytest.mark.parametrize("metadata", [{"k": 1}, {"k": None}, {"k": ["v"]}, ["k"], "k"])
def test_metadata_must_map_strings_to_strings(metadata: Any) -> None:
    with pytest.raises(MetadataError, match=r"__metadata__|not a string"):
        _open(_craft({"__metadata__": metadata}))


def test_null_metadata_reads_as_none_like_the_reference() -> None:
    assert _open(_craft({"__metadata__": None})).metadata() == {}


def test_descriptor_not_an_object() -> None:
    with pytest.raises(DescriptorError, match="not a JSON object") as caught:
        _open(_craft({"x": [1, 2]}))
    assert caught.value.tensor == "x"


def test_unknown_dtype() -> None:
    with pytest.raises(DescriptorError, match="not a SafeTensors dtype") as caught:
        _open(_craft({"x": _desc("F128", [1], 0, 16)}, bytes(16)))
    assert caught.value.tensor == "x"


@pytest.mark.parametrize("shape", [[1.0], [-1], ["2"], [True], 3, None, [2**64]])
def test_shape_not_non_negative_integers(shape: Any) -> None:
    with pytest.raises(DescriptorError, match="shape") as caught:
        _open(_craft({"x": _desc("U8", shape, 0, 1)}, b"\x00"))
    assert caught.value.tensor == "x"


@pytest.mark.parametrize("offsets", [[0], [0, 1, 2], [-1, 0], [0.0, 1], "0,1", None])
def test_offsets_not_a_pair_of_non_negative_integers(offsets: Any) -> None:
    top = {"x": {"dtype": "U8", "shape": [1], "data_offsets": offsets}}
    with pytest.raises(DescriptorError, match="data_offsets") as caught:
        _open(_craft(top, b"\x00"))
    assert caught.value.tensor == "x"


def test_end_before_start() -> None:
    with pytest.raises(DescriptorError, match="before start") as caught:
        _open(_craft({"x": _desc("U8", [0], 8, 4)}, bytes(8)))
    assert caught.value.tensor == "x"


def test_length_disagrees_with_shape_and_dtype() -> None:
    with pytest.raises(DescriptorError, match="needs 16") as caught:
        _open(_craft({"x": _desc("F32", [4], 0, 12)}, bytes(12)))
    assert caught.value.tensor == "x"


def test_packed_dtype_must_fill_whole_bytes() -> None:
    with pytest.raises(DescriptorError, match="12 bits") as caught:
        _open(_craft({"x": _desc("F4", [3], 0, 2)}, bytes(2)))
    assert caught.value.tensor == "x"


def test_offsets_past_end_of_file() -> None:
    with pytest.raises(TruncatedError) as caught:
        _open(_craft({"x": _desc("U8", [100], 0, 100)}, bytes(10)))
    assert caught.value.tensor == "x" and caught.value.found == 10


def test_overlapping_tensors() -> None:
    top = {"a": _desc("U8", [8], 0, 8), "b": _desc("U8", [8], 4, 12)}
    with pytest.raises(DescriptorError, match="overlap") as caught:
        _open(_craft(top, bytes(12)))
    assert caught.value.tensor == "b"


def test_empty_tensor_inside_another_is_an_overlap_as_in_the_reference() -> None:
    top = {"a": _desc("U8", [8], 0, 8), "e": _desc("U8", [0], 4, 4)}
    with pytest.raises(DescriptorError, match="overlap") as caught:
        _open(_craft(top, bytes(8)))
    assert caught.value.tensor == "e"


def test_gap_between_tensors() -> None:
    top = {"a": _desc("U8", [4], 0, 4), "b": _desc("U8", [4], 8, 12)}
    with pytest.raises(DescriptorError, match=r"bytes \[4, 8\) that no tensor covers") as caught:
        _open(_craft(top, bytes(12)))
    assert caught.value.tensor == "b"


def test_trailing_bytes() -> None:
    with pytest.raises(DescriptorError, match="4 bytes follow the last tensor"):
        _open(_craft({"x": _desc("U8", [4], 0, 4)}, bytes(4) + b"junk"))


def test_lone_surrogate_name() -> None:
    header = b'{"\\ud800":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}'
    with pytest.raises(DescriptorError, match="Unicode"):
        _open(_craft({}, header=header))


def test_unknown_descriptor_fields_are_ignored_like_the_reference() -> None:
    top = {"x": {**_desc("U8", [1], 0, 1), "extra": {"nested": True}}}
    assert _open(_craft(top, b"\x07")).get("x").tolist() == [7]


def test_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.safetensors"
    path.write_bytes(_craft({"x": _desc("F32", [4], 0, 12)}, bytes(12)))
    for mode in ("mmap", "pread"):
        with pytest.raises(WeightstoreError) as caught:
            SafetensorsReader.from_file(path, mode=mode)  # type: ignore[arg-type]
        assert caught.value.path == str(path) and caught.value.tensor == "x"
        assert str(caught.value).startswith(f"{path}, tensor 'x': ")
