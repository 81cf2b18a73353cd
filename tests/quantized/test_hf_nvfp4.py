"""NVFP4 groups in SafeTensors: recognised by config and by names, dequantized bit for bit as
compressed-tensors 0.20.1 decompresses what its own compressor wrote (and as ModelOpt's formula
computes for its convention), and refused with a `QuantizedLayoutError` naming the group and
both tensors, before anything the sizes imply is allocated, when parts disagree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tests.quantized._refusals import refused
from weightstore.errors import DTypeError
from weightstore.quantized import _hf_pack
from weightstore.quantized._hf_nvfp4 import dequantize_nvfp4, rule_nvfp4

CT_CONFIG = {
    "quant_method": "compressed-tensors",
    "format": "nvfp4-pack-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4}}},
}
MODELOPT_CONFIG = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
F8 = ml_dtypes.float8_e4m3fn


def infos_of(parts: Mapping[str, np.ndarray]) -> dict[str, tuple[str, tuple[int, ...]]]:
    names = {"uint8": "U8", "float8_e4m3fn": "F8_E4M3", "float32": "F32", "float16": "F16"}
    return {k: (names[v.dtype.name], tuple(v.shape)) for k, v in parts.items()}


def ct_parts(rows: int = 4, cols: int = 32, seed: int = 0) -> dict[str, np.ndarray]:
    """Hand-built compressed-tensors parts: random codes, positive E4M3 scales."""
    rng = np.random.default_rng(seed)
    return {
        "m.weight_packed": rng.integers(0, 256, (rows, cols // 2), dtype=np.uint8),
        "m.weight_scale": rng.uniform(0.01, 400, (rows, cols // 16)).astype(F8),
        "m.weight_global_scale": np.array([37.5], dtype=np.float32),
    }


def bits_equal(ours: np.ndarray, theirs: np.ndarray) -> bool:
    return ours.shape == theirs.shape and bool(
        np.array_equal(ours.view(np.uint8), np.ascontiguousarray(theirs).view(np.uint8))
    )


# --- against compressed-tensors -------------------------------------------------------------


@pytest.fixture
def ct() -> Any:
    pytest.importorskip("torch")
    return pytest.importorskip("compressed_tensors")


def compress(rows: int, cols: int, seed: int) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """A bf16 weight through compressed-tensors' own NVFP4 compressor and decompressor."""
    import torch
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization.quant_scheme import NVFP4A16
    from compressed_tensors.quantization.utils.helpers import calculate_qparams, generate_gparam

    torch.manual_seed(seed)
    weight = (torch.randn(rows, cols) * 3).to(torch.bfloat16)
    weight[0, :16] = 0.0  # an all-zero block: the eps scale
    scheme = QuantizationScheme(targets=["Linear"], **NVFP4A16)
    global_scale = generate_gparam(weight.amin(), weight.amax())
    blocks = weight.float().reshape(rows, cols // 16, 16)
    scale, zero = calculate_qparams(blocks.amin(-1), blocks.amax(-1), scheme.weights, global_scale)
    state = {
        "weight": weight,
        "weight_scale": scale,
        "weight_global_scale": global_scale,
        "weight_zero_point": zero,
    }
    compressed = NVFP4PackedCompressor.compress(state, scheme)
    return compressed, NVFP4PackedCompressor.decompress(compressed, scheme), scheme


def as_numpy(tensor: Any) -> np.ndarray:
    import torch

    if tensor.dtype == torch.float8_e4m3fn:
        return np.asarray(tensor.view(torch.uint8).numpy().view(F8))
    if tensor.dtype == torch.bfloat16:
        return np.asarray(tensor.view(torch.uint16).numpy().view(ml_dtypes.bfloat16))
    return np.asarray(tensor.numpy())


@pytest.mark.parametrize(("rows", "cols"), [(4, 16), (33, 64), (300, 256)])
def test_compressed_tensors_decompression_bit_for_bit(
    ct: Any, rows: int, cols: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.quantization.lifecycle.forward import dequantize

    monkeypatch.setattr(_hf_pack, "CHUNK_ELEMENTS", 1000)  # many chunks, ragged last one
    compressed, decompressed, scheme = compress(rows, cols, seed=rows)
    parts = {f"layer.{k}": as_numpy(v) for k, v in compressed.items()}
    [group] = rule_nvfp4(infos_of(parts), CT_CONFIG)
    assert group.rule == "quantization_config: compressed-tensors nvfp4-pack-quantized"
    assert (group.name, group.logical_shape, group.block) == ("layer.weight", (rows, cols), (1, 16))
    assert bits_equal(
        dequantize_nvfp4(group, parts, ml_dtypes.bfloat16), as_numpy(decompressed["weight"])
    )

    # float32: the same formula with compressed-tensors computing in float32 throughout
    codes = unpack_fp4_from_uint8(compressed["weight_packed"], rows, cols, dtype=torch.float32)
    reference = dequantize(
        x_q=codes,
        scale=compressed["weight_scale"].to(torch.float32),
        args=scheme.weights,
        global_scale=compressed["weight_global_scale"],
        dtype=torch.float32,
    )
    ours = dequantize_nvfp4(group, parts)
    assert ours.dtype == np.float32 and bits_equal(ours, reference.numpy())
    assert bits_equal(dequantize_nvfp4(group, parts, np.float16), ours.astype(np.float16))


def test_modelopt_convention_multiplies_by_weight_scale_2(ct: Any) -> None:
    """ModelOpt's tensors (``weight``, ``weight_scale``, ``weight_scale_2 = 1 / global``) give
    ModelOpt's formula exactly, and compressed-tensors' conversion of them within a rounding."""
    import torch

    compressed, decompressed, _ = compress(64, 128, seed=3)
    scale_2 = (1 / compressed["weight_global_scale"]).to(torch.float32)
    parts = {
        "m.weight": as_numpy(compressed["weight_packed"]),
        "m.weight_scale": as_numpy(compressed["weight_scale"]),
        "m.weight_scale_2": scale_2.numpy(),
        "m.input_scale": np.ones(1, np.float32),
    }
    [group] = rule_nvfp4(infos_of(parts), MODELOPT_CONFIG)
    assert group.companions["input_scale"] == "m.input_scale"  # carried with the group
    # ModelOpt NVFP4QTensor.dequantize: table[codes] * (float32(scale) * scale_2), per block
    packed = compressed["weight_packed"]
    nibbles = torch.stack((packed & 0x0F, packed >> 4), dim=-1).reshape(64, 128).long()
    table = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
    per_block = compressed["weight_scale"].to(torch.float32) * scale_2
    reference = (table[nibbles].view(64, 8, 16) * per_block.unsqueeze(-1)).reshape(64, 128)
    ours = dequantize_nvfp4(group, parts)
    assert bits_equal(ours, reference.numpy())
    ct_route = as_numpy(decompressed["weight"]).astype(np.float32)
    np.testing.assert_allclose(ours, ct_route, rtol=2**-7, atol=0)


# --- recognition ----------------------------------------------------------------------------


def test_names_only_recognises_both_conventions() -> None:
    parts = ct_parts()
    parts |= {
        "n.weight": parts["m.weight_packed"],
        "n.weight_scale": parts["m.weight_scale"],
        "n.weight_scale_2": np.array([0.5], np.float32),
    }
    groups = {g.name: g for g in rule_nvfp4(infos_of(parts), None)}
    assert set(groups) == {"m.weight", "n.weight"}
    assert groups["m.weight"].rule.startswith("names: weight_packed U8")
    assert groups["n.weight"].companions == {
        "scale": "n.weight_scale",
        "scale_2": "n.weight_scale_2",
    }
    assert groups["m.weight"].parts == (
        "m.weight_packed",
        "m.weight_global_scale",
        "m.weight_scale",
    )


def test_names_only_leaves_other_dtypes_plain() -> None:
    """A bf16 ``weight`` beside F8 scales is FP8-style or unquantized, not NVFP4: no group."""
    infos = {
        "n.weight": ("BF16", (4, 32)),
        "n.weight_scale": ("F8_E4M3", (4, 2)),
        "n.weight_scale_2": ("F32", (1,)),
        "m.weight_packed": ("U8", (4, 16)),
        "m.weight_scale": ("F32", (4, 2)),
        "m.weight_global_scale": ("F32", (1,)),
    }
    assert rule_nvfp4(infos, None) == []


def test_a_config_naming_another_method_yields_no_group() -> None:
    other = {"quant_method": "compressed-tensors", "format": "pack-quantized"}
    assert rule_nvfp4(infos_of(ct_parts()), other) == []
    assert rule_nvfp4(infos_of(ct_parts()), {"quant_method": "fp8"}) == []
    hf_quant_config = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4"}}
    assert rule_nvfp4(infos_of(ct_parts()), hf_quant_config) == []  # ModelOpt names only


def test_a_config_makes_dtypes_binding() -> None:
    infos = infos_of(ct_parts()) | {"m.weight_scale": ("F16", (4, 2))}
    refused(
        lambda: rule_nvfp4(infos, CT_CONFIG),
        group="m.weight",
        codes="m.weight_packed",
        companion="m.weight_scale",
        match="scale is F16, the scheme needs F8_E4M3",
    )


@pytest.mark.parametrize(
    ("changed", "companion", "message"),
    [
        (
            {"m.weight_scale": ("F8_E4M3", (4, 3))},
            "m.weight_scale",
            r"scale shape \[4, 3\].*\[4, 2\]",
        ),
        ({"m.weight_scale": ("F8_E4M3", (5, 2))}, "m.weight_scale", r"scale shape \[5, 2\]"),
        (
            {"m.weight_packed": ("U8", (4, 12)), "m.weight_scale": ("F8_E4M3", (4, 1))},
            "m.weight_scale",
            r"24 columns are not whole blocks of 16",
        ),
        (
            {"m.weight_global_scale": ("F32", (2,))},
            "m.weight_global_scale",
            r"global_scale has shape \[2\]",
        ),
        ({"m.weight_global_scale": ("F16", (1,))}, "m.weight_global_scale", r"global_scale is F16"),
        ({"m.weight_packed": ("U8", ())}, None, r"codes are U8 \[\], not U8 in one dim or more"),
    ],
)
def test_rule_refuses_parts_that_disagree(
    changed: dict[str, Any], companion: str | None, message: str
) -> None:
    infos = infos_of(ct_parts()) | changed
    refused(
        lambda: rule_nvfp4(infos, CT_CONFIG),
        group="m.weight",
        codes="m.weight_packed",
        companion=companion,
        match=message,
    )


# --- bad input to the dequantizer -----------------------------------------------------------


def group_of(parts: dict[str, np.ndarray]) -> Any:
    [group] = rule_nvfp4(infos_of(parts), None)
    return group


def test_dequantize_matches_hand_computed_values() -> None:
    parts = ct_parts(rows=1, cols=16)
    parts["m.weight_packed"][:] = np.array(
        [0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE], np.uint8
    )
    parts["m.weight_scale"][:] = np.array([[3.0]], F8)
    parts["m.weight_global_scale"][:] = 2.0
    values = dequantize_nvfp4(group_of(parts), parts)
    expected = 1.5 * np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
    assert bits_equal(values, expected.astype(np.float32).reshape(1, 16))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 0.0])
def test_non_finite_or_zero_global_scale_is_refused(bad: float) -> None:
    parts = ct_parts()
    group = group_of(parts)
    parts["m.weight_global_scale"] = np.array([bad], np.float32)
    refused(
        lambda: dequantize_nvfp4(group, parts),
        group="m.weight",
        codes="m.weight_packed",
        companion="m.weight_global_scale",
        match=f"global_scale is {bad}, not a finite divisor",
    )


def test_modelopt_zero_second_scale_is_allowed_but_not_nan() -> None:
    parts = {
        "m.weight": np.zeros((2, 16), np.uint8),
        "m.weight_scale": np.ones((2, 2), F8),
        "m.weight_scale_2": np.zeros(1, np.float32),
    }
    group = group_of(parts)
    assert not dequantize_nvfp4(group, parts).any()
    for bad in (np.nan, np.inf, -np.inf):
        parts["m.weight_scale_2"] = np.array([bad], np.float32)
        refused(
            lambda: dequantize_nvfp4(group, parts),
            group="m.weight",
            codes="m.weight",
            companion="m.weight_scale_2",
            match=f"scale_2 is {bad}",
        )


def test_arrays_that_disagree_with_the_group_are_refused_before_allocating() -> None:
    """The group claims 2**40 rows; the arrays are small: a typed error, no huge output."""
    parts = ct_parts()
    group = group_of(parts).replace(logical_shape=(1 << 40, 32))
    refused(
        lambda: dequantize_nvfp4(group, parts),
        group="m.weight",
        codes="m.weight_packed",
        companion=None,
        match=r"unpack to \[4, 32\], not the group's \[1099511627776, 32\]",
    )


def test_a_packed_length_that_does_not_match_the_group_is_refused() -> None:
    """Codes one byte short of the group's columns (and their scales) are no NVFP4 rows."""
    parts = ct_parts()
    group = group_of(parts)
    parts["m.weight_packed"] = parts["m.weight_packed"][:, :-1]
    refused(
        lambda: dequantize_nvfp4(group, parts),
        group="m.weight",
        codes="m.weight_packed",
        companion=None,
        match=r"codes \[4, 15\] unpack to \[4, 30\], not the group's \[4, 32\]",
    )


@pytest.mark.parametrize(
    ("name", "array", "companion", "message"),
    [
        (
            "m.weight_scale",
            np.ones((4, 2), np.float16),
            "m.weight_scale",
            r"scale is F16, the scheme needs F8",
        ),
        (
            "m.weight_scale",
            np.ones((4, 3), F8),
            "m.weight_scale",
            r"scale shape \[4, 3\], blocks of 16 need \[4, 2\]",
        ),
        ("m.weight_scale", np.ones((3, 2), F8), "m.weight_scale", r"scale shape \[3, 2\]"),
        ("m.weight_packed", np.zeros((4, 16), np.int8), None, r"codes are I8 \[4, 16\], not U8"),
        (
            "m.weight_global_scale",
            np.ones(1, np.float16),
            "m.weight_global_scale",
            r"global_scale is F16",
        ),
        (
            "m.weight_global_scale",
            np.ones(2, np.float32),
            "m.weight_global_scale",
            r"not one value",
        ),
    ],
)
def test_dequantize_refuses_bad_parts(
    name: str, array: np.ndarray, companion: str | None, message: str
) -> None:
    parts = ct_parts()
    group = group_of(parts)
    parts[name] = array
    refused(
        lambda: dequantize_nvfp4(group, parts),
        group="m.weight",
        codes="m.weight_packed",
        companion=companion,
        match=message,
    )


def test_missing_part_and_bad_output_dtype_are_typed() -> None:
    parts = ct_parts()
    group = group_of(parts)
    with pytest.raises(DTypeError, match="float32, float16 or bfloat16"):
        dequantize_nvfp4(group, parts, np.int32)
    del parts["m.weight_scale"]
    refused(
        lambda: dequantize_nvfp4(group, parts),
        group="m.weight",
        codes="m.weight_packed",
        companion="m.weight_scale",
        match="was not handed to the dequantization",
    )


def test_empty_tensor_dequantizes_to_empty() -> None:
    parts = {
        "m.weight_packed": np.zeros((3, 0), np.uint8),
        "m.weight_scale": np.zeros((3, 0), F8),
        "m.weight_global_scale": np.ones(1, np.float32),
    }
    assert dequantize_nvfp4(group_of(parts), parts).shape == (3, 0)
