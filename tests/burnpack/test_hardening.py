"""Hostile burnpack files found by fuzzing (issue 11).

Each one fails at open with a typed error that names the file and the tensor, in bounded time
and memory: never a NumPy `ValueError` at first touch, never a message that renders a hostile
structure in full.
"""

from __future__ import annotations

import contextlib
import struct
import subprocess
import sys
from typing import Any

import cbor2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weightstore import burnpack
from weightstore.burnpack import BurnpackReader
from weightstore.burnpack._layout import CBOR_TAGS_CBOR2_DECODES
from weightstore.container._reader import MAX_ARRAY_SIZE, MAX_DIMS
from weightstore.entry import TensorEntry
from weightstore.errors import DescriptorError, LimitExceeded, MetadataError, WeightstoreError

# Every message built from file content stays this short, however large the content.
MESSAGE_BOUND = 2_000


def _desc(dtype: Any, shape: Any, start: int, end: int, **extra: Any) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [start, end], **extra}


def _craft(top: Any, data: bytes = b"", *, block: bytes | None = None) -> bytes:
    block = cbor2.dumps(top) if block is None else block
    head = b"NRUB" + struct.pack("<HI", 1, len(block)) + block
    return head + bytes(burnpack.data_start(len(block)) - len(head)) + data


def _open(data: bytes) -> BurnpackReader:
    return BurnpackReader.from_bytes(data, copy=False)


def _one(shape: Any, dtype: Any = "U8", data: bytes = b"", **extra: Any) -> bytes:
    return _craft({"tensors": {"x": _desc(dtype, shape, 0, len(data), **extra)}}, data)


# -- shapes NumPy cannot represent ---------------------------------------------------------------


def test_more_dimensions_than_numpy_allows_is_refused_at_open() -> None:
    with pytest.raises(LimitExceeded) as caught:
        _open(_one([1] * 65, data=b"\x07"))
    assert (caught.value.what, caught.value.found, caught.value.limit) == (
        "dimension count", 65, MAX_DIMS
    )  # fmt: skip
    assert caught.value.tensor == "x" and caught.value.path is None  # shown as <memory>
    assert str(caught.value).startswith("<memory>, tensor 'x': dimension count is 65")


def test_the_most_dimensions_numpy_allows_read() -> None:
    with _open(_one([1] * MAX_DIMS, data=b"\x07")) as pack:
        assert pack.get("x").shape == (1,) * MAX_DIMS
        assert pack.get_slice("x")[(0,) * MAX_DIMS].shape == ()


@pytest.mark.parametrize(
    ("shape", "dtype", "found"),
    [
        ([2**63, 0], "U8", 2**63),  # a zero-element tensor: 0 bytes, so the length check passes
        ([2**64 - 1, 0], "U8", 2**64 - 1),
        ([0, 2**62, 2**62], "U8", 2**124),  # the product of the dims past ssize_t
        ([2**61, 0], "F32", 2**63),  # elements fit, their bytes do not
        ([2**32, 2**31, 0], "U8", 2**63),
    ],
)
def test_shape_past_ssize_t_is_refused_at_open(shape: list[int], dtype: str, found: int) -> None:
    with pytest.raises(LimitExceeded) as caught:
        _open(_one(shape, dtype))
    assert caught.value.tensor == "x"
    assert (caught.value.found, caught.value.limit) == (found, MAX_ARRAY_SIZE)


@pytest.mark.parametrize(
    ("shape", "dtype"), [([2**62, 0], "U8"), ([0, 2**63 - 1], "U8"), ([2**61 - 1, 0], "F32")]
)
def test_largest_zero_element_shapes_read_and_slice(shape: list[int], dtype: str) -> None:
    with _open(_one(shape, dtype)) as pack:
        assert pack.get("x").shape == tuple(shape)
        whole = pack.get_slice("x")
        assert whole[:].shape == tuple(shape)
        assert whole[..., 0:0].shape == (shape[0], 0)
        if shape[0]:
            assert whole[-1].shape == tuple(shape[1:])
        assert len(whole) == shape[0]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([0, 1, 2, 3, 2**20, 2**31, 2**32, 2**61, 2**62, 2**63]), max_size=5),
    st.sampled_from(["U8", "F32", "F64"]),
)
def test_a_zero_element_shape_either_opens_and_reads_or_is_refused(
    dims: list[int], dtype: str
) -> None:
    shape = [*dims, 0]
    try:
        pack = _open(_one(shape, dtype))
    except LimitExceeded as err:
        assert err.tensor == "x" and err.found > MAX_ARRAY_SIZE
        return
    assert pack.get("x").shape == tuple(shape)
    assert pack.get_slice("x")[..., :].shape == tuple(shape)


# -- CBOR tags: shared references and friends ----------------------------------------------------


def _shared_dag(levels: int, fanout: int = 2) -> cbor2.CBORTag:
    """A list whose item k holds item k-1 `fanout` times, by reference: `repr` walks it as a
    tree of fanout**levels leaves.

    cbor2 numbers shareables (tag 28) in the order it meets them, so ``29(k)`` is item k.
    """
    refs = [[cbor2.CBORTag(29, k)] * fanout for k in range(levels)]
    items = [cbor2.CBORTag(28, []), *(cbor2.CBORTag(28, ref) for ref in refs)]
    return cbor2.CBORTag(28, [cbor2.CBORTag(29, 0), *items])  # item 0 is the list itself


def test_shared_reference_graph_is_refused_before_anything_walks_it() -> None:
    # 2**18 leaves: the old reader spent a second building a megabyte message.
    with pytest.raises(MetadataError, match=r"tag 2[89]") as caught:
        _open(_one(_shared_dag(18)))
    assert caught.value.path is None
    assert len(str(caught.value)) < MESSAGE_BOUND


def test_fuzzed_512_byte_file_with_4_to_the_28_shared_leaves_fails_at_once() -> None:
    # The fuzzer's class of file: the old reader began rendering 4**28 leaves into a message
    # and never finished. A subprocess, so that a regression fails by timeout, not by hanging.
    data = _one(_shared_dag(28, fanout=4))
    assert len(data) == 512
    script = (
        "import sys; from weightstore.burnpack import BurnpackReader as R\n"
        "from weightstore.errors import MetadataError\n"
        "try: R.from_bytes(sys.stdin.buffer.read())\n"
        "except MetadataError as err: print(len(str(err)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], input=data, capture_output=True, timeout=30, check=True
    )
    assert 0 < int(done.stdout) < MESSAGE_BOUND


def test_self_referencing_value_is_refused() -> None:
    me = cbor2.CBORTag(28, [cbor2.CBORTag(29, 0)])  # a list that contains itself
    with pytest.raises(MetadataError, match=r"tag 2[89]"):
        _open(_craft({"tensors": {}, "scalars": {"s": {"Int": me}}}))


@pytest.mark.parametrize(
    ("tag", "value"),
    [
        (2, b"\x01" * 100_000),  # a 240,000-digit bignum: its repr raises ValueError
        (5, [2**63 - 1, 1]),  # a bigfloat that computes 2 ** exponent
        (25, 0),  # a string reference
        (256, ["ab"]),  # a string-reference namespace
        (35, "(a+)+$"),  # a regular expression, compiled by cbor2
        (258, ["a"]),  # a set
        (55799, 1),  # "self-described CBOR": harmless, but Burn never writes it either
        (1_000, 1),  # a tag cbor2 does not know
    ],
    ids=lambda item: None if isinstance(item, int) else "value",
)
def test_every_cbor_tag_is_refused(tag: int, value: Any) -> None:
    with pytest.raises(MetadataError, match=f"tag {tag}\\b") as caught:
        _open(_one([cbor2.CBORTag(tag, value)]))
    assert len(str(caught.value)) < MESSAGE_BOUND


def test_the_refused_tag_table_covers_what_cbor2_decodes() -> None:
    # cbor2 calls tag_hook only for tags it has no decoder for; every other tag must be in the
    # table, or it would decode to a Python object instead of being refused.
    seen: list[int] = []

    def hook(tag: cbor2.CBORTag, immutable: bool) -> None:
        seen.append(tag.tag)

    for tag in [*range(300), *CBOR_TAGS_CBOR2_DECODES, 1040, 2**16 - 1, 2**32 - 1]:
        seen.clear()
        with contextlib.suppress(cbor2.CBORDecodeError):
            cbor2.loads(cbor2.dumps(cbor2.CBORTag(tag, 0)), tag_hook=hook)
        assert (tag in CBOR_TAGS_CBOR2_DECODES) == (seen != [tag]), tag


# -- messages never render file content unbounded ------------------------------------------------


BIG_LIST = list(range(100_000))


@pytest.mark.parametrize(
    ("descriptor", "error"),
    [
        (_desc("U8", BIG_LIST, 0, 0), LimitExceeded),  # a list of u64, but 100,000 dims
        (_desc("U8", ["a" * 10**6], 0, 0), DescriptorError),
        (_desc(BIG_LIST, [0], 0, 0), DescriptorError),
        (_desc({"Bool": BIG_LIST}, [0], 0, 0), DescriptorError),
        (_desc("U8", [0], 0, 0, param_id=BIG_LIST), DescriptorError),
        (_desc("U8", [0], BIG_LIST, 0), DescriptorError),
        (BIG_LIST, DescriptorError),
    ],
    ids=["shape", "long text in shape", "dtype", "bool dtype", "param_id", "offsets", "entry"],
)
def test_descriptor_messages_are_bounded(descriptor: Any, error: type[WeightstoreError]) -> None:
    with pytest.raises(error) as caught:
        _open(_craft({"tensors": {"x": descriptor}}))
    assert caught.value.tensor == "x"
    assert len(str(caught.value)) < MESSAGE_BOUND


def test_offsets_as_a_long_list_are_bounded() -> None:
    top = {"tensors": {"x": {"dtype": "U8", "shape": [0], "data_offsets": BIG_LIST}}}
    with pytest.raises(DescriptorError) as caught:
        _open(_craft(top))
    assert len(str(caught.value)) < MESSAGE_BOUND


def test_byte_string_name_is_bounded() -> None:
    with pytest.raises(DescriptorError, match="not a text string") as caught:
        _open(_craft({"tensors": {b"n" * 10**6: _desc("U8", [0], 0, 0)}}))
    assert len(str(caught.value)) < MESSAGE_BOUND


@pytest.mark.parametrize(
    "entry",
    [{"Int": BIG_LIST}, {"Float": "x" * 10**6}, BIG_LIST, {"Int": 1, "UInt": BIG_LIST}],
    ids=["long int", "long text", "list", "two kinds"],
)
def test_scalar_messages_are_bounded(entry: Any) -> None:
    with pytest.raises(MetadataError, match="scalar 's'") as caught:
        _open(_craft({"tensors": {}, "scalars": {"s": entry}}))
    assert len(str(caught.value)) < MESSAGE_BOUND


def test_scalar_key_is_bounded() -> None:
    with pytest.raises(MetadataError) as caught:
        _open(_craft({"tensors": {}, "scalars": {b"k" * 10**6: {"Int": 1}}}))
    assert len(str(caught.value)) < MESSAGE_BOUND


def test_deeply_nested_content_renders_within_the_depth_limit() -> None:
    nested: Any = 0
    for _ in range(120):  # just inside MAX_CBOR_DEPTH with the maps around it
        nested = [nested]
    with pytest.raises(DescriptorError) as caught:
        _open(_one(nested))
    assert len(str(caught.value)) < MESSAGE_BOUND


def test_scalar_value_errors_from_the_layout_are_bounded() -> None:
    with pytest.raises(ValueError, match="not a valid burnpack scalar") as caught:
        burnpack.Scalar("Int", BIG_LIST)  # type: ignore[arg-type]
    assert len(str(caught.value)) < MESSAGE_BOUND


def test_ordinary_files_still_read() -> None:
    array = np.arange(6, dtype="<f4").reshape(2, 3)
    with _open(burnpack.write_bytes([TensorEntry.from_array("w", array)])) as pack:
        np.testing.assert_array_equal(pack.get("w"), array)
        np.testing.assert_array_equal(pack.get_slice("w")[:, 1:], array[:, 1:])
