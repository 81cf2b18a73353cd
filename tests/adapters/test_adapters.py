"""Adapters: layout conversion, precision, chaining, laziness."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from weightstore import TensorSnapshot
from weightstore.adapters import (
    BurnToPyTorchAdapter,
    FloatCastAdapter,
    HalfPrecisionAdapter,
    IdentityAdapter,
    PyTorchToBurnAdapter,
    burn_module_type,
)
from weightstore.dtypes import from_name
from weightstore.errors import InvalidOptionError


def _snap(name: str, array: np.ndarray[Any, Any], *container: str) -> TensorSnapshot:
    return TensorSnapshot.from_array(name, array, tuple(container))


def _counting(
    name: str, array: np.ndarray[Any, Any], *container: str
) -> tuple[TensorSnapshot, list[int]]:
    calls: list[int] = []

    def load() -> np.ndarray[Any, Any]:
        calls.append(1)
        return array

    snapshot = TensorSnapshot(
        tuple(name.split(".")), from_name("F32"), array.shape, load, container
    )
    return snapshot, calls


@pytest.mark.parametrize(
    ("torch_name", "burn_name"),
    [("Linear", "Linear"), ("NonDynamicallyQuantizableLinear", "Linear"),
     ("BatchNorm2d", "BatchNorm"), ("SyncBatchNorm", "BatchNorm"),
     ("InstanceNorm3d", "InstanceNorm"),
     ("RMSNorm", "RmsNorm"), ("PReLU", "PRelu"), ("ConvTranspose2d", "ConvTranspose2d"),
     ("Struct:Linear", "Linear"), ("MyBlock", "MyBlock"), (None, None)],
)  # fmt: skip
def test_module_type_names(torch_name: str | None, burn_name: str | None) -> None:
    assert burn_module_type(torch_name) == burn_name


@pytest.mark.parametrize("adapter", [PyTorchToBurnAdapter(), BurnToPyTorchAdapter()])
def test_linear_weights_are_transposed_lazily_both_ways(adapter: Any) -> None:
    weight = np.arange(6, dtype=np.float32).reshape(2, 3)
    snapshot, calls = _counting("fc.weight", weight, "Net", "Linear")
    adapted = adapter.adapt(snapshot)
    assert adapted.shape == (3, 2) and calls == []
    np.testing.assert_array_equal(adapted.to_numpy(), weight.T)
    assert adapted.to_numpy().flags.c_contiguous
    assert calls == [1, 1]


def test_linear_bias_conv_and_embedding_pass_through() -> None:
    adapter = PyTorchToBurnAdapter()
    for name, container, shape in [
        ("fc.bias", "Linear", (3,)),
        ("conv.weight", "Conv2d", (4, 2, 3, 3)),
        ("embed.weight", "Embedding", (10, 3)),
    ]:
        snapshot = _snap(name, np.zeros(shape, np.float32), "Net", container)
        assert adapter.adapt(snapshot) is snapshot


def test_attention_out_projection_counts_as_linear() -> None:
    weight = np.zeros((4, 8), np.float32)
    snapshot = _snap("attn.out_proj.weight", weight, "Net", "MultiheadAttention",
                     "NonDynamicallyQuantizableLinear")  # fmt: skip
    assert PyTorchToBurnAdapter().adapt(snapshot).shape == (8, 4)


@pytest.mark.parametrize(
    "norm", ["BatchNorm2d", "LayerNorm", "GroupNorm", "RMSNorm", "InstanceNorm2d"]
)
def test_norm_parameters_are_renamed(norm: str) -> None:
    to_burn, to_torch = PyTorchToBurnAdapter(), BurnToPyTorchAdapter()
    weight = _snap("n.weight", np.ones(4, np.float32), "Net", norm)
    bias = _snap("n.bias", np.ones(4, np.float32), "Net", norm)
    assert to_burn.adapt(weight).full_path == "n.gamma"
    assert to_burn.adapt(bias).full_path == "n.beta"
    gamma = _snap("n.gamma", np.ones(4, np.float32), "Net", norm)
    assert to_torch.adapt(gamma).full_path == "n.weight"
    running = _snap("n.running_mean", np.ones(4, np.float32), "Net", norm)
    assert to_burn.adapt(running).full_path == "n.running_mean"
    assert to_torch.alternative_name("weight", norm) == "gamma"
    assert to_burn.alternative_name("gamma", norm) == "weight"
    assert to_torch.alternative_name("weight", "Linear") is None


def test_half_precision_by_module_type_and_direction() -> None:
    half = HalfPrecisionAdapter()
    linear = _snap("fc.weight", np.full((2, 2), 1 / 3, np.float32), "Net", "Linear")
    converted = half.adapt(linear)
    assert converted.dtype == from_name("F16")
    assert converted.to_numpy().dtype == np.float16
    back = half.adapt(converted)
    assert back.dtype == from_name("F32")
    np.testing.assert_array_equal(back.to_numpy(), np.float32(np.float16(1 / 3)))
    norm = _snap("bn.running_var", np.ones(2, np.float32), "Net", "BatchNorm2d")
    assert half.adapt(norm) is norm  # BatchNorm stays F32
    ints = _snap("fc.steps", np.ones(2, np.int64), "Net", "Linear")
    assert half.adapt(ints) is ints
    top = _snap("w", np.ones(2, np.float32))
    assert half.adapt(top) is top  # no owning module: unchanged


def test_half_precision_module_set_edits() -> None:
    half = HalfPrecisionAdapter().with_module("BatchNorm2d")
    norm = _snap("bn.weight", np.ones(2, np.float32), "Net", "BatchNorm2d")
    assert half.adapt(norm).dtype == from_name("F16")
    fewer = HalfPrecisionAdapter().without_module("Linear")
    linear = _snap("fc.weight", np.ones((2, 2), np.float32), "Net", "Linear")
    assert fewer.adapt(linear) is linear
    with pytest.raises(InvalidOptionError, match="not in the half-precision set"):
        HalfPrecisionAdapter().without_module("BatchNorm")


def test_float_cast_to_bf16_leaves_ints() -> None:
    cast = FloatCastAdapter.to("BF16")
    floats = _snap("a", np.array([1.5, 2.25], np.float32))
    assert cast.adapt(floats).to_numpy().dtype == ml_dtypes.bfloat16
    ints = _snap("b", np.array([1, 2], np.int32))
    assert cast.adapt(ints) is ints
    with pytest.raises(InvalidOptionError, match="float dtype"):
        FloatCastAdapter.to("I32")


def test_chain_applies_in_order_and_passes_alternative_names() -> None:
    chained = PyTorchToBurnAdapter().chain(FloatCastAdapter.to("F16"))
    weight = _snap("fc.weight", np.arange(6, dtype=np.float32).reshape(2, 3), "Net", "Linear")
    out = chained.adapt(weight)
    assert out.shape == (3, 2) and out.to_numpy().dtype == np.float16
    assert chained.alternative_name("gamma", "LayerNorm") == "weight"
    identity = IdentityAdapter().chain(IdentityAdapter())
    assert identity.adapt(weight) is weight


F32, F16, BF16 = from_name("F32"), from_name("F16"), from_name("BF16")


@pytest.mark.parametrize("module", ["BatchNorm2d", "Linear", "MyBlock", "dict"])
def test_half_precision_on_load_gives_each_tensor_the_model_dtype(module: str) -> None:
    # The set decides what a save halves; on load the model decides, so a .half() model's
    # BatchNorm (outside the set: it stays F32 in half files) gets F16, and an F32 model F32.
    half = HalfPrecisionAdapter()
    stats = _snap("bn.running_var", np.full(3, 1 / 3, np.float32), "Net", module)
    into_half = half.adapt_for_load(stats, F16)
    assert into_half.dtype == F16 and into_half.to_numpy().dtype == np.float16
    np.testing.assert_array_equal(into_half.to_numpy(), np.float16(1 / 3))
    assert half.adapt_for_load(stats, F32) is stats  # no round trip through F16
    halved = _snap("bn.weight", np.ones(3, np.float16), "Net", module)
    assert half.adapt_for_load(halved, F32).dtype == F32
    assert half.adapt_for_load(halved, F16) is halved
    assert half.adapt_for_load(stats, BF16) is stats  # not its pair of dtypes


def test_half_precision_on_load_is_lazy() -> None:
    snapshot, calls = _counting("bn.running_mean", np.ones(3, np.float32), "Net", "BatchNorm2d")
    adapted = HalfPrecisionAdapter().adapt_for_load(snapshot, F16)
    assert calls == [] and adapted.dtype == F16
    adapted.to_numpy()
    assert calls == [1]


def test_load_adaptation_defaults_to_adapt_and_chains_with_the_model_dtype() -> None:
    weight = _snap("fc.weight", np.arange(6, dtype=np.float32).reshape(2, 3), "Net", "Linear")
    to_torch = BurnToPyTorchAdapter()
    assert to_torch.adapt_for_load(weight, F16).shape == to_torch.adapt(weight).shape == (3, 2)
    cast = FloatCastAdapter.to("BF16")
    assert cast.adapt_for_load(weight, F32).dtype == BF16  # a cast is a cast, model or not
    chained = BurnToPyTorchAdapter().chain(HalfPrecisionAdapter())
    out = chained.adapt_for_load(weight, F16)
    assert out.shape == (3, 2) and out.to_numpy().dtype == np.float16
    assert IdentityAdapter().adapt_for_load(weight, F16) is weight
