"""Stores read quantized groups: `quantized_groups()` per layout, keys as parts or logical
names, `with_dequantize` into torch, NumPy and JAX models equal to `dequantize_group` of the
parts, without a float32 copy for 16-bit targets, and loads without it refused naming the
layout and the option. Files are written here (weightstore's writer, ml_dtypes F8 codes), with
a ``config.json`` beside them where the layout is bound to one."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tests._optional import need
from weightstore.errors import InvalidOptionError, LoadFailedError
from weightstore.quantized import QuantizedGroup, dequantize_group
from weightstore.stores import BurnpackStore, PytorchStore, SafetensorsStore

BF16 = np.dtype(ml_dtypes.bfloat16)
RNG = np.random.default_rng(0)


def fp8(shape: tuple[int, ...]) -> np.ndarray:
    return RNG.normal(0, 1, shape).astype(ml_dtypes.float8_e4m3fn)


def floats(shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    return RNG.uniform(0.01, 1, shape).astype(dtype)


def write(directory: Path, tensors: dict[str, np.ndarray], config: Any = None) -> Path:
    """`tensors` saved as ``directory/model.safetensors``, `config` as the ``config.json``'s
    ``quantization_config`` beside it."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "model.safetensors"
    SafetensorsStore.from_file(path).collect_from(tensors)
    if config is not None:
        (directory / "config.json").write_text(json.dumps({"quantization_config": config}))
    return path


def ct_config(fmt: str, weights: dict[str, Any]) -> dict[str, Any]:
    return {
        "quant_method": "compressed-tensors",
        "format": fmt,
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
    }


def int_packed(rows: int, cols: int) -> dict[str, np.ndarray]:
    """An int4 pack-quantized group ``m.weight`` in groups of 32 (codes 0, 8 words a row)."""
    return {
        "m.weight_packed": RNG.integers(-(2**31), 2**31, (rows, cols // 8)).astype(np.int32),
        "m.weight_scale": floats((rows, cols // 32), BF16),
        "m.weight_shape": np.array([rows, cols], np.int64),
    }


def nvfp4(rows: int, cols: int) -> dict[str, np.ndarray]:
    return {
        "m.weight_packed": RNG.integers(0, 256, (rows, cols // 2)).astype(np.uint8),
        "m.weight_scale": floats((rows, cols // 16)).astype(ml_dtypes.float8_e4m3fn),
        "m.weight_global_scale": np.array([448.0 * 6], np.float32),
    }


# layout id -> (tensors, quantization_config or None, logical name -> (layout, shape, block))
LAYOUTS: dict[str, tuple[dict[str, np.ndarray], Any, dict[str, Any]]] = {
    "fp8-block-config": (
        {"m.weight": fp8((300, 200)), "m.weight_scale_inv": floats((3, 2))},
        {"quant_method": "fp8", "weight_block_size": [128, 128]},
        {"m.weight": ("fp8-block", (300, 200), (128, 128))},
    ),
    "fp8-block-names": (
        {"m.weight": fp8((300, 200)), "m.weight_scale_inv": floats((3, 2))},
        None,
        {"m.weight": ("fp8-block", (300, 200), (128, 128))},
    ),
    "fp8-channel-ct": (
        {"m.weight": fp8((8, 64)), "m.weight_scale": floats((8, 1), BF16)},
        ct_config("float-quantized", {"type": "float", "num_bits": 8, "strategy": "channel"}),
        {"m.weight": ("fp8-channel", (8, 64), (1, 64))},
    ),
    "fp8-tensor-ct": (
        {"m.weight": fp8((8, 64)), "m.weight_scale": floats((1,)), "m.input_scale": floats((1,))},
        ct_config("float-quantized", {"type": "float", "num_bits": 8, "strategy": "tensor"}),
        {"m.weight": ("fp8-tensor", (8, 64), ())},
    ),
    "mxfp4": (
        {
            "e.gate_up_proj_blocks": RNG.integers(0, 256, (2, 4, 3, 16)).astype(np.uint8),
            "e.gate_up_proj_scales": RNG.integers(120, 130, (2, 4, 3)).astype(np.uint8),
        },
        {"quant_method": "mxfp4"},
        {"e.gate_up_proj": ("mxfp4", (2, 4, 96), (1, 1, 32))},
    ),
    "nvfp4": (
        nvfp4(4, 64),
        ct_config("nvfp4-pack-quantized", {"type": "float", "num_bits": 4, "group_size": 16}),
        {"m.weight": ("nvfp4", (4, 64), (1, 16))},
    ),
    "int-pack": (
        int_packed(4, 64),
        None,  # by names: the bits from weight_shape's values
        {"m.weight": ("int-pack", (4, 64), (1, 32))},
    ),
    "int8": (
        {
            "m.weight": RNG.integers(-128, 128, (4, 64)).astype(np.int8),
            "m.weight_scale": floats((4, 1), BF16),
        },
        ct_config("int-quantized", {"type": "int", "num_bits": 8, "strategy": "channel"}),
        {"m.weight": ("int8", (4, 64), (1, 64))},
    ),
}


@pytest.fixture(params=sorted(LAYOUTS))
def checkpoint(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """(path, stored tensors, expected groups) of one layout's file, with a bf16 bias."""
    tensors, config, expected = LAYOUTS[request.param]
    tensors = {**tensors, "norm.weight": floats((5,), BF16)}
    return write(tmp_path / request.param, tensors, config), tensors, expected


def test_quantized_groups_name_each_layout(checkpoint: Any) -> None:
    path, tensors, expected = checkpoint
    groups = SafetensorsStore.from_file(path).quantized_groups()
    assert {g.name: (g.layout, g.logical_shape, g.block) for g in groups} == expected
    parts = {part for g in groups for part in g.parts}
    assert parts == set(tensors) - {"norm.weight"}  # every companion found, none extra


def test_keys_list_parts_and_with_dequantize_logical_names(checkpoint: Any) -> None:
    path, tensors, expected = checkpoint
    store = SafetensorsStore.from_file(path)
    assert store.keys() == sorted(tensors)
    assert store.with_dequantize("bf16").keys() == sorted([*expected, "norm.weight"])
    snapshot = store.with_dequantize("bf16").get_tensor(next(iter(expected)))
    assert snapshot is not None and snapshot.dtype.name == "BF16"
    assert snapshot.shape == next(iter(expected.values()))[1]


def expected_values(path: Path, dtype: Any) -> dict[str, np.ndarray]:
    """Each group's values by `dequantize_group` of its parts as the file holds them."""
    store = SafetensorsStore.from_file(path)
    reader = store.reader()
    return {
        g.name: dequantize_group(g, {p: reader.get(p) for p in g.parts}, dtype)
        for g in store.quantized_groups()
    }


def test_with_dequantize_into_a_numpy_dict_model(checkpoint: Any) -> None:
    path, tensors, expected = checkpoint
    wanted = expected_values(path, BF16)
    model = {name: np.zeros(shape, BF16) for name, (_, shape, _) in expected.items()}
    model["norm.weight"] = np.zeros(5, BF16)
    result = SafetensorsStore.from_file(path).with_dequantize("bf16").apply_to(model)
    assert result.is_success(), result
    assert result.quantized == {name: layout for name, (layout, _, _) in expected.items()}
    for name, values in wanted.items():
        assert model[name].dtype == BF16
        assert np.array_equal(model[name].view(np.uint16), values.view(np.uint16))
    assert np.array_equal(
        model["norm.weight"].view(np.uint16), tensors["norm.weight"].view(np.uint16)
    )


@pytest.mark.parametrize(("asked", "model_dtype"), [("bf16", "float32"), ("f32", "bfloat16")])
def test_values_are_those_asked_whatever_the_parameter_holds(
    checkpoint: Any, asked: str, model_dtype: str
) -> None:
    """bf16 asked into a float32 parameter: bfloat16 values widened; f32 asked into a bf16
    parameter: the float32 values rounded once (decoded straight to bf16)."""
    path, _, expected = checkpoint
    store_dtype = BF16 if asked == "bf16" else np.dtype(np.float32)
    target = np.dtype(model_dtype) if model_dtype == "float32" else BF16
    wanted = {n: v.astype(target) for n, v in expected_values(path, store_dtype).items()}
    model = {name: np.zeros(shape, target) for name, (_, shape, _) in expected.items()}
    store = SafetensorsStore.from_file(path).with_dequantize(asked).with_regex(r"^(?!norm)")
    assert store.apply_to(model).is_success()
    for name, values in wanted.items():
        assert np.array_equal(model[name], values, equal_nan=True)


def test_with_dequantize_into_a_torch_bf16_model(tmp_path: Path) -> None:
    torch = need("torch")
    path = write(
        tmp_path,
        {
            "fc.weight": fp8((300, 200)),
            "fc.weight_scale_inv": floats((3, 2)),
            "fc.bias": floats((300,), BF16),
        },
        {"quant_method": "fp8", "weight_block_size": [128, 128]},
    )
    model = torch.nn.Linear(200, 300, dtype=torch.bfloat16)
    result = (
        SafetensorsStore.from_file(path)
        .with_dequantize("bf16")
        .with_key_remapping(r"^fc\.", "")
        .apply_to(model)
    )
    assert result.is_success(), result
    assert result.quantized == {"weight": "fp8-block"}
    [wanted] = expected_values(path, BF16).values()
    assert np.array_equal(model.weight.detach().view(torch.uint16).numpy(), wanted.view(np.uint16))


def test_with_dequantize_into_a_jax_params_tree(tmp_path: Path) -> None:
    jax = need("jax")
    need("flax")
    from weightstore.bridge import load_tree

    path = write(
        tmp_path,
        {"fc.kernel": fp8((256, 128)), "fc.kernel_scale_inv": floats((2, 1))},
        {"quant_method": "fp8", "weight_block_size": [128, 128]},
    )
    abstract = {"fc": {"kernel": jax.ShapeDtypeStruct((256, 128), jax.numpy.bfloat16)}}
    loaded, result = load_tree(abstract, SafetensorsStore.from_file(path).with_dequantize("bf16"))
    assert result.is_success(), result
    assert result.quantized == {"fc.kernel": "fp8-block"}
    [wanted] = expected_values(path, BF16).values()
    got = np.asarray(loaded["fc"]["kernel"])
    assert got.dtype == BF16 and np.array_equal(got.view(np.uint16), wanted.view(np.uint16))


def test_a_bf16_target_never_holds_a_float32_copy(tmp_path: Path) -> None:
    rows, cols = 2048, 1024  # 2 MiB of codes, 4 MiB of bf16 output, 8 MiB as float32
    path = write(
        tmp_path,
        {"w.weight": fp8((rows, cols)), "w.weight_scale_inv": floats((16, 8))},
        {"quant_method": "fp8", "weight_block_size": [128, 128]},
    )
    model = {"w.weight": np.zeros((rows, cols), BF16)}
    store = SafetensorsStore.from_file(path).with_dequantize("bf16")
    store.keys()  # headers and config read before measuring
    tracemalloc.start()
    try:
        assert store.apply_to(model).is_success()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    output = rows * cols * 2
    # the output, the codes' array (mapped or read), one float32 chunk of 1 MiB and change;
    # a float32 copy of the tensor alone would be 8 MiB
    assert peak < output + rows * cols + (3 << 20), peak
    assert peak < rows * cols * 4


# -- loads without dequantize are refused ------------------------------------------------------


def test_codes_into_a_float_model_are_refused_naming_layout_and_option(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {"m.weight": fp8((8, 64)), "m.weight_scale": floats((8, 1))},
        ct_config("float-quantized", {"type": "float", "num_bits": 8, "strategy": "channel"}),
    )
    model = {"m.weight": np.full((8, 64), 7, BF16), "m.weight_scale": np.zeros((8, 1), np.float32)}
    with pytest.raises(LoadFailedError) as caught:
        SafetensorsStore.from_file(path).apply_to(model)
    text = str(caught.value)
    assert "fp8-channel" in text and "with_dequantize" in text
    assert "m.weight_scale" in text  # the advice names the companion
    assert (model["m.weight"] == 7).all() and (model["m.weight_scale"] == 0).all()


def test_mxfp4_under_its_logical_name_is_refused_with_the_fix(tmp_path: Path) -> None:
    tensors, config, _ = LAYOUTS["mxfp4"]
    path = write(tmp_path, tensors, config)
    model = {"e.gate_up_proj": np.full((2, 4, 96), 3, BF16)}
    with pytest.raises(LoadFailedError) as caught:
        SafetensorsStore.from_file(path).apply_to(model)
    assert "mxfp4" in caught.value.fix and "with_dequantize" in caught.value.fix
    assert (model["e.gate_up_proj"] == 3).all()
    assert SafetensorsStore.from_file(path).with_dequantize("f32").apply_to(model).is_success()


# -- torch's quantized tensors and Burn's QFloat ------------------------------------------------


def test_a_quantized_torch_file_lists_and_loads_dequantized(tmp_path: Path) -> None:
    torch = need("torch")
    weight = torch.randn(6, 5)
    state = {
        "a": torch.quantize_per_tensor(weight, 0.05, 3, torch.qint8),
        "b": torch.quantize_per_channel(
            weight, torch.rand(6) / 10 + 0.01, torch.randint(0, 9, (6,)), 0, torch.quint8
        ),
        "c": torch.ones(2),
    }
    path = tmp_path / "q.pt"
    torch.save(state, path)
    store = PytorchStore.from_file(path)
    assert {(g.name, g.layout) for g in store.quantized_groups()} == {
        ("a", "torch-affine"),
        ("b", "torch-affine"),
    }
    assert store.keys() == ["a", "b", "c"]
    model = {"a": np.zeros((6, 5), np.float32), "b": np.zeros((6, 5), np.float32),
             "c": np.zeros(2, np.float32)}  # fmt: skip
    result = store.with_dequantize("f32").apply_to(model)
    assert result.is_success(), result
    assert result.quantized == {"a": "torch-affine", "b": "torch-affine"}
    for name in ("a", "b"):
        assert np.array_equal(model[name], state[name].dequantize().numpy())
    with pytest.raises(LoadFailedError) as caught:
        store.apply_to({"a": np.zeros((6, 5), np.float32)})
    assert "torch-affine" in str(caught.value) and "with_dequantize" in str(caught.value)


def test_a_burn_qfloat_tensor_loads_dequantized(tmp_path: Path) -> None:
    from tests.burnpack.test_qfloat import build, expected_values, random_codes, scheme

    codes = random_codes((3, 8), "Q8S", seed=1)
    scales = np.array([0.5, 0.25, 1.0], np.float32).reshape(3, 1)
    _, file_bytes = build(codes, scheme("Q8S", block=(1, 8)), scales, "F32")
    path = tmp_path / "q.bpk"
    path.write_bytes(file_bytes)
    store = BurnpackStore.from_file(path)
    [group] = store.quantized_groups()
    assert isinstance(group, QuantizedGroup) and (group.name, group.layout) == ("q", "burn")
    model = {"q": np.zeros((3, 8), np.float32)}
    result = store.with_dequantize("f32").apply_to(model)
    assert result.is_success(), result
    assert result.quantized == {"q": "burn"}
    assert np.array_equal(model["q"], expected_values(codes, scales, (1, 8)))


@pytest.mark.parametrize(
    ("value", "store", "block"),
    [("Q8S", "Native", (1, 8)), ("Q4S", {"PackedU32": 0}, (2, 8)), ("Q2S", {"PackedU32": 0}, None)],
)
def test_a_burn_qfloat_tensor_is_copied_into_burnpack_byte_for_byte(
    tmp_path: Path, value: str, store: Any, block: tuple[int, ...] | None
) -> None:
    from tests.burnpack.test_qfloat import block_scales, build, random_codes, scheme
    from weightstore.burnpack import BurnpackReader

    codes = random_codes((4, 16), value, seed=2)
    scales = block_scales((4, 16), block, 3) if block else np.array([0.5], np.float32)
    quant = scheme(value, store, block=block)
    data, file_bytes = build(codes, quant, scales, "F32")
    source = tmp_path / "q.bpk"
    source.write_bytes(file_bytes)
    copy = tmp_path / "copy.bpk"
    BurnpackStore.from_file(copy).collect_from(
        BurnpackStore.from_file(source).with_key_remapping(r"^q$", "layer.weight")
    )
    with (
        BurnpackReader.from_file(str(copy)) as reader,
        BurnpackReader.from_file(str(source)) as original,
    ):
        assert bytes(reader.get_bytes("layer.weight")) == data
        assert reader.descriptor("layer.weight").quant_scheme == quant
        assert np.array_equal(reader.get_dequantized("layer.weight"), original.get_dequantized("q"))
    [group] = BurnpackStore.from_file(copy).quantized_groups()
    assert (group.name, group.layout) == ("layer.weight", "burn")


def test_a_burn_qfloat_tensor_into_safetensors_is_refused_naming_dequantize(tmp_path: Path) -> None:
    from tests.burnpack.test_qfloat import build, random_codes, scheme

    _, file_bytes = build(
        random_codes((2, 8), "Q8S", 0), scheme("Q8S"), np.ones(1, np.float32), "F32"
    )
    (tmp_path / "q.bpk").write_bytes(file_bytes)
    source = BurnpackStore.from_file(tmp_path / "q.bpk")
    target = tmp_path / "q.safetensors"
    with pytest.raises(InvalidOptionError) as caught:
        SafetensorsStore.from_file(target).collect_from(source)
    assert str(caught.value).startswith(
        "'q' is the codes of a burn quantized tensor ('q'), and dtype QFLOAT cannot be stored "
        "in SafeTensors: read the source with .with_dequantize('bf16')"
    )
    assert not target.exists()
    SafetensorsStore.from_file(target).collect_from(source.with_dequantize("f32"))
    assert SafetensorsStore.from_file(target).get_tensor("q") is not None
