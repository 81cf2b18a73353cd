"""The SafeTensors byte layout: golden bytes, header padding, the package's tensor order."""

from __future__ import annotations

import numpy as np
import pytest

from weightstore import safetensors
from weightstore.dtypes import ALL_DTYPES, from_safetensors
from weightstore.entry import TensorEntry
from weightstore.safetensors._layout import (
    DTYPE_RANK,
    JsonObject,
    TensorDescriptor,
    decode_header,
    encode_header,
    padded_header_size,
    write_rank,
)

ONE_F32_TENSOR = (
    bytes.fromhex("38 00 00 00 00 00 00 00")  # header_size 56 (u64 LE)
    + b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'  # 54 bytes of JSON
    + b"  "  # padded to 56, so the data starts at 64
    + bytes.fromhex("00 00 80 3f 00 00 00 40")  # 1.0f, 2.0f
)

EMPTY_FILE = bytes.fromhex("08 00 00 00 00 00 00 00") + b"{}      "  # as the package writes it


def test_one_f32_tensor_is_byte_exact() -> None:
    written = safetensors.write_bytes([TensorEntry.from_array("w", np.array([1.0, 2.0], "<f4"))])
    assert written.hex(" ") == ONE_F32_TENSOR.hex(" ")  # a failure shows which field moved


def test_no_tensors_is_byte_exact() -> None:
    assert safetensors.write_bytes([]).hex(" ") == EMPTY_FILE.hex(" ")


def test_metadata_comes_first_and_empty_metadata_is_kept() -> None:
    descriptor = TensorDescriptor("w", from_safetensors("U8"), (1,), (0, 1))
    assert encode_header([descriptor], {}).startswith(b'{"__metadata__":{},"w":')
    assert encode_header([descriptor], None).startswith(b'{"w":')
    header = encode_header([], {"b": "2", "a": "1"})
    assert header.rstrip() == b'{"__metadata__":{"a":"1","b":"2"}}'  # keys sorted


def test_header_is_padded_with_spaces_to_eight() -> None:
    for json_size in range(1, 40):
        assert padded_header_size(json_size) % 8 == 0
        assert 0 <= padded_header_size(json_size) - json_size < 8
    header = encode_header([], {"k": "xyz"})  # 28 bytes of JSON
    assert header == b'{"__metadata__":{"k":"xyz"}}    '


def test_text_is_raw_utf8_and_control_characters_are_escaped() -> None:
    header = encode_header([], {"é": '\n\x1f\x7f"'})
    assert header.rstrip() == '{"__metadata__":{"é":"\\n\\u001f\x7f\\""}}'.encode()


def test_rank_orders_every_safetensors_dtype_in_the_table() -> None:
    names = {d.safetensors for d in ALL_DTYPES if d.safetensors}
    assert names <= set(DTYPE_RANK)
    assert len(set(DTYPE_RANK)) == len(DTYPE_RANK)


def test_write_rank_is_the_package_enum_order_not_alphabetical() -> None:
    # Observed from safetensors 0.8: U64, I64, F64, C64, F32, U32, I32, BF16, F16, U16, I16, ...
    names = ["U8", "BOOL", "F16", "BF16", "I64", "F64", "U64", "C64", "F8_E4M3", "F8_E5M2"]
    ordered = sorted(names, key=lambda n: write_rank(from_safetensors(n), "x"))
    assert ordered == ["U64", "I64", "F64", "C64", "BF16", "F16", "F8_E4M3", "F8_E5M2", "U8",
                       "BOOL"]  # fmt: skip
    same = from_safetensors("F32")
    assert write_rank(same, "a") < write_rank(same, "b")


def test_decode_keeps_pairs_and_duplicates() -> None:
    top = decode_header(b'{"a":{"x":1},"a":[1,2]}  ')
    assert isinstance(top, JsonObject)
    assert list(top) == [("a", JsonObject([("x", 1)])), ("a", [1, 2])]


@pytest.mark.parametrize(
    "block",
    [b'{"a":NaN}', b'{"a":-Infinity}', b' {"a":1}', b"[1]", b"{", b'{"a":1} x', b"\xff{}"],
)
def test_decode_refuses_what_is_not_one_json_object(block: bytes) -> None:
    with pytest.raises(ValueError):  # UnicodeDecodeError is a ValueError too
        decode_header(block)


def test_public_names_are_pinned() -> None:
    assert safetensors.__all__ == [
        "DATA_ALIGNMENT", "DTYPE_RANK", "EXTENSION", "FORMAT", "MAX_HEADER_SIZE", "METADATA_KEY",
        "PREFIX_SIZE", "SafetensorsReader", "SafetensorsWriter", "TensorDescriptor",
        "TensorSlice", "write_bytes", "write_file",
    ]  # fmt: skip
    for name in safetensors.__all__:
        assert hasattr(safetensors, name), name
