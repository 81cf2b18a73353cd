"""Hostile SafeTensors files and indices found by fuzzing (issue 11).

Each one fails with a typed error that names the file and the tensor, in bounded time and
memory: shapes NumPy cannot hold are refused at open, JSON that Python's parser refuses becomes a
`MetadataError`, and no message renders file content (or a caller's index) unbounded.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weightstore import safetensors
from weightstore.container._reader import MAX_ARRAY_SIZE, MAX_DIMS
from weightstore.entry import TensorEntry
from weightstore.errors import DescriptorError, LimitExceeded, MetadataError, SliceError
from weightstore.safetensors import SafetensorsReader

MESSAGE_BOUND = 2_000  # every message built from file content stays this short


def _desc(dtype: Any, shape: Any, start: Any, end: Any) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [start, end]}


def _craft(top: Any, data: bytes = b"", *, header: bytes | None = None) -> bytes:
    block = json.dumps(top).encode() if header is None else header
    return struct.pack("<Q", len(block)) + block + data


def _open(data: bytes) -> SafetensorsReader:
    return SafetensorsReader.from_bytes(data, copy=False)


def _one(shape: Any, dtype: str = "U8", data: bytes = b"") -> bytes:
    return _craft({"x": _desc(dtype, shape, 0, len(data))}, data)


def _descriptor_header(field: bytes, value: bytes) -> bytes:
    fields = {b"dtype": b'"U8"', b"shape": b"[0]", b"data_offsets": b"[0,0]", field: value}
    inner = b",".join(b'"%s":%s' % item for item in fields.items())
    return b'{"x":{' + inner + b"}}"


# -- shapes NumPy cannot represent ---------------------------------------------------------------


def test_more_dimensions_than_numpy_allows_is_refused_at_open() -> None:
    with pytest.raises(LimitExceeded) as caught:
        _open(_one([1] * 65, data=b"\x07"))
    assert (caught.value.what, caught.value.found, caught.value.limit) == (
        "dimension count", 65, MAX_DIMS
    )  # fmt: skip
    assert caught.value.tensor == "x" and caught.value.path is None  # shown as <memory>
    assert str(caught.value).startswith("<memory>, tensor 'x': dimension count is 65")


def test_a_hundred_thousand_dimensions_are_refused_with_a_short_message() -> None:
    with pytest.raises(LimitExceeded) as caught:
        _open(_one([1] * 100_000 + [2], data=b"\x07\x07"))
    assert caught.value.found == 100_001 and len(str(caught.value)) < MESSAGE_BOUND


@pytest.mark.parametrize(
    ("shape", "dtype", "found"),
    [
        ([2**63, 0], "U8", 2**63),  # zero elements: the byte count is 0 and its check passes
        ([0, 2**64 - 1], "U8", 2**64 - 1),
        ([2**62, 2**62, 0], "U8", 2**124),
        ([2**61, 0], "F32", 2**63),
        ([2**60, 0], "C64", 2**63),
    ],
)
def test_shape_past_ssize_t_is_refused_at_open(shape: list[int], dtype: str, found: int) -> None:
    with pytest.raises(LimitExceeded) as caught:
        _open(_one(shape, dtype))
    assert caught.value.tensor == "x"
    assert (caught.value.found, caught.value.limit) == (found, MAX_ARRAY_SIZE)


@pytest.mark.parametrize(
    ("shape", "dtype"), [([2**62, 0], "U8"), ([0, 2**63 - 1], "U8"), ([2**59, 0], "C64")]
)
def test_largest_zero_element_shapes_read_and_slice(shape: list[int], dtype: str) -> None:
    with _open(_one(shape, dtype)) as reader:
        assert reader.get("x").shape == tuple(shape)
        whole = reader.get_slice("x")
        assert len(whole) == shape[0]
        assert whole[:].shape == tuple(shape)
        assert whole[:: 2**40, :: -(2**40)].shape == (-(-shape[0] // 2**40), -(-shape[1] // 2**40))
        if shape[0]:
            assert whole[-1].shape == (shape[1],)
        assert whole[2**61 :, 5:].shape == (max(0, shape[0] - 2**61), max(0, shape[1] - 5))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([0, 1, 3, 2**31, 2**32, 2**61, 2**62, 2**63, 2**64 - 1]), max_size=5),
    st.sampled_from(["U8", "F32", "C64"]),
)
def test_a_zero_element_shape_either_opens_and_reads_or_is_refused(
    dims: list[int], dtype: str
) -> None:
    shape = [0, *dims]
    try:
        reader = _open(_one(shape, dtype))
    except LimitExceeded as err:
        assert err.tensor == "x" and err.found > MAX_ARRAY_SIZE
        return
    assert reader.get("x").shape == tuple(shape)
    assert reader.get_slice("x")[:, ...].shape == tuple(shape)


# -- slicing with huge indices -------------------------------------------------------------------


def _four_by_two() -> SafetensorsReader:
    array = np.arange(8, dtype="u1").reshape(4, 2)
    return _open(safetensors.write_bytes([TensorEntry.from_array("x", array)]))


@pytest.mark.parametrize(
    "index", [10**5000, -(10**5000), np.int64(2**62)], ids=["10**5000", "-10**5000", "2**62"]
)
def test_huge_integer_index_is_a_short_slice_error(index: Any) -> None:
    with pytest.raises(SliceError, match="out of range") as caught:
        _four_by_two().get_slice("x")[index]
    assert caught.value.tensor == "x" and len(str(caught.value)) < MESSAGE_BOUND


@pytest.mark.parametrize(
    "key",
    [
        np.s_[:: 10**5000],
        np.s_[:, :: -(10**5000)],
        np.s_[10**5000 :, -(10**5000) :],
        np.s_[-(10**5000) : 10**5000 : 3],
        np.s_[..., 1 : 10**5000 : 10**5000],
    ],
    ids=["step", "negative step", "starts", "bounds", "bounds and step"],
)
def test_huge_slice_bounds_and_steps_match_numpy(key: Any) -> None:
    array = np.arange(8, dtype="u1").reshape(4, 2)
    np.testing.assert_array_equal(_four_by_two().get_slice("x")[key], array[key])


_HUGE_INTS = st.sampled_from([0, 1, -1, 3, 2**31, 2**62, 2**63 - 1, -(2**63), 10**30, -(10**30)])


@st.composite
def _huge_index(draw: st.DrawFn) -> Any:
    if draw(st.booleans()):
        return draw(_HUGE_INTS)
    step = draw(st.none() | _HUGE_INTS.filter(bool))
    return slice(draw(st.none() | _HUGE_INTS), draw(st.none() | _HUGE_INTS), step)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.sampled_from([1, 5, 2**31, 2**40, 2**62]), min_size=1, max_size=3),
    st.integers(0, 3),
    st.data(),
)
def test_huge_indices_into_huge_zero_element_shapes_match_numpy(
    dims: list[int], zero_at: int, data: st.DataObject
) -> None:
    shape = list(dims)
    shape.insert(min(zero_at, len(shape)), 0)
    try:
        reader = _open(_one(shape))
    except LimitExceeded:
        return  # refused at open; the test above covers which
    key = tuple(data.draw(st.lists(_huge_index(), max_size=len(shape))))
    try:
        expected = np.empty(shape, "u1")[key]  # free: no element to allocate
    except IndexError:
        with pytest.raises(SliceError):
            reader.get_slice("x")[key]
        return
    assert reader.get_slice("x")[key].shape == expected.shape


def test_unsupported_index_renders_bounded() -> None:
    with pytest.raises(SliceError) as caught:
        _four_by_two().get_slice("x")[[0] * 100_000]
    assert caught.value.tensor == "x" and len(str(caught.value)) < MESSAGE_BOUND


# -- JSON: numbers, nesting and long values ------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (b"shape", b"[" + b"7" * 5_000 + b"]"),  # Python's json refuses > 4,300 digits
        (b"data_offsets", b"[0," + b"7" * 100_000 + b"]"),
        (b"shape", b"[" + b"1e999999" + b"]"),  # parses as inf
        (b"shape", b"[" + b"7" * 4_000 + b"]"),  # parses, and is 4,000 characters long
        (b"shape", b"[" + b",".join([b'"a"'] * 100_000) + b"]"),
        (b"shape", b"[" * 900 + b"]" * 900),
        (b"dtype", b"[" * 900 + b"]" * 900),
        (b"dtype", b'"' + b"D" * 10**6 + b'"'),
        (b"dtype", b"[" + b",".join([b"1"] * 100_000) + b"]"),
        (b"data_offsets", b"[" + b",".join([b"1"] * 100_000) + b"]"),
    ],
    ids=[
        "5000 digits",
        "100000 digits",
        "1e999999",
        "4000 digits",
        "many strings",
        "deep shape",
        "deep dtype",
        "long dtype",
        "long dtype list",
        "long offsets",
    ],
)
def test_hostile_descriptor_fields_fail_typed_and_short(field: bytes, value: bytes) -> None:
    with pytest.raises((DescriptorError, MetadataError)) as caught:
        _open(_craft({}, header=_descriptor_header(field, value)))
    assert len(str(caught.value)) < MESSAGE_BOUND
    if isinstance(caught.value, DescriptorError):
        assert caught.value.tensor == "x"


@pytest.mark.parametrize(
    "value",
    [
        b"[" * 900 + b"]" * 900,
        b"[" + b",".join([b"1"] * 100_000) + b"]",
        b"7" * 4_000,
        b"1e999999",
    ],
    ids=["deep", "long list", "4000 digits", "1e999999"],
)
def test_hostile_metadata_values_fail_typed_and_short(value: bytes) -> None:
    header = b'{"__metadata__":{"k":' + value + b"}}"
    with pytest.raises(MetadataError) as caught:
        _open(_craft({}, header=header))
    assert len(str(caught.value)) < MESSAGE_BOUND


def test_long_metadata_key_renders_bounded() -> None:
    header = b'{"__metadata__":{"' + b"k" * 10**6 + b'":1}}'
    with pytest.raises(MetadataError) as caught:
        _open(_craft({}, header=header))
    assert len(str(caught.value)) < MESSAGE_BOUND


def test_deep_header_is_metadata_error() -> None:
    header = b'{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(MetadataError, match="not valid JSON"):
        _open(_craft({}, header=header))
