"""Hostile GGUF files, built by hand (`tests.gguf._handmade`): each refusal is a typed error
that names the file, the tensor where one is at fault, and the cause.

Every limit of `weightstore.gguf._layout` is tried at its value (the file passes, or fails
only for a later reason asserted here: the bytes the count promises are not there) and one
past it (`LimitExceeded` naming what). Files are opened from disk in both read modes, so the
pread source's windowed header reads are covered as well as the mapping.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import weightstore
from tests.gguf._handmade import (
    ARRAY,
    BOOL,
    F32,
    F64,
    I16,
    I64,
    STRING,
    U8,
    U16,
    U32,
    U64,
    array,
    gguf,
    info,
    kv,
    scalar,
    string,
    strings,
)
from weightstore import formats
from weightstore.errors import (
    DescriptorError,
    DTypeError,
    HeaderError,
    LfsPointerError,
    LimitExceeded,
    MetadataError,
    NotWeightsError,
    SliceError,
    TruncatedError,
    UnsupportedVersionError,
    WeightstoreError,
)
from weightstore.gguf import GgufReader
from weightstore.gguf import _header as header_module
from weightstore.gguf._layout import (
    MAX_ALIGNMENT,
    MAX_ARRAY_DEPTH,
    MAX_ARRAY_LENGTH,
    MAX_KV_COUNT,
    MAX_STRING_SIZE,
    MAX_TENSOR_COUNT,
    MAX_TENSOR_DIMS,
)

F32_ID, F16_ID, Q8_0_ID, BF16_ID = 0, 1, 8, 30  # ggml type ids
Q8_0_BLOCK = 34  # bytes of one Q8_0 block (32 elements)
MODES = ("mmap", "pread")


def _write(tmp_path: Path, data: bytes, name: str = "model.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _refused(
    tmp_path: Path, data: bytes, error: type[WeightstoreError], *words: str, tensor: Any = None
) -> Any:
    """The error opening `data` raises, the same in both read modes, naming the file, `tensor`
    and every one of `words`."""
    path = _write(tmp_path, data)
    caught: list[WeightstoreError] = []
    for mode in MODES:
        with pytest.raises(error) as raised:
            GgufReader.from_file(path, mode=mode)
        err = raised.value
        assert err.path == str(path) and str(path) in str(err), mode
        assert err.tensor == tensor, mode
        for word in words:
            assert word in str(err), (mode, word, str(err))
        caught.append(err)
    assert str(caught[0]) == str(caught[1])
    return caught[0]


def _opens(tmp_path: Path, data: bytes) -> list[GgufReader]:
    path = _write(tmp_path, data)
    return [GgufReader.from_file(path, mode=mode) for mode in MODES]


def _limit(err: LimitExceeded, what: str, found: int, limit: int) -> None:
    assert (err.what, err.found, err.limit) == (what, found, limit)


def _rich_file(order: str = "<") -> bytes:
    """Every value type, a nested array, plain and quantized tensors, an empty one, alignment
    64: the file the prefix loop cuts."""
    kvs = [
        kv("general.alignment", U32, scalar(U32, 64, order), order),
        kv("general.name", STRING, string("tiny", order), order),
        kv("u8", U8, scalar(U8, 7, order), order),
        kv("i16", I16, scalar(I16, -3, order), order),
        kv("u64", U64, scalar(U64, 2**64 - 1, order), order),
        kv("i64", I64, scalar(I64, -(2**63), order), order),
        kv("f32", F32, scalar(F32, 0.5, order), order),
        kv("f64", F64, scalar(F64, -1.25, order), order),
        kv("ok", BOOL, scalar(BOOL, True, order), order),
        kv("tokens", ARRAY, strings(["a", "bb", "", "ü"], order), order),
        kv("scores", ARRAY, array(F32, [0.0, -1.5], order), order),
        kv(
            "nested",
            ARRAY,
            array(ARRAY, [array(U16, [1, 2], order), array(STRING, ["x"], order)], order),
            order,
        ),
    ]
    infos = [
        info("w", [4, 2], F32_ID, 0, order),
        info("q", [32, 2], Q8_0_ID, 64, order),
        info("e", [0], F32_ID, 192, order),
        info("h", [3], F16_ID, 192, order),
    ]
    data = np.arange(8, dtype=order + "f4").tobytes() + bytes(32)
    data += bytes(2 * Q8_0_BLOCK) + bytes(128 - 2 * Q8_0_BLOCK)
    data += np.ones(3, order + "f2").tobytes()
    return gguf(kvs, infos, data, order=order, alignment=64)


# -- truncation ------------------------------------------------------------------------------------


def _touch_everything(reader: GgufReader) -> None:
    reader.metadata()
    for name in reader.names():
        reader.get_raw(name)
        if not reader.descriptor(name).quantized:
            reader.get(name)


@pytest.mark.parametrize("order", ["<", ">"])
def test_every_prefix_opens_or_raises_a_typed_error_naming_the_file(
    tmp_path: Path, order: str
) -> None:
    data = _rich_file(order)
    path = tmp_path / "model.gguf"
    kinds: set[str] = set()
    for size in range(len(data) + 1):
        path.write_bytes(data[:size])
        for mode in MODES:
            try:
                with GgufReader.from_file(path, mode=mode) as reader:
                    _touch_everything(reader)
            except WeightstoreError as err:  # anything else fails the test as it is
                assert err.path == str(path), (size, mode, err)
                kinds.add(type(err).__name__)
            else:
                assert size == len(data), (size, mode)  # only the whole file opens
    assert {"TruncatedError", "HeaderError", "NotWeightsError"} <= kinds


def test_the_rich_file_reads_as_gguf_py_reads_it(tmp_path: Path) -> None:
    gguf_py = pytest.importorskip("gguf")
    path = _write(tmp_path, _rich_file())
    oracle = gguf_py.GGUFReader(path)
    with GgufReader.from_file(path) as reader:
        assert reader.names() == [t.name for t in oracle.tensors]
        assert reader.metadata()["tokens"] == ["a", "bb", "", "ü"]
        assert reader.metadata()["nested"] == [[1, 2], ["x"]]
        assert reader.metadata()["u64"] == oracle.fields["u64"].parts[-1][0] == 2**64 - 1
        np.testing.assert_array_equal(reader.get("w"), oracle.tensors[0].data)
        np.testing.assert_array_equal(reader.get_raw("q"), oracle.tensors[1].data)


def test_a_file_shorter_than_the_fixed_header_is_a_header_error(tmp_path: Path) -> None:
    err = _refused(tmp_path, b"GGUF\x03\x00\x00\x00" + bytes(8), HeaderError, "16 bytes")
    assert "24-byte GGUF header" in str(err)


# -- counts, lengths, depth and dims: at the limit and one past it --------------------------------


def test_tensor_count_at_the_limit_reads_on_and_one_past_is_refused(tmp_path: Path) -> None:
    err = _refused(tmp_path, gguf(tensor_count=MAX_TENSOR_COUNT), TruncatedError, "tensor infos")
    err = _refused(tmp_path, gguf(tensor_count=MAX_TENSOR_COUNT + 1), LimitExceeded)
    _limit(err, "tensor count", MAX_TENSOR_COUNT + 1, MAX_TENSOR_COUNT)


def test_kv_count_at_the_limit_reads_on_and_one_past_is_refused(tmp_path: Path) -> None:
    _refused(tmp_path, gguf(kv_count=MAX_KV_COUNT), TruncatedError, "GGUF metadata")
    err = _refused(tmp_path, gguf(kv_count=MAX_KV_COUNT + 1), LimitExceeded)
    _limit(err, "metadata pair count", MAX_KV_COUNT + 1, MAX_KV_COUNT)


def test_kv_count_at_the_limit_with_every_pair_present_opens(tmp_path: Path) -> None:
    pairs = [kv(f"k{i}", U8, b"\x01") for i in range(MAX_KV_COUNT)]
    for reader in _opens(tmp_path, gguf(pairs)):
        assert len(reader.metadata_keys()) == MAX_KV_COUNT
        reader.close()


def _long(length: int) -> bytes:
    return struct.pack("<Q", length)


@pytest.mark.parametrize(
    ("place", "what"),
    [
        ("key", "metadata key length"),
        ("value", "'k' string length"),
        ("element", "'k' string length"),
        ("name", "tensor name length"),
    ],
)
def test_string_length_at_the_limit_reads_on_and_one_past_is_refused(
    tmp_path: Path, place: str, what: str
) -> None:
    def file(length: int) -> bytes:
        if place == "key":
            return gguf(kv_count=1, alignment=1) + _long(length)
        if place == "value":
            return gguf([kv("k", STRING, _long(length))])
        if place == "element":
            return gguf([kv("k", ARRAY, struct.pack("<IQ", STRING, 1) + _long(length))])
        return gguf(tensor_count=1, alignment=1) + _long(length)

    _refused(tmp_path, file(MAX_STRING_SIZE), TruncatedError)  # the bytes are not there
    err = _refused(tmp_path, file(MAX_STRING_SIZE + 1), LimitExceeded)
    _limit(err, what, MAX_STRING_SIZE + 1, MAX_STRING_SIZE)


@pytest.mark.parametrize("element", [U8, STRING, ARRAY])
def test_array_length_at_the_limit_reads_on_and_one_past_is_refused(
    tmp_path: Path, element: int
) -> None:
    def file(count: int) -> bytes:
        return gguf([kv("k", ARRAY, struct.pack("<IQ", element, count))])

    _refused(tmp_path, file(MAX_ARRAY_LENGTH), TruncatedError, "GGUF metadata")
    err = _refused(tmp_path, file(MAX_ARRAY_LENGTH + 1), LimitExceeded)
    _limit(err, "array length of 'k'", MAX_ARRAY_LENGTH + 1, MAX_ARRAY_LENGTH)


def _nested(depth: int) -> bytes:
    """An array value nested `depth` levels deep, a u8 array innermost."""
    value = array(U8, [5])
    for _ in range(depth - 1):
        value = array(ARRAY, [value])
    return value


def test_array_nesting_at_the_limit_opens_and_one_past_is_refused(tmp_path: Path) -> None:
    for reader in _opens(tmp_path, gguf([kv("k", ARRAY, _nested(MAX_ARRAY_DEPTH))])):
        value: Any = reader.metadata()["k"]
        for _ in range(MAX_ARRAY_DEPTH - 1):
            (value,) = value
        assert value == [5]
        reader.close()
    err = _refused(tmp_path, gguf([kv("k", ARRAY, _nested(MAX_ARRAY_DEPTH + 1))]), LimitExceeded)
    _limit(err, "array nesting of 'k'", MAX_ARRAY_DEPTH + 1, MAX_ARRAY_DEPTH)


def test_dims_count_at_the_limit_opens_and_one_past_is_refused(tmp_path: Path) -> None:
    dims = [2] * MAX_TENSOR_DIMS
    data = gguf([], [info("t", dims)], np.zeros(16, "f4").tobytes())
    for reader in _opens(tmp_path, data):
        assert reader.get("t").shape == (2,) * MAX_TENSOR_DIMS
        reader.close()
    data = gguf([], [info("t", [2] * (MAX_TENSOR_DIMS + 1))], np.zeros(32, "f4").tobytes())
    err = _refused(tmp_path, data, LimitExceeded, tensor="t")
    _limit(err, "dimension count", MAX_TENSOR_DIMS + 1, MAX_TENSOR_DIMS)


# -- sizes that overflow ---------------------------------------------------------------------------


def test_a_dim_past_int64_is_refused(tmp_path: Path) -> None:
    data = gguf([], [info("t", [2**63])], bytes(32))
    _refused(tmp_path, data, DescriptorError, "9,223,372,036,854,775,808", "int64", tensor="t")


def test_an_element_count_past_int64_is_refused(tmp_path: Path) -> None:
    data = gguf([], [info("t", [2**62, 2**62, 2**62, 2**62])], bytes(32))
    err = _refused(tmp_path, data, LimitExceeded, tensor="t")
    _limit(err, "element count", 2**248, 2**63 - 1)


def test_a_byte_size_past_int64_is_refused(tmp_path: Path) -> None:
    data = gguf([], [info("t", [2**61])], bytes(32))  # F32: 2**63 bytes
    err = _refused(tmp_path, data, LimitExceeded, tensor="t")
    _limit(err, "tensor size in bytes", 2**63, 2**63 - 1)


# -- alignment ---------------------------------------------------------------------------------


def _aligned(value_type: int, payload: bytes) -> bytes:
    return gguf([kv("general.alignment", value_type, payload)])


@pytest.mark.parametrize("alignment", [0, 3, 48, -32])
def test_an_alignment_that_is_not_a_power_of_two_is_refused(tmp_path: Path, alignment: int) -> None:
    _refused(tmp_path, _aligned(I64, scalar(I64, alignment)), MetadataError, "not a power of two")


@pytest.mark.parametrize(
    ("value_type", "payload"),
    [(BOOL, b"\x01"), (F32, scalar(F32, 32.0)), (STRING, string("32")), (ARRAY, array(U32, [32]))],
)
def test_an_alignment_that_is_not_an_integer_is_refused(
    tmp_path: Path, value_type: int, payload: bytes
) -> None:
    _refused(tmp_path, _aligned(value_type, payload), MetadataError, "general.alignment")


def test_alignment_at_the_limit_opens_and_past_it_is_refused(tmp_path: Path) -> None:
    entry = info("t", [8], F32_ID, 0)
    data = gguf([kv("general.alignment", U32, scalar(U32, MAX_ALIGNMENT))], [entry])
    data += bytes(MAX_ALIGNMENT - len(data)) + np.arange(8, dtype="f4").tobytes()
    for reader in _opens(tmp_path, data):
        assert reader.data_start == MAX_ALIGNMENT and reader.get("t")[7] == 7
        reader.close()
    for alignment in (MAX_ALIGNMENT + 1, MAX_ALIGNMENT * 2):
        err = _refused(tmp_path, _aligned(U64, scalar(U64, alignment)), LimitExceeded)
        _limit(err, "alignment", alignment, MAX_ALIGNMENT)


# -- tensor infos that lie ------------------------------------------------------------------------


def test_a_tensor_past_the_end_of_the_file_is_refused(tmp_path: Path) -> None:
    data = gguf([], [info("a", [4], F32_ID, 0), info("b", [4], F32_ID, 32)], bytes(40))
    _refused(tmp_path, data, TruncatedError, "tensor data", "8 missing", tensor="b")
    data = gguf([], [info("far", [1], F32_ID, 2**64 - 32)], bytes(32))
    _refused(tmp_path, data, TruncatedError, "tensor data", tensor="far")


def test_overlapping_tensors_are_refused_naming_both(tmp_path: Path) -> None:
    data = gguf([], [info("a", [16], F32_ID, 0), info("b", [4], F32_ID, 32)], bytes(64))
    _refused(tmp_path, data, DescriptorError, "overlap", "'a'", tensor="b")


def test_empty_tensors_may_share_an_offset(tmp_path: Path) -> None:
    data = gguf([], [info("a", [0], F32_ID, 0), info("b", [0, 3], F32_ID, 0)], b"")
    for reader in _opens(tmp_path, data):
        assert reader.get("b").shape == (3, 0)
        reader.close()


def test_a_misaligned_offset_is_refused(tmp_path: Path) -> None:
    data = gguf([], [info("a", [4], F32_ID, 16)], bytes(64))
    _refused(tmp_path, data, DescriptorError, "offset 16", "alignment 32", tensor="a")


@pytest.mark.parametrize("type_id", [4, 5, 31, 77, 2**32 - 1])  # 4, 5: Q4_2, Q4_3, long gone
def test_an_unknown_ggml_type_is_refused_by_id(tmp_path: Path, type_id: int) -> None:
    data = gguf([], [info("t", [32], type_id, 0)], bytes(64))
    _refused(tmp_path, data, DTypeError, f"ggml type id {type_id}", tensor="t")


@pytest.mark.parametrize(("dims", "inner"), [([31], "31"), ([48, 2], "48"), ([], "1")])
def test_a_row_that_is_not_whole_blocks_is_refused(
    tmp_path: Path, dims: list[int], inner: str
) -> None:
    data = gguf([], [info("q", dims, Q8_0_ID, 0)], bytes(4 * Q8_0_BLOCK))
    _refused(tmp_path, data, DescriptorError, "Q8_0", "32 elements", inner, tensor="q")


def test_a_duplicate_tensor_name_is_refused(tmp_path: Path) -> None:
    data = gguf([], [info("t", [1], F32_ID, 0), info("t", [1], F32_ID, 32)], bytes(64))
    _refused(tmp_path, data, DescriptorError, "appears twice", tensor="t")


def test_a_tensor_name_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    data = gguf([], [info(b"blk.\xff", [1], F32_ID, 0)], bytes(32))
    _refused(tmp_path, data, DescriptorError, "tensor name", "not UTF-8", "\\xff")


# -- metadata that lies ---------------------------------------------------------------------------


@pytest.mark.parametrize("value_type", [13, 255, 2**32 - 1])
def test_an_unknown_value_type_is_refused(tmp_path: Path, value_type: int) -> None:
    data = gguf([kv("general.x", value_type, b"")])
    _refused(tmp_path, data, MetadataError, "'general.x'", f"value type {value_type}")


def test_an_unknown_array_element_type_is_refused_even_nested(tmp_path: Path) -> None:
    flat = gguf([kv("k", ARRAY, struct.pack("<IQ", 13, 0))])
    _refused(tmp_path, flat, MetadataError, "'k'", "array of value type 13")
    nested = gguf([kv("k", ARRAY, array(ARRAY, [struct.pack("<IQ", 99, 0)]))])
    _refused(tmp_path, nested, MetadataError, "'k'", "array of value type 99")


def test_a_duplicate_key_is_refused(tmp_path: Path) -> None:
    data = gguf([kv("general.name", STRING, string("a")), kv("general.name", U8, b"\x01")])
    _refused(tmp_path, data, MetadataError, "'general.name'", "appears twice")


def test_a_key_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    _refused(tmp_path, gguf([kv(b"k\xc3", U8, b"\x01")]), MetadataError, "not UTF-8", "\\xc3")


def test_a_string_value_that_is_not_utf8_survives_as_escapes(tmp_path: Path) -> None:
    # A byte-level token is not UTF-8; it is kept, not refused (a rewrite gives the bytes back).
    data = gguf([kv("k", STRING, string(b"\xff")), kv("v", ARRAY, strings([b"\xfe"]))])
    for reader in _opens(tmp_path, data):
        assert reader.metadata() == {"k": "\udcff", "v": ["\udcfe"]}
        reader.close()


# -- versions and other files ----------------------------------------------------------------------


@pytest.mark.parametrize("order", ["<", ">"])
def test_gguf_version_1_is_refused_as_long_gone(tmp_path: Path, order: str) -> None:
    _refused(tmp_path, gguf(version=1, order=order), HeaderError, "version 1", "llama.cpp")


def test_gguf_version_4_is_refused_as_newer(tmp_path: Path) -> None:
    err = _refused(tmp_path, gguf(version=4), UnsupportedVersionError, "version is 4")
    assert (err.found, err.supported) == (4, 3)


def test_gguf_version_0_is_refused_as_damage_not_as_newer(tmp_path: Path) -> None:
    # Regression: it read "format version is 0, newest supported is 3; upgrade weightstore".
    err = _refused(tmp_path, gguf(version=0), HeaderError, "version 0", "damaged")
    assert not isinstance(err, UnsupportedVersionError)


def test_version_2_and_big_endian_version_3_open(tmp_path: Path) -> None:
    for data, order in ((gguf(version=2), "<"), (gguf(order=">"), ">")):
        for reader in _opens(tmp_path, data):
            assert reader.byte_order == order and reader.names() == []
            reader.close()


def _openers() -> list[Callable[[Path], Any]]:
    openers: list[Callable[[Path], Any]] = [formats.detect_format, GgufReader.from_file]
    open_reader = getattr(weightstore, "open_reader", None)
    if open_reader is not None:
        openers.append(open_reader)
    return openers


@pytest.mark.parametrize("magic", [b"lmgg", b"tjgg", b"fmgg", b"algg"])
def test_legacy_ggml_files_are_named_as_such(tmp_path: Path, magic: bytes) -> None:
    path = _write(tmp_path, magic + struct.pack("<I", 1) + bytes(64))
    for opener in _openers():
        with pytest.raises(NotWeightsError) as caught:
            opener(path)
        assert caught.value.cause == "ggml" and caught.value.path == str(path)
        assert "legacy GGML" in str(caught.value)


def test_a_git_lfs_pointer_named_model_gguf_is_named_as_such(tmp_path: Path) -> None:
    pointer = (
        b"version https://git-lfs.github.com/spec/v1\n"
        b"oid sha256:" + b"ab" * 32 + b"\nsize 4368439584\n"
    )
    path = _write(tmp_path, pointer)
    for opener in _openers():
        with pytest.raises(LfsPointerError) as caught:
            opener(path)
        assert caught.value.path == str(path) and caught.value.size == 4368439584


def test_an_empty_file_named_model_gguf_says_empty(tmp_path: Path) -> None:
    path = _write(tmp_path, b"")
    with pytest.raises(NotWeightsError) as caught:
        GgufReader.from_file(path)
    assert caught.value.cause == "empty"


# -- a vocabulary is not decoded at open ----------------------------------------------------------


def test_a_256k_token_vocabulary_opens_without_decoding_a_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    count = 256_000
    tokens = [f"tok{i}".encode() for i in range(count)]
    data = gguf(
        [
            kv("general.name", STRING, string("vocab")),
            kv("tokenizer.ggml.tokens", ARRAY, strings(tokens)),
        ]
    )
    decoded: list[bytes] = []
    real = header_module.decode_text

    def counting(raw: bytes) -> str:
        decoded.append(raw)
        return real(raw)

    monkeypatch.setattr(header_module, "decode_text", counting)
    for reader in _opens(tmp_path, data):
        decoded.clear()
        key = "tokenizer.ggml.tokens"
        assert reader.metadata_length(key) == count
        assert reader.metadata_type(key) == "array[string]"
        assert reader.metadata_keys() == ["general.name", key]
        assert decoded == []  # opening and asking about the array decoded none of it
        values = reader.metadata()[key]
        assert len(decoded) == count and values[-1] == "tok255999"  # type: ignore[index]
        reader.close()


# -- slices ---------------------------------------------------------------------------------------


def _quantized_file() -> bytes:
    return gguf([], [info("q", [32, 2], Q8_0_ID, 0)], bytes(2 * Q8_0_BLOCK))


@pytest.mark.parametrize(
    "key", [2, -3, (0, 32), (slice(0, 1, 0),), (slice("a"),), (0, 0, 0), 0.5, (..., ...)]
)
def test_a_bad_index_of_a_quantized_tensor_is_a_slice_error(tmp_path: Path, key: Any) -> None:
    # Regression: an index out of range or a zero step let NumPy's IndexError or ValueError out
    # of the raw blocks' indexing, before anything was dequantized.
    for reader in _opens(tmp_path, _quantized_file()):
        with pytest.raises(SliceError) as caught:
            reader.get_slice("q")[key]
        assert caught.value.tensor == "q" and caught.value.path == reader.path
        reader.close()


@pytest.mark.parametrize("key", [4, (slice(None), 0), (slice(0, 2, 0),), "x"])
def test_a_bad_index_of_a_byte_swapped_tensor_is_a_slice_error(tmp_path: Path, key: Any) -> None:
    # Regression: a big-endian plain tensor is sliced from its swapped copy, and NumPy's
    # IndexError came out as it was.
    data = gguf([], [info("h", [4], F16_ID, 0, ">")], np.ones(4, ">f2").tobytes(), order=">")
    for reader in _opens(tmp_path, data):
        assert reader.get_slice("h")[1:3].tolist() == [1.0, 1.0]
        with pytest.raises(SliceError) as caught:
            reader.get_slice("h")[key]
        assert caught.value.tensor == "h"
        reader.close()


def test_a_quantized_slice_in_range_reads_the_rows_raw(tmp_path: Path) -> None:
    # What get_slice hands the kernels is checked without them: the selected rows' blocks.
    for reader in _opens(tmp_path, _quantized_file()):
        assert reader.get_raw("q").shape == (2, Q8_0_BLOCK)
        assert reader.get_slice("q").shape == (2, 32)
        reader.close()


# -- the command line --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "cause"),
    [
        (gguf(tensor_count=MAX_TENSOR_COUNT + 1), "tensor count"),
        (gguf([], [info("t", [31], Q8_0_ID, 0)], bytes(64)), "innermost dimension 31"),
        (gguf([], [info("t", [4], 77, 0)], bytes(64)), "ggml type id 77"),
        (gguf(version=1), "version 1"),
        (b"lmgg" + bytes(60), "legacy GGML"),
    ],
    ids=["tensor-count", "row", "ggml-type", "version-1", "legacy"],
)
@pytest.mark.parametrize("command", [["verify"], ["inspect"], ["inspect", "--json"]])
def test_the_cli_refuses_a_hostile_file_in_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes, cause: str, command: list[str]
) -> None:
    from weightstore import cli

    path = _write(tmp_path, data)
    assert cli.main([*command, str(path)]) == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("weightstore: error: "), lines
    assert str(path) in lines[0] and cause in out + err
