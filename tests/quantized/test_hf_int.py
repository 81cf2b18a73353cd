"""compressed-tensors pack-quantized groups: recognised by config and by names, the bit width
settled from ``weight_shape``, dequantized bit for bit as compressed-tensors 0.20.1
decompresses what its own compressor wrote, and refused with a `QuantizedLayoutError` naming the
group and both tensors, before anything the sizes imply is allocated, when parts disagree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tests.quantized._refusals import refused
from weightstore.errors import DTypeError
from weightstore.quantized import _hf_pack
from weightstore.quantized._hf_int import (
    IntPackGroup,
    dequantize_int_pack,
    resolve_int_pack,
    rule_int_pack,
)

NAMES = {
    "int8": "I8",
    "int32": "I32",
    "int64": "I64",
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "uint8": "U8",
}


def infos_of(parts: Mapping[str, np.ndarray]) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {k: (NAMES[v.dtype.name], tuple(v.shape)) for k, v in parts.items()}


def config(bits: int, strategy: str, group_size: int | None, symmetric: bool) -> dict[str, Any]:
    weights = {
        "num_bits": bits,
        "type": "int",
        "strategy": strategy,
        "group_size": group_size,
        "symmetric": symmetric,
    }
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
    }


def pack_rows(codes: np.ndarray, bits: int) -> np.ndarray:
    """Signed codes (rows, cols) packed as compressed-tensors does: ``code + 2**(bits-1)``, a
    little-endian bit string per row, cut into int32 words (written here independently)."""
    rows, cols = codes.shape
    unsigned = (codes.astype(np.int64) + (1 << (bits - 1))).astype(np.uint8)
    stream = np.unpackbits(unsigned[..., None], axis=-1, bitorder="little")[..., :bits]
    stream = stream.reshape(rows, cols * bits)
    words = -(-cols * bits // 32)
    padded = np.zeros((rows, words * 32), np.uint8)
    padded[:, : cols * bits] = stream
    return np.packbits(padded, axis=1, bitorder="little").view("<i4").astype(np.int32)


def hand_parts(
    rows: int = 8,
    cols: int = 64,
    gs: int = 32,
    bits: int = 4,
    seed: int = 0,
    asymmetric: bool = True,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Random codes, scales and zero points, packed, with their float64 values."""
    rng = np.random.default_rng(seed)
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    codes = rng.integers(low, high + 1, (rows, cols))
    groups = cols // gs
    scale = rng.uniform(0.01, 2, (rows, groups)).astype(np.float32)
    zero = rng.integers(low, high + 1, (rows, groups)) if asymmetric else np.zeros((rows, groups))
    parts = {
        "m.weight_packed": pack_rows(codes, bits),
        "m.weight_scale": scale,
        "m.weight_shape": np.array([rows, cols], np.int64),
    }
    if asymmetric:
        parts["m.weight_zero_point"] = pack_rows(zero.T.astype(np.int64), bits).T.copy()
    expanded = np.repeat(np.arange(groups), gs)
    values = (codes - zero[:, expanded]) * scale[:, expanded].astype(np.float64)
    return parts, values


def bits_equal(ours: np.ndarray, theirs: np.ndarray) -> bool:
    return ours.shape == theirs.shape and bool(
        np.array_equal(ours.view(np.uint8), np.ascontiguousarray(theirs).view(np.uint8))
    )


# --- against compressed-tensors -------------------------------------------------------------


CASES = [
    (4, "group", 32, True, "bfloat16", (40, 96)),
    (4, "group", 128, False, "bfloat16", (48, 256)),
    (8, "channel", None, True, "float16", (40, 96)),
    (8, "channel", None, False, "float32", (24, 50)),
    (3, "group", 16, False, "float32", (40, 96)),
    (3, "channel", None, True, "bfloat16", (16, 100)),
    (4, "channel", None, False, "bfloat16", (40, 96)),
    (8, "tensor", None, True, "float32", (40, 96)),
    (4, "tensor", None, False, "float16", (40, 96)),
    (2, "group", 32, False, "bfloat16", (64, 64)),
]


def torch_as_numpy(tensor: Any) -> np.ndarray:
    import torch

    if tensor.dtype == torch.bfloat16:
        return np.asarray(tensor.view(torch.uint16).numpy().view(ml_dtypes.bfloat16))
    return np.asarray(tensor.numpy())


@pytest.mark.parametrize(("bits", "strategy", "gs", "symmetric", "dtype", "shape"), CASES)
def test_compressed_tensors_decompression_bit_for_bit(
    bits: int,
    strategy: str,
    gs: int | None,
    symmetric: bool,
    dtype: str,
    shape: tuple[int, int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("compressed_tensors")
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from compressed_tensors.quantization.utils.helpers import calculate_qparams

    monkeypatch.setattr(_hf_pack, "CHUNK_ELEMENTS", 500)  # many chunks, ragged last one
    torch.manual_seed(bits * 1000 + shape[1])
    rows, cols = shape
    torch_dtype = getattr(torch, dtype)
    weight = (torch.randn(rows, cols) * 2).to(torch_dtype)
    args = QuantizationArgs(
        num_bits=bits, type="int", strategy=strategy, group_size=gs, symmetric=symmetric
    )
    if strategy == "group":
        blocks = weight.reshape(rows, cols // gs, gs)  # type: ignore[operator]
        low, high = blocks.amin(-1), blocks.amax(-1)
    elif strategy == "channel":
        low, high = weight.amin(-1, keepdim=True), weight.amax(-1, keepdim=True)
    else:
        low, high = weight.amin(), weight.amax()
    scale, zero = calculate_qparams(low, high, args)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    state = {"weight": weight, "weight_scale": scale.to(torch_dtype), "weight_zero_point": zero}
    compressed = PackedQuantizationCompressor.compress(state, scheme)
    decompressed = PackedQuantizationCompressor.decompress(compressed, scheme)
    parts = {f"m.{k}": torch_as_numpy(v) for k, v in compressed.items()}
    infos = infos_of(parts)

    [group] = rule_int_pack(infos, config(bits, strategy, gs, symmetric))
    assert isinstance(group, IntPackGroup) and group.num_bits == bits
    assert group.rule == "quantization_config: compressed-tensors pack-quantized"
    group = resolve_int_pack(group, parts["m.weight_shape"], infos)  # 100 cols: not 32*w/3
    assert group.logical_shape == shape
    assert group.block == {"group": (1, gs), "channel": (1, cols), "tensor": ()}[strategy]
    wanted = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    reference = torch_as_numpy(decompressed["weight"])
    assert bits_equal(dequantize_int_pack(group, parts, wanted), reference)

    # float32: compressed-tensors computing with float32 scales gives our float32 exactly
    state32 = {**compressed, "weight_scale": compressed["weight_scale"].float()}
    reference32 = PackedQuantizationCompressor.decompress(state32, scheme)["weight"].numpy()
    assert bits_equal(dequantize_int_pack(group, parts), reference32)

    # without the config: the bits are settled from weight_shape's values
    [named] = rule_int_pack(infos, None)
    assert isinstance(named, IntPackGroup) and named.num_bits == 0
    assert resolve_int_pack(named, parts["m.weight_shape"], infos) == group.replace(rule=named.rule)


def test_three_dim_expert_weights() -> None:
    """MoE weights (experts, rows, cols): codes, scales and packed zero points per expert."""
    experts = [hand_parts(rows=16, cols=64, seed=seed) for seed in range(3)]
    parts = {name: np.stack([p[name] for p, _ in experts]) for name in experts[0][0]}
    parts["m.weight_shape"] = np.array([3, 16, 64], np.int64)
    [group] = rule_int_pack(infos_of(parts), config(4, "group", 32, False))
    assert group.logical_shape == (3, 16, 64) and group.block == (1, 1, 32)
    values = dequantize_int_pack(group, parts)
    assert np.array_equal(values, np.stack([v for _, v in experts]).astype(np.float32))


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 5, 6, 7, 8])
def test_every_width_against_hand_packing(bits: int) -> None:
    parts, values = hand_parts(rows=24, cols=96, gs=32, bits=bits, seed=bits)
    [group] = rule_int_pack(infos_of(parts), config(bits, "group", 32, False))
    assert np.array_equal(dequantize_int_pack(group, parts), values.astype(np.float32))


# --- g_idx (activation order) ---------------------------------------------------------------


def test_g_idx_in_group_order_equals_no_g_idx() -> None:
    parts, values = hand_parts()
    with_order = parts | {"m.weight_g_idx": (np.arange(64) // 32).astype(np.int32)}
    [group] = rule_int_pack(infos_of(with_order), config(4, "group", 32, False))
    assert group.companions["g_idx"] == "m.weight_g_idx"
    assert np.array_equal(dequantize_int_pack(group, with_order), values.astype(np.float32))


def test_g_idx_permuted_picks_each_columns_group() -> None:
    rng = np.random.default_rng(1)
    codes = rng.integers(-8, 8, (4, 64))
    zero = rng.integers(-8, 8, (4, 2))
    scale = rng.uniform(0.1, 1, (4, 2)).astype(np.float32)
    g_idx = rng.permutation(np.arange(64) // 32)
    parts = {
        "m.weight_packed": pack_rows(codes, 4),
        "m.weight_scale": scale,
        "m.weight_shape": np.array([4, 64], np.int32),
        "m.weight_zero_point": pack_rows(zero.T, 4).T.copy(),
        "m.weight_g_idx": g_idx,
    }
    [group] = rule_int_pack(infos_of(parts), config(4, "group", 32, False))
    expected = (codes - zero[:, g_idx]) * scale[:, g_idx].astype(np.float64)
    assert np.array_equal(dequantize_int_pack(group, parts), expected.astype(np.float32))


def test_g_idx_out_of_range_is_refused() -> None:
    parts, _ = hand_parts()
    parts["m.weight_g_idx"] = np.full(64, 2, np.int32)  # two groups: 0 and 1
    [group] = rule_int_pack(infos_of(parts), config(4, "group", 32, False))
    for bad, message in [
        (np.full(64, 2, np.int32), r"g_idx\[0\] = 2 names no group of the 2 in 'm\.weight_scale'"),
        (np.r_[np.zeros(63, np.int32), np.int32(2**31 - 1)], r"g_idx\[63\] = 2147483647"),
        (np.full(64, -1, np.int32), r"g_idx\[0\] = -1"),
        (np.zeros(63, np.int32), r"g_idx shape \[63\], weight_shape needs \[64\]"),
    ]:
        parts["m.weight_g_idx"] = bad
        refused(
            lambda: dequantize_int_pack(group, parts),
            group="m.weight",
            codes="m.weight_packed",
            companion="m.weight_g_idx",
            match=message,
        )


# --- recognition and resolution -------------------------------------------------------------


def test_a_config_naming_another_method_or_format_yields_no_group() -> None:
    infos = infos_of(hand_parts()[0])
    assert (
        rule_int_pack(
            infos,
            {
                "quant_method": "compressed-tensors",
                "format": "float-quantized",
                "config_groups": {"g": {"weights": {"num_bits": 8}}},
            },
        )
        == []
    )
    assert rule_int_pack(infos, {"quant_method": "gptq", "bits": 4}) == []


def test_names_need_int32_codes_scale_and_shape() -> None:
    parts = hand_parts()[0]
    infos = infos_of(parts)
    assert rule_int_pack({**infos, "m.weight_packed": ("U8", (8, 32))}, None) == []
    assert rule_int_pack({k: v for k, v in infos.items() if k != "m.weight_shape"}, None) == []


def test_names_only_ambiguous_width_is_refused() -> None:
    """16 columns in 2 words are 3 or 4 bits: without a config nothing tells them apart."""
    parts = {
        "m.weight_packed": np.zeros((4, 2), np.int32),
        "m.weight_scale": np.ones((4, 1), np.float32),
        "m.weight_shape": np.array([4, 16]),
    }
    infos = infos_of(parts)
    [group] = rule_int_pack(infos, None)
    refused(
        lambda: resolve_int_pack(group, parts["m.weight_shape"], infos),
        group="m.weight",
        codes="m.weight_packed",
        companion="m.weight_shape",
        match=r"hold 16 codes of 3 or 4 bits \(ambiguous\)",
    )
    [configured] = rule_int_pack(infos, config(4, "channel", None, True))
    assert resolve_int_pack(configured, parts["m.weight_shape"], infos).logical_shape == (4, 16)


def test_dequantize_refuses_an_unresolved_shape() -> None:
    parts, _ = hand_parts(bits=8, asymmetric=False)
    infos = infos_of(parts)
    [group] = rule_int_pack(infos, None)  # assumes 4 bits: 128 columns
    refused(
        lambda: dequantize_int_pack(group, parts),
        group="m.weight",
        codes="m.weight_packed",
        companion="m.weight_shape",
        match=r"weight_shape is \[8, 64\], the group says \[8, 128\]",
    )
    resolved = resolve_int_pack(group, parts["m.weight_shape"], infos)
    assert resolved.num_bits == 8 and dequantize_int_pack(resolved, parts).shape == (8, 64)


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ([9, 64], r"codes \[8, 8\] cannot hold a \[9, 64\] tensor"),
        ([8, 64, 1], r"weight_shape is int64 \[3\], the codes need 2 integers"),
        ([8, 72], r"8 words per row hold 72 codes of no bits \(mismatch\)"),
        ([8, 0], r"weight_shape \[8, 0\] has a dim below 1"),
        ([8, -64], r"has a dim below 1"),
        ([8, 1 << 40], r"8 words per row hold 1099511627776 codes of no bits"),
        ([1 << 40, 64], r"codes \[8, 8\] cannot hold a \[1099511627776, 64\] tensor"),
        ([8, 2**63 - 1], r"of no bits \(mismatch\)"),
    ],
)
def test_weight_shape_disagreeing_with_codes_is_refused(shape: list[int], message: str) -> None:
    parts, _ = hand_parts()
    infos = infos_of(parts)
    [group] = rule_int_pack(infos, config(4, "group", 32, False))
    refused(
        lambda: resolve_int_pack(group, np.array(shape, np.int64), infos),
        group="m.weight",
        codes="m.weight_packed",
        companion="m.weight_shape",
        match=message,
    )
    parts["m.weight_shape"] = np.array(shape, np.int64)  # and as a part: before any output
    refused(
        lambda: dequantize_int_pack(group, parts),
        group="m.weight",
        codes="m.weight_packed",
        companion="m.weight_shape",
    )


def test_weight_shape_of_floats_is_refused() -> None:
    parts, _ = hand_parts()
    [group] = rule_int_pack(infos_of(parts), None)
    long_shape = np.ones(1 << 16, np.int64)  # its length refused before its values are read
    refused(
        lambda: resolve_int_pack(group, long_shape, infos_of(parts)),
        group="m.weight",
        codes="m.weight_packed",
        companion="m.weight_shape",
        match=r"int64 \[65536\]",
    )
    parts["m.weight_shape"] = np.array([8.0, 64.0])
    refused(
        lambda: dequantize_int_pack(group, parts),
        group="m.weight",
        codes="m.weight_packed",
        companion="m.weight_shape",
        match="weight_shape is float64",
    )


@pytest.mark.parametrize(
    ("changed", "companion", "message"),
    [
        (
            {"m.weight_scale": ("F32", (8, 3))},
            "m.weight_scale",
            r"no configured bit width fits 8 words",
        ),
        (
            {"m.weight_packed": ("I32", (8, 9))},
            "m.weight_scale",
            r"fits 9 words and scale \[8, 2\]",
        ),
        (
            {"m.weight_scale": ("F32", (7, 2))},
            "m.weight_scale",
            r"scale shape \[7, 2\] is neither \[8\] \+ \[groups\]",
        ),
        (
            {"m.weight_scale": ("I32", (8, 2))},
            "m.weight_scale",
            r"scale is I32, the scheme needs one of F32, F16, BF16",
        ),
        ({"m.weight_scale": ("F8_E4M3", (8, 2))}, "m.weight_scale", r"scale is F8_E4M3"),
        (
            {"m.weight_zero_point": ("I32", (2, 2))},
            "m.weight_zero_point",
            r"zero point shape \[2, 2\], the scales \('m\.weight_scale'\) need \[1, 2\]",
        ),
        (
            {"m.weight_zero_point": ("F32", (1, 2))},
            "m.weight_zero_point",
            r"zero point is F32, not I32 or I8",
        ),
        (
            {"m.weight_shape": ("I64", (3,))},
            "m.weight_shape",
            r"weight_shape has shape \[3\], the codes need \[2\]",
        ),
        ({"m.weight_shape": ("F32", (2,))}, "m.weight_shape", r"shape is F32"),
        ({"m.weight_g_idx": ("F32", (64,))}, "m.weight_g_idx", r"g_idx is F32"),
        ({"m.weight_packed": ("I32", (8,))}, None, r"not at least two dims"),
    ],
)
def test_rule_refuses_parts_that_disagree(
    changed: dict[str, Any], companion: str | None, message: str
) -> None:
    infos = infos_of(hand_parts()[0]) | changed
    refused(
        lambda: rule_int_pack(infos, config(4, "group", 32, False)),
        group="m.weight",
        codes="m.weight_packed",
        companion=companion,
        match=message,
    )


def test_columns_not_splitting_into_groups_are_refused() -> None:
    parts, _ = hand_parts()
    infos = infos_of(parts) | {"m.weight_scale": ("F32", (8, 3))}
    [group] = rule_int_pack(infos, None)
    refused(
        lambda: resolve_int_pack(group, parts["m.weight_shape"], infos),
        group="m.weight",
        codes="m.weight_packed",
        companion="m.weight_scale",
        match="64 columns do not split into 3 equal groups",
    )


def test_dequantize_refuses_bad_parts_before_allocating() -> None:
    parts, _ = hand_parts()
    [group] = rule_int_pack(infos_of(parts), config(4, "group", 32, False))
    huge = group.replace(logical_shape=(1 << 40, 64))
    refused(
        lambda: dequantize_int_pack(huge, parts),
        group="m.weight",
        codes="m.weight_packed",
        companion="m.weight_shape",
        match=r"the group says \[1099511627776, 64\]",
    )
    bad_zero = {**parts, "m.weight_zero_point": np.zeros((3, 2), np.int32)}
    refused(
        lambda: dequantize_int_pack(group, bad_zero),
        group="m.weight",
        codes="m.weight_packed",
        companion="m.weight_zero_point",
        match="zero point shape",
    )
    bad_scale = {**parts, "m.weight_scale": np.ones((8, 3), np.float32)}
    refused(
        lambda: dequantize_int_pack(group, bad_scale),
        group="m.weight",
        codes="m.weight_packed",
        companion="m.weight_scale",
        match="64 columns do not split into 3 equal groups",
    )
    short = {**parts, "m.weight_packed": parts["m.weight_packed"][:, :-1]}
    refused(
        lambda: dequantize_int_pack(group, short),
        group="m.weight",
        codes="m.weight_packed",
        companion="m.weight_shape",
        match=r"7 words per row hold 64 codes of no bits \(mismatch\)",
    )
    with pytest.raises(DTypeError, match="float32, float16 or bfloat16"):
        dequantize_int_pack(group, parts, "int8")
    del parts["m.weight_scale"]
    refused(
        lambda: dequantize_int_pack(group, parts),
        group="m.weight",
        codes="m.weight_packed",
        companion="m.weight_scale",
        match=r"part 'm\.weight_scale' of the group was not handed to the dequantization",
    )


def test_bfloat16_output_is_the_float32_rounded() -> None:
    parts, _ = hand_parts(rows=8, cols=64)
    [group] = rule_int_pack(infos_of(parts), config(4, "group", 32, False))
    values = dequantize_int_pack(group, parts)
    out = dequantize_int_pack(group, parts, ml_dtypes.bfloat16)
    assert bits_equal(out, values.astype(ml_dtypes.bfloat16))


def test_codes_of_another_dtype_are_refused() -> None:
    parts, _ = hand_parts()
    [group] = rule_int_pack(infos_of(parts), config(4, "group", 32, False))
    parts["m.weight_packed"] = parts["m.weight_packed"].astype(np.float32)
    refused(
        lambda: dequantize_int_pack(group, parts),
        group="m.weight",
        codes="m.weight_packed",
        companion=None,
        match=r"codes are F32 \[8, 8\], not I32",
    )


def test_mixed_config_leaves_the_width_to_weight_shape() -> None:
    """An int4-g32 and an int8-channel scheme both fit an int8 channel tensor's shapes: the
    rule leaves the width open, and weight_shape settles it (int4 would be refused)."""
    parts, values = hand_parts(rows=8, cols=64, gs=64, bits=8, asymmetric=False)
    mixed = config(4, "group", 32, True)
    mixed["config_groups"]["group_1"] = config(8, "channel", None, True)["config_groups"]["group_0"]
    infos = infos_of(parts)
    [group] = rule_int_pack(infos, mixed)
    assert isinstance(group, IntPackGroup) and group.num_bits == 0
    resolved = resolve_int_pack(group, parts["m.weight_shape"], infos)
    assert resolved.num_bits == 8 and resolved.logical_shape == (8, 64)
    assert np.array_equal(dequantize_int_pack(resolved, parts), values.astype(np.float32))
