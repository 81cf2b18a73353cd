"""GGUF through the stores: loads into models, GGUF-to-GGUF copies that keep blocks, quantizing
saves, and the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from weightstore import GgufStore, SafetensorsStore, Store, save_into
from weightstore.entry import TensorEntry
from weightstore.errors import InvalidOptionError
from weightstore.gguf import GgufReader, GgufWriter

RNG = np.random.default_rng(7)


def _kernels() -> None:
    pytest.importorskip("weightstore.quantized._ggml_kernels", reason="kernels not merged yet")


def _q8_blocks(rows: int, blocks_per_row: int) -> np.ndarray[Any, Any]:
    """Random Q8_0 blocks whose f16 scales are finite: 2 scale bytes, 32 int8 codes."""
    blocks = RNG.integers(0, 256, (rows * blocks_per_row, 34), dtype=np.uint8)
    scales = (RNG.random(rows * blocks_per_row) * 0.01).astype(np.float16)
    blocks[:, :2] = scales.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, blocks_per_row * 34)


def _quantized_file(path: Path) -> dict[str, Any]:
    """A file with one Q8_0 weight (4 x 64) and a plain F32 bias; its blocks, by name."""
    blocks = _q8_blocks(4, 2)
    bias = np.arange(4, dtype=np.float32)
    entries = [
        TensorEntry("fc.weight", _f32(), (4, 64), b"", nbytes=0, blocks=("Q8_0", lambda: blocks)),
        TensorEntry.from_array("fc.bias", bias),
    ]
    GgufWriter(entries, {"general.architecture": "toy"}).save(path)
    return {"fc.weight": blocks, "fc.bias": bias}


def _f32() -> Any:
    from weightstore.dtypes import from_name

    return from_name("F32")


def test_a_gguf_to_gguf_copy_keeps_the_blocks_byte_for_byte(tmp_path: Path) -> None:
    source = tmp_path / "q.gguf"
    written = _quantized_file(source)
    target = tmp_path / "copy.gguf"
    save_into(
        Store.from_file(source),
        GgufStore.from_file(target).with_key_remapping(r"^fc\.", "blk.0.ffn."),
    )
    with GgufReader.from_file(target) as reader:
        assert sorted(reader.names()) == ["blk.0.ffn.bias", "blk.0.ffn.weight"]
        assert reader.ggml_type("blk.0.ffn.weight").name == "Q8_0"
        assert reader.get_raw("blk.0.ffn.weight").tobytes() == written["fc.weight"].tobytes()


def test_a_quantized_tensor_loads_in_the_models_dtype(tmp_path: Path) -> None:
    _kernels()
    source = tmp_path / "q.gguf"
    _quantized_file(source)
    with GgufReader.from_file(source) as reader:
        values = reader.get("fc.weight")
    model = {
        "fc": {
            "weight": np.zeros((4, 64), ml_dtypes.bfloat16),
            "bias": np.zeros(4, np.float32),
        }
    }
    result = GgufStore.from_file(source).apply_to(model)
    assert result.is_success(), result
    assert result.quantized == {"fc.weight": "Q8_0"}  # the report names the source's type
    assert "Decoded from quantized:     1 tensor (Q8_0 x1)" in str(result)
    assert model["fc"]["weight"].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(model["fc"]["weight"], values.astype(ml_dtypes.bfloat16))
    f32_model = {"fc": {"weight": np.zeros((4, 64), np.float32), "bias": np.zeros(4, np.float32)}}
    GgufStore.from_file(source).apply_to(f32_model)
    np.testing.assert_array_equal(f32_model["fc"]["weight"], values)


def test_a_plain_tensor_still_refuses_a_narrowing_load(tmp_path: Path) -> None:
    _kernels()
    source = tmp_path / "q.gguf"
    _quantized_file(source)
    model = {"fc": {"weight": np.zeros((4, 64), np.float32), "bias": np.zeros(4, np.float16)}}
    result = GgufStore.from_file(source).validate(False).apply_to(model)
    assert [error.path for error in result.errors] == ["fc.bias"]  # F32 -> F16 would narrow


def test_gguf_converts_to_safetensors_as_values(tmp_path: Path) -> None:
    _kernels()
    source = tmp_path / "q.gguf"
    _quantized_file(source)
    target = tmp_path / "out.safetensors"
    save_into(Store.from_file(source), SafetensorsStore.from_file(target))
    with GgufReader.from_file(source) as reader, Store.from_file(target) as _:
        from weightstore.safetensors import SafetensorsReader

        with SafetensorsReader.from_file(target) as converted:
            np.testing.assert_array_equal(converted.get("fc.weight"), reader.get("fc.weight"))


def test_quantize_on_save(tmp_path: Path) -> None:
    pytest.importorskip("weightstore.quantized._ggml_quantize", reason="kernels not merged yet")
    gguf = pytest.importorskip("gguf", reason="gguf-py is the oracle")
    weight = RNG.standard_normal((8, 64)).astype(np.float32)
    norm = RNG.standard_normal(64).astype(np.float32)
    odd = RNG.standard_normal((3, 5)).astype(np.float32)
    model = {"w": weight, "norm": norm, "odd": odd}
    for kind in ("q8_0", "q4_0"):
        path = tmp_path / f"{kind}.gguf"
        save_into(model, GgufStore.from_file(path).with_quantize(kind))
        with GgufReader.from_file(path) as reader:
            assert reader.ggml_type("w").name == kind.upper()
            assert reader.ggml_type("norm").name == "F32"  # 1-D: kept, as llama.cpp keeps it
            assert reader.ggml_type("odd").name == "F32"  # rows of 5: no whole blocks
            qtype = gguf.GGMLQuantizationType[kind.upper()]
            expected = gguf.quants.quantize(weight, qtype)
            assert reader.get_raw("w").tobytes() == expected.tobytes()


def test_quantize_is_a_gguf_option_of_two_types(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match="q8_0 or q4_0"):
        GgufStore.from_file(tmp_path / "a.gguf").with_quantize("q4_k")
    with pytest.raises(InvalidOptionError, match="no option 'quantize'"):
        SafetensorsStore.from_file(tmp_path / "a.safetensors").with_quantize("q8_0")


def test_convert_keeps_metadata_types_gguf_to_gguf(tmp_path: Path) -> None:
    from weightstore import cli
    from weightstore.gguf import GgufValue, ValueType

    source = tmp_path / "typed.gguf"
    metadata = {
        "general.architecture": GgufValue(ValueType.STRING, "llama"),
        "llama.block_count": GgufValue(ValueType.UINT32, 32),
        "llama.rope.freq_base": GgufValue(ValueType.FLOAT32, 10000.0),
        "tokenizer.ggml.tokens": GgufValue(ValueType.ARRAY, ["a", "b"], ValueType.STRING),
    }
    entries = [TensorEntry.from_array("w", np.ones((2, 32), np.float32))]
    GgufWriter(entries, metadata).save(source)
    target = tmp_path / "copy.gguf"
    assert cli.main(["convert", str(source), str(target), "--quiet"]) == 0
    with GgufReader.from_file(target) as reader:
        assert reader.metadata_typed() == metadata  # uint32 stays uint32, arrays stay arrays
    into_safetensors = tmp_path / "out.safetensors"
    assert cli.main(["convert", str(source), str(into_safetensors), "--quiet"]) == 0
    from weightstore.safetensors import SafetensorsReader

    with SafetensorsReader.from_file(into_safetensors) as converted:
        carried = converted.metadata()
    assert carried["llama.block_count"] == "32"  # scalars as strings
    assert "tokenizer.ggml.tokens" not in carried  # arrays stay behind


def test_with_metadata_takes_typed_values_for_gguf_only(tmp_path: Path) -> None:
    from weightstore.gguf import GgufValue, ValueType

    path = tmp_path / "m.gguf"
    store = GgufStore.from_file(path).with_metadata("llama.block_count", 2)
    store = store.with_metadata("exact", GgufValue(ValueType.UINT16, 5))
    save_into({"w": np.zeros((2, 32), np.float32)}, store)
    with GgufReader.from_file(path) as reader:
        assert reader.metadata_value("llama.block_count") == GgufValue(ValueType.INT32, 2)
        assert reader.metadata_value("exact") == GgufValue(ValueType.UINT16, 5)
    with pytest.raises(InvalidOptionError, match="str -> str"):
        SafetensorsStore.from_file(tmp_path / "m.safetensors").with_metadata("n", 2)  # type: ignore[arg-type]


def test_a_save_holds_one_tensor_at_a_time(tmp_path: Path) -> None:
    import gc
    import weakref

    alive: list[weakref.ref[np.ndarray[Any, Any]]] = []

    def produce(index: int) -> np.ndarray[Any, Any]:
        gc.collect()
        assert all(ref() is None for ref in alive), f"tensor {index - 1} still held"
        array = np.full((64, 64), index, np.float32)
        alive.append(weakref.ref(array))
        return array

    entries = [TensorEntry(f"t{i}", _f32(), (64, 64), lambda i=i: produce(i)) for i in range(5)]
    path = tmp_path / "streamed.gguf"
    GgufWriter(entries).save(path)
    with GgufReader.from_file(path) as reader:
        assert [float(reader.get(f"t{i}")[0, 0]) for i in range(5)] == [0, 1, 2, 3, 4]
