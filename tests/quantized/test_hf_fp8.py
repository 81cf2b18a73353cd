"""FP8 dequantization agrees bit for bit with its references: transformers' ``Fp8Dequantize``
and ``_dequantize_fp8_weight``, torch's Hugging Face DCP reader, and compressed-tensors'
``dequantize``, on data their own quantizers (or DeepSeek's rule, for partial edge blocks)
produced, on every code under special scales, and across chunk edges; bad parts are refused
before anything is allocated."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tests._optional import need
from tests.quantized._hf_oracles import (
    NUMPY_OF,
    OUTPUTS,
    as_numpy,
    assert_same_values,
    dcp_dequantized,
    deepseek_quantize,
    torch,
    write_hf_checkpoint,
)
from weightstore.errors import DTypeError, QuantizedLayoutError
from weightstore.quantized import QuantizedGroup, dequantize_group
from weightstore.quantized._hf_fp8 import dequantize_fp8

finegrained = need("transformers.integrations.finegrained_fp8")


def transformers_quantize(weight: Any, scale_fmt: str | None = None) -> tuple[Any, Any]:
    """transformers' own FP8 quantizer (``Fp8Quantize``, 128x128 blocks)."""
    config = SimpleNamespace(weight_block_size=(128, 128), scale_fmt=scale_fmt)
    quantizer = finegrained.Fp8Quantize(SimpleNamespace(quantization_config=config))
    out = quantizer._quantize_one("w.weight", weight)
    return out["w.weight"], out["w.weight_scale_inv"]


def reference(codes: Any, scale: Any, output: str) -> Any:
    """transformers' ``Fp8Dequantize``: float32 product, rounded once to the output."""
    dequantizer = finegrained.Fp8Dequantize(None)
    return dequantizer._dequantize_one(codes, scale, output_dtype=getattr(torch, output))


@pytest.mark.parametrize("output", OUTPUTS)
@pytest.mark.parametrize("shape", [(256, 384), (128, 128), (4, 256, 128)])
def test_transformers_quantized_blocks_match_fp8_dequantize(
    shape: tuple[int, ...], output: str
) -> None:
    weight = torch.randn(*shape, generator=torch.Generator().manual_seed(1)) * 3
    codes, scale = transformers_quantize(weight)
    ours = dequantize_fp8(as_numpy(codes), as_numpy(scale), (128, 128), NUMPY_OF[output])
    assert_same_values(ours, reference(codes, scale, output))


@pytest.mark.parametrize("scale_fmt", ["ue8m0"])
def test_ue8m0_scales_match_fp8_dequantize(scale_fmt: str) -> None:
    weight = torch.randn(256, 256, generator=torch.Generator().manual_seed(2))
    codes, scale = transformers_quantize(weight, scale_fmt)
    assert scale.dtype == torch.float8_e8m0fnu
    ours = dequantize_fp8(as_numpy(codes), as_numpy(scale), (128, 128))
    assert_same_values(ours, reference(codes, scale, "float32"))


def test_e8m0_exponent_bytes_match_fp8_dequantize() -> None:
    """MXFP8's uint8 exponents: ``2**(byte - 127)``, every byte (255 is infinity there)."""
    codes = torch.arange(256, dtype=torch.uint8).repeat(256, 1).view(torch.float8_e4m3fn)
    exponents = torch.arange(256, dtype=torch.uint8).reshape(256, 1).repeat(1, 8)
    ours = dequantize_fp8(as_numpy(codes), as_numpy(exponents), (1, 32))
    assert_same_values(ours, reference(codes, exponents, "float32"))


@pytest.mark.parametrize(
    "shape", [(300, 500), (1, 1), (129, 257), (2, 130, 260), (127, 4100), (600, 2049)]
)
def test_partial_edge_blocks_match_dequantize_fp8_weight(shape: tuple[int, ...]) -> None:
    """DeepSeek's rule with edge blocks; (127, 4100) and (600, 2049) make chunks of fewer rows
    than a block, so chunk edges fall inside block rows."""
    weight = torch.randn(*shape, generator=torch.Generator().manual_seed(3))
    codes, scale = deepseek_quantize(weight)
    expected = finegrained._dequantize_fp8_weight(codes, scale, [128, 128], torch.float32)
    assert_same_values(dequantize_fp8(as_numpy(codes), as_numpy(scale), (128, 128)), expected)


@pytest.mark.parametrize("output", OUTPUTS)
def test_every_code_under_special_scales_matches_torch(output: str) -> None:
    """All 256 E4M3 codes (NaN included) times zero, subnormal, huge, infinite and NaN scales."""
    specials = [0.0, -0.0, 1e-45, 1e-38, 3.0e38, float("inf"), float("nan"), 0.5, 1e-3]
    codes = torch.arange(256, dtype=torch.uint8).repeat(len(specials), 1).view(torch.float8_e4m3fn)
    scale = torch.tensor(specials, dtype=torch.float32).reshape(-1, 1)
    expected = (codes.to(torch.float32) * scale).to(getattr(torch, output))
    assert_same_values(dequantize_fp8(as_numpy(codes), as_numpy(scale), (1, 256), output), expected)


def test_e5m2_codes_match_torch() -> None:
    codes = torch.arange(256, dtype=torch.uint8).reshape(2, 128).view(torch.float8_e5m2)
    scale = torch.tensor([[0.25]], dtype=torch.float32)
    expected = codes.to(torch.float32) * 0.25
    assert_same_values(dequantize_fp8(as_numpy(codes), as_numpy(scale), (128, 128)), expected)


@pytest.mark.parametrize("output", OUTPUTS)
def test_partial_blocks_match_torch_dcp_reader(tmp_path: Path, output: str) -> None:
    weight = torch.randn(300, 260, generator=torch.Generator().manual_seed(4))
    codes, scale = deepseek_quantize(weight)
    write_hf_checkpoint(tmp_path, {"a.weight": codes, "a.weight_scale_inv": scale})
    loaded = dcp_dequantized(tmp_path, {"a.weight": (300, 260)}, getattr(torch, output))
    ours = dequantize_fp8(as_numpy(codes), as_numpy(scale), (128, 128), NUMPY_OF[output])
    assert_same_values(ours, loaded["a.weight"])


@pytest.mark.parametrize("scale_dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("strategy", ["tensor", "channel"])
def test_compressed_tensors_float_quantized_matches_its_dequantize(
    strategy: str, scale_dtype: str
) -> None:
    """compressed-tensors computes in the scale's dtype: for a bfloat16 scale its result is
    the float32 product rounded once, so our bfloat16 output equals it bit for bit."""
    forward = need("compressed_tensors.quantization.lifecycle.forward")
    quantization = need("compressed_tensors.quantization")
    args = quantization.QuantizationArgs(num_bits=8, type="float", strategy=strategy)
    weight = torch.randn(96, 160, generator=torch.Generator().manual_seed(5))
    amax = weight.abs().amax().reshape(1) if strategy == "tensor" else weight.abs().amax(1, True)
    scale = (amax / 448.0).to(getattr(torch, scale_dtype))
    codes = forward.quantize(weight, scale, None, args, dtype=torch.float8_e4m3fn)
    expected = forward.dequantize(codes, scale, None, args)
    block = () if strategy == "tensor" else (1, 160)
    ours = dequantize_fp8(as_numpy(codes), as_numpy(scale), block, NUMPY_OF[scale_dtype])
    assert_same_values(ours, expected)


def test_one_scale_spelled_as_a_scalar_or_one_element() -> None:
    codes = np.arange(256, dtype=np.uint8).reshape(16, 16).view(ml_dtypes.float8_e4m3fn)
    expected = codes.astype(np.float32) * np.float32(0.125)
    for scale in (np.float32(0.125).reshape(()), np.array([0.125], np.float32)):
        assert_same_values(dequantize_fp8(codes, scale, ()), expected)


def test_one_scale_for_stacked_experts() -> None:
    codes = np.ones((3, 4, 5), ml_dtypes.float8_e4m3fn)
    out = dequantize_fp8(codes, np.array([2.0], np.float32), ())
    assert out.shape == (3, 4, 5) and np.all(out == 2.0)


def test_empty_codes_give_an_empty_output() -> None:
    codes = np.empty((0, 7), ml_dtypes.float8_e4m3fn)
    out = dequantize_fp8(codes, np.empty((0, 1), np.float32), (128, 128))
    assert out.shape == (0, 7) and out.dtype == np.float32


def _group(scale_shape: tuple[int, ...] = (3, 4)) -> QuantizedGroup:
    return QuantizedGroup(
        name="a.weight",
        layout="fp8-block",
        codes="a.weight",
        companions={"scale": "a.weight_scale_inv"},
        logical_shape=(300, 500),
        block=(128, 128),
        rule="test",
    )


def _parts(**changes: np.ndarray) -> dict[str, np.ndarray]:
    parts = {
        "a.weight": np.zeros((300, 500), ml_dtypes.float8_e4m3fn),
        "a.weight_scale_inv": np.ones((3, 4), np.float32),
    }
    parts.update({name.replace("__", "."): value for name, value in changes.items()})
    return parts


def test_group_dequantizes_through_the_registry() -> None:
    parts = _parts()
    parts["a.weight"][0, 0] = 1.0
    out = dequantize_group(_group(), parts, ml_dtypes.bfloat16)
    assert out.dtype == ml_dtypes.bfloat16 and out[0, 0] == 1.0 and out.sum() == 1.0


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ({"a__weight_scale_inv": np.ones((3, 3), np.float32)}, "need [3, 4]"),
        ({"a__weight_scale_inv": np.ones((3, 4), np.int32)}, "scale is I32"),
        ({"a__weight": np.zeros((300, 500), np.float32)}, "codes are F32"),
        ({"a__weight": np.zeros((300, 501), ml_dtypes.float8_e4m3fn)}, "group's is [300, 500]"),
    ],
)
def test_inconsistent_parts_are_refused_naming_both(bad: dict, words: str) -> None:
    with pytest.raises(QuantizedLayoutError) as caught:
        dequantize_group(_group(), _parts(**bad))
    assert words in str(caught.value) and caught.value.group == "a.weight"
    assert caught.value.codes == "a.weight" and "a.weight" in str(caught.value)


def test_scale_shape_is_checked_before_allocating() -> None:
    """A scale that disagrees with codes claiming an enormous shape fails at the check."""
    huge = np.lib.stride_tricks.as_strided(
        np.zeros(1, ml_dtypes.float8_e4m3fn), shape=(1 << 20, 1 << 20), strides=(0, 0)
    )
    with pytest.raises(QuantizedLayoutError, match="need"):
        dequantize_fp8(huge, np.ones((2, 2), np.float32), (128, 128))


def test_a_missing_part_is_named() -> None:
    parts = _parts()
    del parts["a.weight_scale_inv"]
    with pytest.raises(QuantizedLayoutError) as caught:
        dequantize_group(_group(), parts)
    assert caught.value.companion == "a.weight_scale_inv"


def test_unknown_layout_and_output_dtype_are_refused() -> None:
    group = QuantizedGroup(
        name="w", layout="fp12", codes="w", companions={}, logical_shape=(1,), block=(),
        rule="test",
    )  # fmt: skip
    with pytest.raises(QuantizedLayoutError, match="fp12"):
        dequantize_group(group, {})
    with pytest.raises(DTypeError, match="float32, bfloat16 and float16"):
        dequantize_group(_group(), _parts(), np.int8)


def test_a_non_positive_block_is_refused() -> None:
    codes = np.zeros((4, 4), ml_dtypes.float8_e4m3fn)
    with pytest.raises(QuantizedLayoutError, match="positive"):
        dequantize_fp8(codes, np.ones((1, 1), np.float32), (0, 4))


@pytest.mark.parametrize("output", OUTPUTS)
def test_memory_is_the_output_plus_one_chunk(output: str) -> None:
    """A 16-bit output never goes through a float32 copy of the whole tensor: 4 M elements
    (16 MiB as float32) peak at the output plus a chunk's few MiB."""
    import tracemalloc

    codes = np.ones((1024, 4096), ml_dtypes.float8_e4m3fn)
    scale = np.ones((8, 32), np.float32)
    tracemalloc.start()
    try:
        dequantize_fp8(codes, scale, (128, 128), NUMPY_OF[output])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < codes.size * NUMPY_OF[output].itemsize + (4 << 20), peak
