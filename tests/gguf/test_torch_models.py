"""A GGUF file's quantized tensors load into a torch module in the parameter's dtype."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from weightstore import GgufStore, load_from
from weightstore.entry import TensorEntry
from weightstore.gguf import GgufReader, GgufWriter

torch = pytest.importorskip("torch", reason="the torch extra is not installed")


def test_quantized_weights_load_into_a_bf16_linear(tmp_path: Path) -> None:
    weight = np.linspace(-2, 2, 8 * 64, dtype=np.float32).reshape(8, 64)  # (out, in)
    bias = np.arange(8, dtype=np.float32)
    path = tmp_path / "linear.gguf"
    entries = [TensorEntry.from_array("weight", weight), TensorEntry.from_array("bias", bias)]
    GgufWriter(entries, quantize="Q4_0").save(path)
    with GgufReader.from_file(path) as reader:
        assert reader.ggml_type("weight").name == "Q4_0"
        expected = reader.get("weight", "BF16")
    linear = torch.nn.Linear(64, 8, dtype=torch.bfloat16)
    linear.bias.data = linear.bias.data.float()  # the F32 bias loads into an F32 bias
    result = load_from(linear, GgufStore.from_file(path))
    assert result.is_success(), result
    assert result.quantized == {"weight": "Q4_0"}
    assert linear.weight.dtype == torch.bfloat16
    got = linear.weight.detach().view(torch.int16).numpy()
    assert np.array_equal(got, expected.view(np.int16))  # the same bf16 bits
    np.testing.assert_array_equal(linear.bias.detach().numpy(), bias)


def test_a_meta_module_loads_quantized_weights(tmp_path: Path) -> None:
    weight = np.linspace(-2, 2, 8 * 64, dtype=np.float32).reshape(8, 64)
    path = tmp_path / "linear.gguf"
    GgufWriter([TensorEntry.from_array("weight", weight)], quantize="Q8_0").save(path)
    with torch.device("meta"):
        linear = torch.nn.Linear(64, 8, bias=False)
    result = load_from(linear, GgufStore.from_file(path), device="cpu")
    assert result.is_success(), result
    assert linear.weight.device.type == "cpu"
    with GgufReader.from_file(path) as reader:
        np.testing.assert_array_equal(linear.weight.detach().numpy(), reader.get("weight"))
