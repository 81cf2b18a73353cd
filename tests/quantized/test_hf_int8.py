"""compressed-tensors int-quantized (W8A8 int8) groups: recognised by config and by names,
dequantized bit for bit as compressed-tensors decompresses what its own compressor wrote, and
refused with a `QuantizedLayoutError` naming the codes and the companion at fault."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from weightstore.errors import DTypeError, QuantizedLayoutError
from weightstore.quantized import _hf_pack, dequantize_group, recognise
from weightstore.quantized._hf_int8 import dequantize_int8, rule_int8

NAMES = {"int8": "I8", "int32": "I32", "float32": "F32", "float16": "F16", "bfloat16": "BF16"}


def infos_of(parts: Mapping[str, np.ndarray]) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {k: (NAMES[v.dtype.name], tuple(v.shape)) for k, v in parts.items()}


def config(strategy: str, group_size: int | None = None, fmt: str = "int-quantized") -> Any:
    weights = {"num_bits": 8, "type": "int", "strategy": strategy, "group_size": group_size}
    return {
        "quant_method": "compressed-tensors",
        "format": fmt,
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
    }


def torch_as_numpy(tensor: Any) -> np.ndarray:
    import torch

    if tensor.dtype == torch.bfloat16:
        return np.asarray(tensor.view(torch.uint16).numpy().view(ml_dtypes.bfloat16))
    return np.asarray(tensor.numpy())


def bits_equal(ours: np.ndarray, reference: np.ndarray) -> bool:
    unsigned = {2: np.uint16, 4: np.uint32}[ours.dtype.itemsize]
    return (
        ours.dtype == reference.dtype
        and ours.shape == reference.shape
        and np.array_equal(ours.view(unsigned), reference.view(unsigned))
    )


CASES = [
    (strategy, gs, symmetric, dtype)
    for strategy, gs in (("channel", None), ("tensor", None), ("group", 32))
    for symmetric in (True, False)
    for dtype in ("bfloat16", "float16", "float32")
]


@pytest.mark.parametrize(("strategy", "gs", "symmetric", "dtype"), CASES)
def test_compressed_tensors_decompression_bit_for_bit(
    strategy: str, gs: int | None, symmetric: bool, dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("compressed_tensors")
    from compressed_tensors.compressors.naive_quantized.base import IntQuantizationCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from compressed_tensors.quantization.utils.helpers import calculate_qparams

    monkeypatch.setattr(_hf_pack, "CHUNK_ELEMENTS", 500)  # many chunks, ragged last one
    torch.manual_seed(len(strategy) * 7 + symmetric)
    rows, cols = 37, 96
    torch_dtype = getattr(torch, dtype)
    weight = (torch.randn(rows, cols) * 2).to(torch_dtype)
    args = QuantizationArgs(
        num_bits=8, type="int", strategy=strategy, group_size=gs, symmetric=symmetric
    )
    if strategy == "group":
        blocks = weight.reshape(rows, cols // 32, 32)  # type: ignore[operator]
        low, high = blocks.amin(-1), blocks.amax(-1)
    elif strategy == "channel":
        low, high = weight.amin(-1, keepdim=True), weight.amax(-1, keepdim=True)
    else:
        low, high = weight.amin().reshape(1), weight.amax().reshape(1)
    scale, zero = calculate_qparams(low, high, args)
    activations = QuantizationArgs(num_bits=8, type="int", strategy="token", dynamic=True)
    scheme = QuantizationScheme(targets=["Linear"], weights=args, input_activations=activations)
    state = {"weight": weight, "weight_scale": scale.to(torch_dtype), "weight_zero_point": zero}
    compressed = IntQuantizationCompressor.compress(state, scheme)
    assert compressed["weight"].dtype == torch.int8
    assert ("weight_zero_point" in compressed) == (not symmetric)
    decompressed = IntQuantizationCompressor.decompress(compressed, scheme)
    parts = {f"m.{k}": torch_as_numpy(v) for k, v in compressed.items()}

    [group] = rule_int8(infos_of(parts), config(strategy, gs))
    assert group.layout == "int8" and group.logical_shape == (rows, cols)
    assert group.rule == "quantization_config: compressed-tensors int-quantized"
    assert group.block == {"group": (1, 32), "channel": (1, cols), "tensor": ()}[strategy]
    assert ("zero_point" in group.companions) == (not symmetric)
    wanted = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    assert bits_equal(
        dequantize_group(group, parts, wanted), torch_as_numpy(decompressed["weight"])
    )

    # float32: compressed-tensors computing with float32 scales gives our float32 exactly
    state32 = {**compressed, "weight_scale": compressed["weight_scale"].float()}
    reference32 = IntQuantizationCompressor.decompress(state32, scheme)["weight"].numpy()
    assert bits_equal(dequantize_int8(group, parts), reference32)

    # without the config the names give the same group
    [named] = rule_int8(infos_of(parts), None)
    assert named == group.replace(rule="names: weight I8 + weight_scale")


def parts_of(
    rows: int = 4, cols: int = 8, scale_shape: tuple[int, ...] = (4, 1), zero: bool = False
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    parts = {
        "m.weight": rng.integers(-128, 128, (rows, cols)).astype(np.int8),
        "m.weight_scale": rng.uniform(0.01, 1, scale_shape).astype(np.float32),
    }
    if zero:
        parts["m.weight_zero_point"] = rng.integers(-128, 128, scale_shape).astype(np.int8)
    return parts


@pytest.mark.parametrize(
    ("scale_shape", "block"),
    [((4, 1), (1, 8)), ((4,), (1, 8)), ((4, 2), (1, 4)), ((1,), ()), ((), ())],
)
def test_values_are_code_minus_zero_point_times_scale(
    scale_shape: tuple[int, ...], block: tuple[int, ...]
) -> None:
    parts = parts_of(scale_shape=scale_shape, zero=True)
    [group] = rule_int8(infos_of(parts), None)
    assert group.block == block
    codes, zero, scale = (parts[f"m.{k}"] for k in ("weight", "weight_zero_point", "weight_scale"))
    expected = np.empty((4, 8), np.float32)
    for r in range(4):
        for c in range(8):
            at = (0,) * len(scale_shape) if not block else (r, c // block[1])[: len(scale_shape)]
            difference = np.float32(int(codes[r, c]) - int(zero[at]))
            expected[r, c] = difference * scale[at]  # one float32 rounding
    assert np.array_equal(dequantize_int8(group, parts), expected)


def test_recognised_through_recognise_with_companions() -> None:
    parts = parts_of(zero=True)
    infos = {
        **infos_of(parts),
        "m.input_scale": ("F32", (1,)),
        "m.input_zero_point": ("I8", (1,)),
        "m.bias": ("BF16", (4,)),
    }
    groups, plain = recognise(infos, config("channel"))
    assert plain == ["m.bias"]
    [group] = groups
    assert group.companions == {
        "scale": "m.weight_scale",
        "zero_point": "m.weight_zero_point",
        "input_scale": "m.input_scale",
        "input_zero_point": "m.input_zero_point",
    }


def test_a_config_naming_another_method_or_format_yields_no_group() -> None:
    infos = infos_of(parts_of())
    assert rule_int8(infos, config("channel", fmt="pack-quantized")) == []
    assert rule_int8(infos, {"quant_method": "fp8"}) == []
    float_weights = config("channel")
    float_weights["config_groups"]["group_0"]["weights"]["type"] = "float"
    assert rule_int8(infos, float_weights) == []
    assert len(rule_int8(infos, config("channel", fmt="naive-quantized"))) == 1


def test_names_need_int8_codes_and_weight_scale() -> None:
    assert rule_int8({"m.weight": ("I8", (4, 8))}, None) == []
    assert rule_int8({"m.weight": ("BF16", (4, 8)), "m.weight_scale": ("F32", (4, 1))}, None) == []
    assert rule_int8({"m.weights": ("I8", (4, 8)), "m.weights_scale": ("F32", (4, 1))}, None) == []


@pytest.mark.parametrize(
    ("infos", "companion", "message"),
    [
        ({"m.weight_scale": ("F32", (3, 1))}, "m.weight_scale", "scale shape [3, 1]"),
        ({"m.weight_scale": ("F32", (4, 3))}, "m.weight_scale", "scale shape [4, 3]"),
        ({"m.weight_scale": ("I32", (4, 1))}, "m.weight_scale", "scale is I32"),
        ({"m.weight_zero_point": ("F32", (4, 1))}, "m.weight_zero_point", "zero point is F32"),
        ({"m.weight_zero_point": ("I8", (4, 2))}, "m.weight_zero_point", "zero point shape"),
    ],
)
def test_parts_that_disagree_are_refused(
    infos: dict[str, Any], companion: str, message: str
) -> None:
    base = {"m.weight": ("I8", (4, 8)), "m.weight_scale": ("F32", (4, 1)), **infos}
    with pytest.raises(QuantizedLayoutError, match=re.escape(message)) as caught:
        recognise(base, None, path="model.safetensors")
    error = caught.value
    assert (error.group, error.codes, error.companion) == ("m.weight", "m.weight", companion)
    assert "model.safetensors" in str(error) and companion in str(error)


def test_a_scale_no_configured_strategy_implies_is_refused() -> None:
    infos = infos_of(parts_of(scale_shape=(4, 2)))  # per group of 4, config says channel
    with pytest.raises(QuantizedLayoutError, match="none of the config's weight strategies"):
        rule_int8(infos, config("channel"))


def test_dequantize_checks_parts_before_allocating() -> None:
    parts = parts_of()
    [group] = rule_int8(infos_of(parts), None)
    bad = {**parts, "m.weight_scale": np.ones((3, 1), np.float32)}
    with pytest.raises(QuantizedLayoutError, match="scale shape"):
        dequantize_int8(group, bad)
    with pytest.raises(QuantizedLayoutError, match="codes are"):
        dequantize_int8(group, {**parts, "m.weight": parts["m.weight"].astype(np.int32)})
    with pytest.raises(QuantizedLayoutError, match="needs its part"):
        dequantize_int8(group, {"m.weight": parts["m.weight"]})
    with pytest.raises(DTypeError):
        dequantize_int8(group, parts, np.int8)


def test_bfloat16_output_is_the_float32_rounded_and_zero_rows_work() -> None:
    parts = parts_of(rows=64, cols=96, scale_shape=(64, 3), zero=True)
    [group] = rule_int8(infos_of(parts), None)
    f32 = dequantize_int8(group, parts)
    assert bits_equal(
        dequantize_int8(group, parts, ml_dtypes.bfloat16), f32.astype(ml_dtypes.bfloat16)
    )
    empty = {"m.weight": np.zeros((0, 8), np.int8), "m.weight_scale": np.ones((1,), np.float32)}
    [none] = rule_int8(infos_of(empty), None)
    assert dequantize_int8(none, empty).shape == (0, 8)
