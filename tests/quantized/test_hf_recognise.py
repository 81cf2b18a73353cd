"""`recognise` finds FP8 and MXFP4 groups by a checkpoint's ``quantization_config`` (configs as
transformers, compressed-tensors, ModelOpt and gpt-oss write them) or by names, dtypes and
shapes; says which rule matched; leaves every other tensor plain, in order; and refuses an
inconsistent candidate naming the group and both tensors."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tests._optional import need
from weightstore.errors import MetadataError, QuantizedLayoutError
from weightstore.quantized import QuantizedGroup, dequantize_group, recognise
from weightstore.quantized._hf_recognise import RULES, StoredTensor

DEEPSEEK = {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}
GPT_OSS = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}
MODELOPT = {"quant_method": "modelopt", "quant_algo": "FP8"}


def deepseek_layer() -> dict[str, StoredTensor]:
    """Names and shapes of DeepSeek V3's first attention projections and a norm."""
    return {
        "model.embed_tokens.weight": ("BF16", (129280, 7168)),
        "model.layers.0.self_attn.kv_a_proj_with_mqa.weight": ("F8_E4M3", (576, 7168)),
        "model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv": ("F32", (5, 56)),
        "model.layers.0.self_attn.q_a_proj.weight": ("F8_E4M3", (1536, 7168)),
        "model.layers.0.self_attn.q_a_proj.weight_scale_inv": ("F32", (12, 56)),
        "model.layers.0.input_layernorm.weight": ("BF16", (7168,)),
    }


def compressed_tensors_config(
    strategy: str, stored: str = "float-quantized", **weights: Any
) -> dict[str, Any]:
    """A config storing FP8 weights in format `stored`, as compressed-tensors serialises it."""
    quantization = need("compressed_tensors.quantization")
    args = quantization.QuantizationArgs(num_bits=8, type="float", strategy=strategy, **weights)
    scheme = quantization.QuantizationScheme(targets=["Linear"], weights=args)
    config = quantization.QuantizationConfig(
        config_groups={"group_0": scheme}, format=stored, quant_method="compressed-tensors",
    )  # fmt: skip
    dumped: dict[str, Any] = config.model_dump(mode="json")
    return dumped


def only(groups: list[QuantizedGroup]) -> QuantizedGroup:
    assert len(groups) == 1
    return groups[0]


@pytest.mark.parametrize("config", [DEEPSEEK, None])
def test_deepseek_blocks_with_or_without_the_config(config: dict | None) -> None:
    groups, plain = recognise(deepseek_layer(), config)
    assert [g.name for g in groups] == [
        "model.layers.0.self_attn.kv_a_proj_with_mqa.weight",
        "model.layers.0.self_attn.q_a_proj.weight",
    ]
    first = groups[0]
    assert first.layout == "fp8-block" and first.block == (128, 128)
    assert first.logical_shape == (576, 7168)
    assert first.companions == {
        "scale": "model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv"
    }
    assert first.rule == (
        "quantization_config: fp8 block 128x128" if config
        else "names: *_scale_inv beside F8 codes (fp8 block 128x128)"
    )  # fmt: skip
    assert plain == ["model.embed_tokens.weight", "model.layers.0.input_layernorm.weight"]


def test_config_without_a_block_is_one_scale_per_tensor() -> None:
    tensors = {"w": ("F8_E4M3", (64, 64)), "w_scale_inv": ("F32", ())}
    group = only(recognise(tensors, {"quant_method": "fp8"})[0])
    assert group.layout == "fp8-tensor" and group.block == ()
    assert group.rule == "quantization_config: fp8 tensor"


def test_stacked_experts_and_an_activation_scale() -> None:
    tensors = {
        "mlp.experts.gate_up_proj": ("F8_E4M3", (8, 512, 256)),
        "mlp.experts.gate_up_proj_scale_inv": ("F32", (8, 4, 2)),
        "o_proj.weight": ("F8_E4M3", (256, 256)),
        "o_proj.weight_scale_inv": ("F32", (2, 2)),
        "o_proj.input_scale": ("F32", ()),
    }
    groups, plain = recognise(tensors, DEEPSEEK)
    assert [g.logical_shape for g in groups] == [(8, 512, 256), (256, 256)]
    assert groups[1].companions["input_scale"] == "o_proj.input_scale" and plain == []


def test_block_read_from_the_grid_where_128_does_not_fit() -> None:
    tensors = {"w.weight": ("F8_E4M3", (256, 512)), "w.weight_scale_inv": ("F32", (2, 2))}
    group = only(recognise(tensors)[0])
    assert group.block == (128, 256) and "fp8 block 128x256" in group.rule


@pytest.mark.parametrize(
    ("strategy", "weights", "scale_shape", "layout", "block"),
    [
        ("channel", {}, (96, 1), "fp8-channel", (1, 160)),
        ("tensor", {}, (1,), "fp8-tensor", ()),
        ("block", {"block_structure": [32, 64]}, (3, 3), "fp8-block", (32, 64)),
        ("group", {"group_size": 32}, (96, 5), "fp8-block", (1, 32)),
    ],
)
def test_compressed_tensors_float_quantized(
    strategy: str, weights: dict, scale_shape: tuple[int, ...], layout: str, block: tuple
) -> None:
    tensors = {
        "model.layers.0.mlp.down_proj.weight": ("F8_E4M3", (96, 160)),
        "model.layers.0.mlp.down_proj.weight_scale": ("BF16", scale_shape),
        "model.layers.0.mlp.down_proj.input_scale": ("BF16", (1,)),
        "lm_head.weight": ("BF16", (1000, 160)),
    }
    groups, plain = recognise(tensors, compressed_tensors_config(strategy, **weights))
    group = only(groups)
    assert (group.layout, group.block) == (layout, block)
    assert group.rule.startswith("quantization_config: compressed-tensors float-quantized")
    assert set(group.companions) == {"scale", "input_scale"} and plain == ["lm_head.weight"]


def test_compressed_tensors_naive_quantized_fp8_weights() -> None:
    """compressed-tensors writes weight-only FP8 (no activation arguments) as
    ``naive-quantized``, with the same tensors as ``float-quantized``; missing it would leave
    the F8 codes plain and load them as weights."""
    tensors = {
        "model.layers.0.mlp.down_proj.weight": ("F8_E4M3", (96, 160)),
        "model.layers.0.mlp.down_proj.weight_scale": ("BF16", (3, 5)),
    }
    config = compressed_tensors_config("block", "naive-quantized", block_structure=[32, 32])
    group = only(recognise(tensors, config)[0])
    assert (group.layout, group.block) == ("fp8-block", (32, 32))
    assert group.rule == "quantization_config: compressed-tensors naive-quantized fp8 block 32x32"


def test_modelopt_fp8() -> None:
    tensors = {
        "q.weight": ("F8_E4M3", (64, 32)), "q.weight_scale": ("F32", ()),
        "q.input_scale": ("F32", ()), "k.weight": ("F8_E4M3", (64, 32)),
        "k.weight_scale": ("F32", (64,)),
    }  # fmt: skip
    groups, _ = recognise(tensors, MODELOPT)
    assert [(g.layout, g.rule) for g in groups] == [
        ("fp8-tensor", "quantization_config: modelopt fp8 per tensor"),
        ("fp8-channel", "quantization_config: modelopt fp8 per channel"),
    ]


@pytest.mark.parametrize("config", [GPT_OSS, None])
def test_gpt_oss_experts(config: dict | None) -> None:
    tensors = {
        "model.layers.0.mlp.experts.gate_up_proj_blocks": ("U8", (32, 5760, 90, 16)),
        "model.layers.0.mlp.experts.gate_up_proj_scales": ("U8", (32, 5760, 90)),
        "model.layers.0.mlp.experts.gate_up_proj_bias": ("BF16", (32, 5760)),
    }
    groups, plain = recognise(tensors, config)
    group = only(groups)
    assert group.name == "model.layers.0.mlp.experts.gate_up_proj" and group.layout == "mxfp4"
    assert group.logical_shape == (32, 5760, 2880) and group.block == (1, 1, 32)
    assert group.parts == (
        "model.layers.0.mlp.experts.gate_up_proj_blocks",
        "model.layers.0.mlp.experts.gate_up_proj_scales",
    )
    assert group.rule == (
        "quantization_config: mxfp4" if config else "names: *_blocks + *_scales (mxfp4)"
    )
    assert plain == ["model.layers.0.mlp.experts.gate_up_proj_bias"]


def test_tensors_without_companions_or_not_fp8_stay_plain() -> None:
    tensors = {
        "a.weight": ("F8_E4M3", (4, 4)),  # no scale
        "b.weight_scale_inv": ("F32", (1, 1)),  # no codes
        "c.weight": ("I8", (4, 4)), "c.weight_scale": ("F32", (4, 1)),  # int8's, not FP8
    }  # fmt: skip
    groups, plain = recognise(tensors)
    assert [(g.name, g.layout) for g in groups] == [("c.weight", "int8")]
    assert plain == ["a.weight", "b.weight_scale_inv"]


@pytest.mark.parametrize(
    ("tensors", "config", "words", "companion"),
    [
        ({"w": ("F8_E4M3", (300, 500)), "w_scale_inv": ("F32", (3, 3))}, DEEPSEEK,
         "need [3, 4]", "w_scale_inv"),
        ({"w": ("F8_E4M3", (300, 500)), "w_scale_inv": ("F32", (3, 7))}, None,
         "need [3, 4]", "w_scale_inv"),
        ({"w": ("BF16", (256, 256)), "w_scale_inv": ("F32", (2, 2))}, DEEPSEEK,
         "codes are BF16", "w_scale_inv"),
        ({"w": ("F8_E4M3", (256, 256)), "w_scale_inv": ("I32", (2, 2))}, None,
         "scale is I32", "w_scale_inv"),
        ({"w.weight": ("F8_E4M3", (8, 8)), "w.weight_scale": ("F32", (8, 2))}, MODELOPT,
         "need [] in one scale; [8, 1] in 1x8 blocks", "w.weight_scale"),
        ({"x_blocks": ("U8", (2, 4, 16)), "x_scales": ("U8", (2, 5))}, GPT_OSS,
         "need [2, 4]", "x_scales"),
        ({"x_blocks": ("U8", (2, 4, 16)), "x_scales": ("BF16", (2, 4))}, None,
         "scales are BF16", "x_scales"),
        ({"x_blocks": ("I32", (2, 4, 16)), "x_scales": ("U8", (2, 4))}, GPT_OSS,
         "blocks are I32", "x_scales"),
    ],
)  # fmt: skip
def test_inconsistent_candidates_are_refused_naming_both(
    tensors: dict, config: dict | None, words: str, companion: str
) -> None:
    with pytest.raises(QuantizedLayoutError) as caught:
        recognise(tensors, config, path="model.safetensors")
    error = caught.value
    codes = next(name for name in tensors if name != companion)
    assert words in error.detail and error.companion == companion and error.codes == codes
    assert error.path == "model.safetensors" and codes in str(error) and companion in str(error)


def test_a_zero_point_in_a_float_group_is_refused() -> None:
    tensors = {
        "w.weight": ("F8_E4M3", (8, 8)), "w.weight_scale": ("F32", (8, 1)),
        "w.weight_zero_point": ("F8_E4M3", (8, 1)),
    }  # fmt: skip
    with pytest.raises(QuantizedLayoutError, match="zero point"):
        recognise(tensors, compressed_tensors_config("channel"))


@pytest.mark.parametrize("block", [[0, 128], [128], "128", [True, 128], [128.0, 128]])
def test_a_bad_block_size_in_the_config_is_refused(block: object) -> None:
    tensors = {"w": ("F8_E4M3", (8, 8)), "w_scale_inv": ("F32", (1, 1))}
    with pytest.raises(MetadataError, match="weight_block_size"):
        recognise(tensors, {"quant_method": "fp8", "weight_block_size": block})


def test_other_layouts_add_rules_that_see_only_unclaimed_tensors() -> None:
    seen: list[list[str]] = []

    def nvfp4_like(
        tensors: dict[str, StoredTensor], config: object, path: str | None
    ) -> list[QuantizedGroup]:
        seen.append(list(tensors))
        return [
            QuantizedGroup(
                name="n.weight", layout="nvfp4", codes="n.weight_packed",
                companions={"scale": "n.weight_scale"}, logical_shape=(4, 32), block=(1, 16),
                rule="test rule",
            )
        ]  # fmt: skip

    tensors = {
        "w": ("F8_E4M3", (8, 8)), "w_scale_inv": ("F32", (1, 1)),
        "n.weight_packed": ("U8", (4, 16)), "n.weight_scale": ("F8_E4M3", (4, 2)),
        "b": ("F32", (4,)),
    }  # fmt: skip
    groups, plain = recognise(tensors, None, rules=(*RULES, nvfp4_like))
    assert [g.layout for g in groups] == ["fp8-tensor", "nvfp4"] and plain == ["b"]
    assert seen == [["n.weight_packed", "n.weight_scale", "b"]]


def test_a_tensor_claimed_by_two_groups_is_refused() -> None:
    """An added rule that hands a tensor to two groups is caught at the second claim, which
    would otherwise list the tensor twice and dequantize it twice."""

    def claims_w(
        tensors: dict[str, StoredTensor], config: object, path: str | None
    ) -> list[QuantizedGroup]:
        group = QuantizedGroup(
            name="w", layout="fp8-tensor", codes="w", companions={"scale": "w_scale_inv"},
            logical_shape=(8, 8), block=(), rule="test",
        )  # fmt: skip
        return [group, group]

    tensors = {"w": ("F8_E4M3", (8, 8)), "w_scale_inv": ("F32", ())}
    with pytest.raises(QuantizedLayoutError, match="another group") as caught:
        recognise(tensors, None, rules=(claims_w,))
    assert caught.value.codes == "w"


def test_the_default_rules_include_nvfp4_and_int_pack() -> None:
    """The other SafeTensors layouts run from the same table, beside FP8's name rules."""
    tensors = {
        "a.weight_packed": ("U8", (4, 16)), "a.weight_scale": ("F8_E4M3", (4, 2)),
        "a.weight_global_scale": ("F32", (1,)),
        "b.weight_packed": ("I32", (4, 4)), "b.weight_scale": ("F32", (4, 1)),
        "b.weight_shape": ("I64", (2,)),
        "c.weight": ("F8_E4M3", (4, 32)), "c.weight_scale": ("F32", (4, 1)),
    }  # fmt: skip
    groups, plain = recognise(tensors)
    assert sorted(g.layout for g in groups) == ["fp8-channel", "int-pack", "nvfp4"] and plain == []


def test_dequantize_group_dispatches_nvfp4() -> None:
    import ml_dtypes
    import numpy as np

    from weightstore.quantized import dequantize_group

    tensors = {
        "a.weight_packed": ("U8", (1, 8)), "a.weight_scale": ("F8_E4M3", (1, 1)),
        "a.weight_global_scale": ("F32", (1,)),
    }  # fmt: skip
    group = only(recognise(tensors)[0])
    parts = {
        "a.weight_packed": np.full((1, 8), 0x22, np.uint8),  # 1.0, 1.0
        "a.weight_scale": np.ones((1, 1), ml_dtypes.float8_e4m3fn),
        "a.weight_global_scale": np.ones((1,), np.float32),
    }
    assert np.array_equal(dequantize_group(group, parts), np.ones((1, 16), np.float32))


def test_a_safetensors_file_read_by_weightstore_end_to_end(tmp_path: Any) -> None:
    """A DeepSeek-style and a gpt-oss-style pair written by safetensors, recognised from
    weightstore's reader header and dequantized from its arrays, equal transformers' values."""
    import numpy as np

    from tests.quantized._hf_oracles import as_numpy, deepseek_quantize, torch
    from weightstore.quantized import dequantize_group
    from weightstore.safetensors import SafetensorsReader

    safetensors_torch = need("safetensors.torch")
    finegrained = need("transformers.integrations.finegrained_fp8")
    mxfp4 = need("transformers.integrations.mxfp4")
    generator = torch.Generator().manual_seed(9)
    codes, scale = deepseek_quantize(torch.randn(200, 300, generator=generator))
    blocks = torch.randint(0, 256, (2, 8, 3, 16), dtype=torch.uint8, generator=generator)
    scales = torch.randint(110, 140, (2, 8, 3), dtype=torch.uint8, generator=generator)
    path = tmp_path / "model.safetensors"
    safetensors_torch.save_file(
        {"l.weight": codes, "l.weight_scale_inv": scale, "e.up_blocks": blocks,
         "e.up_scales": scales, "norm.weight": torch.ones(300)},
        str(path),
    )  # fmt: skip
    with SafetensorsReader.from_file(str(path)) as reader:
        header = {name: (dtype.name, shape) for name, dtype, shape, _ in reader.tensor_infos()}
        groups, plain = recognise(header)
        values = {
            group.name: dequantize_group(group, {p: reader.get(p) for p in group.parts})
            for group in groups
        }
    assert plain == ["norm.weight"]
    expected = finegrained._dequantize_fp8_weight(codes, scale, [128, 128], torch.float32)
    assert np.array_equal(values["l.weight"], as_numpy(expected))
    moe = mxfp4.convert_moe_packed_tensors(blocks, scales, dtype=torch.float32).transpose(1, 2)
    assert np.array_equal(values["e.up"], as_numpy(moe))


# --- empty codes: what the fuzzer found ---------------------------------------------------------


def test_a_channel_block_of_empty_rows_is_one_column_not_zero() -> None:
    """ModelOpt's per-channel strategy on codes of no columns took the block (1, 0) and divided
    by it (``fuzz/crashers/safetensors/ZeroDivisionError-092987da-*``: codes [2**62, 0]);
    now such rows have a one-column block, and a scale that fits no strategy is refused."""
    tensors = {"o.weight": ("F8_E4M3", (2**62, 0)), "o.weight_scale": ("I8", (2, 2))}
    with pytest.raises(QuantizedLayoutError, match="scale is I8") as caught:
        recognise(tensors, MODELOPT)
    assert (caught.value.codes, caught.value.companion) == ("o.weight", "o.weight_scale")
    tensors["o.weight_scale"] = ("F32", (2, 2))
    with pytest.raises(QuantizedLayoutError, match=r"scale has shape \[2, 2\]"):
        recognise(tensors, MODELOPT)


@pytest.mark.parametrize(
    ("config", "scale_shape"),
    [(MODELOPT, (3, 1)), (MODELOPT, (3,)), (None, (3,))],
)
def test_empty_rows_with_one_scale_each_are_a_channel_group(
    config: dict | None, scale_shape: tuple[int, ...]
) -> None:
    tensors = {"m.weight": ("F8_E4M3", (3, 0)), "m.weight_scale": ("F32", scale_shape)}
    group = only(recognise(tensors, config)[0])
    assert (group.layout, group.block, group.logical_shape) == ("fp8-channel", (1, 1), (3, 0))
    codes = np.empty((3, 0), ml_dtypes.float8_e4m3fn)
    parts = {"m.weight": codes, "m.weight_scale": np.ones(scale_shape, "f4")}
    assert dequantize_group(group, parts).shape == (3, 0)


def test_a_scale_grid_of_empty_codes_implies_no_block() -> None:
    """Without a config the block is read from the grid; codes of no rows divide into any
    grid, which would give a zero-row block: DeepSeek's is tried instead, and refused."""
    tensors = {"w": ("F8_E4M3", (0, 256)), "w_scale_inv": ("F32", (2, 2))}
    with pytest.raises(QuantizedLayoutError, match=r"in 128x128 blocks need \[0, 2\]"):
        recognise(tensors)
