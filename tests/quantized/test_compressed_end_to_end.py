"""A tiny Llama quantized and saved by compressed-tensors, read by weightstore (header,
`recognise` on the config's ``quantization_config``, `dequantize_group`) into its float twin,
gives the logits compressed-tensors' own loaders give, bit for bit.

Why no tolerance: dequantization is one product per element (``(code - zero_point) * scale``,
``fp4 * (scale / global_scale)``) rounded once to the output dtype, and weightstore computes
the same float32 product compressed-tensors does, so the weights are bit-identical, and the
same model code on the same weights and tokens gives the same logits. The oracle per output:

- bf16: transformers' ``from_pretrained(dequantize=True)`` in bfloat16, the Hub route.
- f32: compressed-tensors' decompressors with float32 scales (`_tiny_models`).
  ``from_pretrained`` into a float32 model is no float32 oracle: compressed-tensors dequantizes
  in the scale's dtype (bfloat16), so its weights are our bfloat16 ones widened; the test
  checks that too, and it is why our float32 logits differ from it (by about 1e-3 here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import ml_dtypes
import numpy as np
import pytest

from tests.quantized import _tiny_models as tiny
from weightstore.bridge._torch import array_to_torch
from weightstore.dtypes import from_numpy
from weightstore.quantized import QuantizedGroup, dequantize_group, recognise
from weightstore.safetensors import SafetensorsReader
from weightstore.stores import SafetensorsStore

torch = tiny.torch

OUTPUTS: Final = {"bf16": np.dtype(ml_dtypes.bfloat16), "f32": np.dtype(np.float32)}
TORCH_OF: Final = {"bf16": torch.bfloat16, "f32": torch.float32}
QUANTIZED_LINEARS: Final = 14  # 2 layers x (q, k, v, o, gate, up, down); the head stays float


def load_dequantized(path: Path, model: Any, dtype: str) -> list[QuantizedGroup]:
    """Load the SafeTensors file `path` into `model`, each quantized group dequantized to
    `dtype` (``"bf16"`` or ``"f32"``) by the ``quantization_config`` of the ``config.json``
    beside it, plain tensors cast to their parameter's dtype; returns the groups."""
    config = tiny.quantization_config(path.parent)
    state = {}
    with SafetensorsReader.from_file(path) as reader:
        infos = {name: (dt.name, shape) for name, dt, shape, _ in reader.tensor_infos()}
        groups, plain = recognise(infos, config, path=str(path))
        for group in groups:
            parts = {name: reader.get(name) for name in group.parts}
            values = dequantize_group(group, parts, OUTPUTS[dtype])
            state[group.name] = array_to_torch(values, from_numpy(values.dtype)).clone()
        for name in plain:
            array = reader.get(name)
            state[name] = array_to_torch(array, from_numpy(array.dtype)).clone()
    wanted = model.state_dict()
    model.load_state_dict({k: v.to(wanted[k].dtype) for k, v in state.items()}, strict=True)
    return groups


@pytest.fixture(scope="module", params=sorted(tiny.SCHEMES))
def checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(scheme name, directory, quantized weight names) of one saved checkpoint."""
    directory = tmp_path_factory.mktemp(request.param)
    return request.param, directory, tiny.save_quantized(directory, request.param)


def oracle(directory: Path, weights: list[str], dtype: str) -> Any:
    """The model compressed-tensors dequantizes `directory` into, in `dtype` (docstring)."""
    if dtype == "bf16":
        return tiny.transformers_dequantized(directory, torch.bfloat16)
    return tiny.float32_dequantized(directory, weights)


def assert_bit_identical(ours: Any, expected: Any) -> None:
    assert ours.dtype == expected.dtype and ours.shape == expected.shape
    assert torch.equal(ours, expected), f"max abs diff {(ours - expected).abs().max().item()}"


@pytest.mark.parametrize("dtype", sorted(OUTPUTS))
def test_dequantized_twin_matches_compressed_tensors(checkpoint: Any, dtype: str) -> None:
    scheme, directory, weights = checkpoint
    config = tiny.quantization_config(directory)
    assert config["quant_method"] == "compressed-tensors"
    assert config["format"] == tiny.SCHEMES[scheme].stored_format
    twin = tiny.float_model(TORCH_OF[dtype])
    groups = load_dequantized(directory / "model.safetensors", twin, dtype)

    # every quantized Linear is one group of the scheme's layout: a miss fails here, not later
    assert len(weights) == QUANTIZED_LINEARS
    assert sorted(g.name for g in groups) == sorted(weights)
    assert {g.layout for g in groups} == {tiny.SCHEMES[scheme].layout}

    expected = oracle(directory, weights, dtype)
    ours_state, expected_state = twin.state_dict(), expected.state_dict()
    assert sorted(ours_state) == sorted(expected_state)
    for name in weights:
        assert_bit_identical(ours_state[name], expected_state[name])
    ours, reference = tiny.logits(twin), tiny.logits(expected)
    assert_bit_identical(ours, reference)

    # The quantization is real and the twin sane: the unquantized model's logits differ, by
    # what the codes' width explains (measured: 4% of the largest logit for FP8, 11-14% for
    # the 4-bit schemes); codes loaded as weights, or a layout misread, land far outside.
    float_logits = tiny.logits(tiny.float_model(TORCH_OF[dtype])).float()
    error = (ours.float() - float_logits).abs().max().item()
    assert 0 < error < 0.2 * float_logits.abs().max().item()


def test_transformers_float32_load_is_the_bfloat16_dequantization(checkpoint: Any) -> None:
    """Why `oracle` does not use ``from_pretrained`` for f32: it gives bfloat16 values."""
    _, directory, weights = checkpoint
    twin = tiny.float_model(torch.bfloat16)
    load_dequantized(directory / "model.safetensors", twin, "bf16")
    loaded = tiny.transformers_dequantized(directory, torch.float32).state_dict()
    for name in weights:
        assert_bit_identical(twin.state_dict()[name].float(), loaded[name])


@pytest.mark.skipif(
    not hasattr(SafetensorsStore, "with_dequantize"),
    reason="SafetensorsStore.with_dequantize is not implemented yet",
)
@pytest.mark.parametrize("dtype", sorted(OUTPUTS))
def test_store_with_dequantize_matches_compressed_tensors(checkpoint: Any, dtype: str) -> None:
    scheme, directory, weights = checkpoint
    twin = tiny.float_model(TORCH_OF[dtype])
    store = SafetensorsStore.from_file(directory / "model.safetensors")
    result = store.with_dequantize(dtype).apply_to(twin)
    assert {name: result.quantized[name] for name in weights} == dict.fromkeys(
        weights, tiny.SCHEMES[scheme].layout
    )
    expected = oracle(directory, weights, dtype)
    assert_bit_identical(tiny.logits(twin), tiny.logits(expected))
