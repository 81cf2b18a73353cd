"""The ggml type table against gguf-py's: every id it defines, with its name and block sizes."""

from __future__ import annotations

import pytest

from weightstore.errors import DTypeError
from weightstore.quantized import GGML_TYPES, ggml_type, ggml_type_named

gguf = pytest.importorskip("gguf", reason="gguf-py (llama.cpp's gguf package) is the oracle")


def test_every_type_gguf_py_defines_is_in_the_table() -> None:
    ours = {t.id: (t.name, t.block_size, t.type_size) for t in GGML_TYPES.values()}
    theirs = {
        int(kind): (kind.name, *gguf.GGML_QUANT_SIZES[kind]) for kind in gguf.GGMLQuantizationType
    }
    assert ours == theirs


def test_plain_types_are_the_ones_with_one_element_blocks() -> None:
    plain = {t.name for t in GGML_TYPES.values() if not t.quantized}
    assert plain == {"F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64"}
    assert all(t.block_size == 1 for t in GGML_TYPES.values() if not t.quantized)


def test_an_unknown_id_or_name_is_refused_by_name() -> None:
    with pytest.raises(DTypeError, match="unknown ggml type id 4") as caught:
        ggml_type(4, path="m.gguf", tensor="w")  # Q4_2, removed from ggml
    assert (caught.value.path, caught.value.tensor) == ("m.gguf", "w")
    assert ggml_type_named("q4_k").name == "Q4_K"
    with pytest.raises(DTypeError, match="known: F32, F16"):
        ggml_type_named("Q9_9")
