"""A GGUF file's quantized tensors load into a JAX tree in the parameter's dtype."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("flax")

import jax.numpy as jnp  # noqa: E402

from weightstore import GgufStore  # noqa: E402
from weightstore.bridge import load_tree  # noqa: E402
from weightstore.entry import TensorEntry  # noqa: E402
from weightstore.gguf import GgufReader, GgufWriter  # noqa: E402


def test_quantized_kernels_load_into_a_bf16_jax_tree(tmp_path: Path) -> None:
    kernel = np.linspace(-1, 1, 4 * 64, dtype=np.float32).reshape(4, 64)
    path = tmp_path / "net.gguf"
    bias = kernel[0].copy()
    entries = [TensorEntry.from_array("fc.kernel", kernel), TensorEntry.from_array("fc.bias", bias)]
    GgufWriter(entries, quantize="Q8_0").save(path)
    with GgufReader.from_file(path) as reader:
        assert reader.ggml_type("fc.kernel").name == "Q8_0"
        expected = reader.get("fc.kernel", "BF16")
    abstract = {
        "fc": {
            "kernel": jax.ShapeDtypeStruct((4, 64), jnp.bfloat16),
            "bias": jax.ShapeDtypeStruct((64,), jnp.float32),
        }
    }
    loaded, result = load_tree(abstract, GgufStore.from_file(path))
    assert result.is_success(), result
    assert result.quantized == {"fc.kernel": "Q8_0"}
    assert loaded["fc"]["kernel"].dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(loaded["fc"]["kernel"]), expected)
