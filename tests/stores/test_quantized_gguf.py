"""Quantized groups across SafeTensors and GGUF: an MXFP4 pair converts to a ggml MXFP4 tensor
and back byte for byte, never through values; layouts GGUF has no type for are refused by a
message naming ``--dequantize``, and go through with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tests._optional import need
from weightstore import GgufStore, SafetensorsStore
from weightstore.errors import InvalidOptionError
from weightstore.gguf import GgufReader
from weightstore.quantized import dequantize_group

RNG = np.random.default_rng(26)


def _mxfp4_file(path: Path) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    blocks = RNG.integers(0, 256, (2, 6, 4, 16), dtype=np.uint8)
    scales = RNG.integers(110, 140, (2, 6, 4), dtype=np.uint8)
    model = {
        "experts": {"down_blocks": blocks, "down_scales": scales},
        "norm": np.linspace(0, 1, 6, dtype=np.float32),
    }
    SafetensorsStore.from_file(str(path)).collect_from(model)
    return blocks, scales


def test_an_mxfp4_pair_becomes_one_ggml_mxfp4_tensor_and_back(tmp_path: Path) -> None:
    blocks, scales = _mxfp4_file(tmp_path / "m.safetensors")
    source = SafetensorsStore.from_file(str(tmp_path / "m.safetensors"))
    (group,) = source.quantized_groups()
    GgufStore.from_file(str(tmp_path / "m.gguf")).collect_from(source)

    with GgufReader.from_file(str(tmp_path / "m.gguf")) as reader:
        assert sorted(reader.names()) == ["experts.down", "norm"]
        assert reader.descriptor("experts.down").ggml.name == "MXFP4"
        values = reader.get("experts.down")
    expected = dequantize_group(
        group, {"experts.down_blocks": blocks, "experts.down_scales": scales}
    )
    # ggml's value table has +0.0 where E2M1's code 8 is -0.0: equal as numbers, not as bits.
    np.testing.assert_array_equal(values, expected)

    back = tmp_path / "back.safetensors"
    SafetensorsStore.from_file(str(back)).collect_from(
        GgufStore.from_file(str(tmp_path / "m.gguf"))
    )
    reread = SafetensorsStore.from_file(str(back))
    assert reread.get_tensor("experts.down_blocks").to_numpy().tobytes() == blocks.tobytes()
    assert reread.get_tensor("experts.down_scales").to_numpy().tobytes() == scales.tobytes()
    assert [g.layout for g in reread.quantized_groups()] == ["mxfp4"]


def test_gguf_py_reads_the_repacked_tensor(tmp_path: Path) -> None:
    gguf = need("gguf")
    _mxfp4_file(tmp_path / "m.safetensors")
    source = SafetensorsStore.from_file(str(tmp_path / "m.safetensors"))
    GgufStore.from_file(str(tmp_path / "m.gguf")).collect_from(source)
    (tensor,) = [t for t in gguf.GGUFReader(str(tmp_path / "m.gguf")).tensors if "down" in t.name]
    assert tensor.tensor_type == gguf.GGMLQuantizationType.MXFP4
    values = gguf.quants.dequantize(np.asarray(tensor.data), tensor.tensor_type)
    ours = source.with_dequantize("f32").get_tensor("experts.down").to_numpy()
    np.testing.assert_array_equal(values.reshape(ours.shape), ours)


def test_a_layout_gguf_has_no_type_for_is_refused_then_dequantized(tmp_path: Path) -> None:
    codes = RNG.standard_normal((256, 128)).astype(ml_dtypes.float8_e4m3fn)
    scale = RNG.random((2, 1)).astype(np.float32)
    path = tmp_path / "fp8.safetensors"
    SafetensorsStore.from_file(str(path)).collect_from(
        {"fc": {"weight": codes, "weight_scale_inv": scale}}
    )
    source = SafetensorsStore.from_file(str(path))
    assert [g.layout for g in source.quantized_groups()] == ["fp8-block"]
    target = tmp_path / "fp8.gguf"
    with pytest.raises(InvalidOptionError, match=r"no block type for fp8-block.*--dequantize"):
        GgufStore.from_file(str(target)).collect_from(source)
    assert not target.exists()  # refused before anything was written

    GgufStore.from_file(str(target)).collect_from(source.with_dequantize("f32"))
    (group,) = source.quantized_groups()
    expected = dequantize_group(group, {"fc.weight": codes, "fc.weight_scale_inv": scale})
    with GgufReader.from_file(str(target)) as reader:
        assert reader.names() == ["fc.weight"]
        np.testing.assert_array_equal(reader.get("fc.weight"), expected)


def test_a_gguf_store_read_dequantized_gives_values_and_saves_them(tmp_path: Path) -> None:
    weights = RNG.standard_normal((4, 64)).astype(np.float32)
    quantized = tmp_path / "q8.gguf"
    GgufStore.from_file(str(quantized)).with_quantize("q8_0").collect_from({"a": {"w": weights}})
    store = GgufStore.from_file(str(quantized))
    values = store.get_tensor("a.w").to_numpy()
    decoded = store.with_dequantize("bf16").get_tensor("a.w")
    assert decoded.dtype.name == "BF16"
    np.testing.assert_array_equal(decoded.to_numpy(), values.astype(ml_dtypes.bfloat16))

    kept, plain = tmp_path / "kept.gguf", tmp_path / "plain.gguf"
    GgufStore.from_file(str(kept)).collect_from(store)
    GgufStore.from_file(str(plain)).collect_from(store.with_dequantize("f16"))
    with GgufReader.from_file(str(kept)) as reader:
        assert reader.descriptor("a.w").ggml.name == "Q8_0"  # blocks copied as they are
    with GgufReader.from_file(str(plain)) as reader:
        assert reader.descriptor("a.w").ggml.name == "F16"  # the values, as asked
        np.testing.assert_array_equal(reader.get("a.w"), values.astype(np.float16))
