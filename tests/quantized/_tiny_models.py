"""Tiny transformers models quantized by compressed-tensors' own producer, and its own loaders
as oracles, for the end-to-end quantized tests.

The producer is what llm-compressor runs, less the calibration data: `apply_quantization_config`
attaches a scheme's parameters to every Linear but the head, a min-max weight observer fills
them (`calculate_qparams`, and `generate_gparam` for NVFP4's global scale, as llm-compressor's
memoryless min-max observer does), then `ModelCompressor.compress_model`, ``save_pretrained``
and ``update_config`` write ``model.safetensors`` and a ``config.json`` whose
``quantization_config`` is what a Hub checkpoint carries. Weight-only schemes, or activations
quantized dynamically, need no activation statistics.

Two oracles read what was written:

- `transformers_dequantized`: ``from_pretrained`` with ``dequantize=True``, the way users load
  such a checkpoint on a CPU. compressed-tensors dequantizes in the scale's dtype (bfloat16
  here) or, for NVFP4, always in bfloat16, even into a float32 model.
- `float32_dequantized`: the same decompressors given float32 scales (exact: the stored
  bfloat16 and E4M3 scales widen without rounding), NVFP4 through the two calls its
  decompressor makes, at float32: the formula evaluated in float32.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Final, NamedTuple

from tests._optional import need

torch = need("torch")
transformers = need("transformers")
quantization = need("compressed_tensors.quantization")
compressors = need("compressed_tensors.compressors")
nvfp4_helpers = need("compressed_tensors.compressors.nvfp4.helpers")
qparams = need("compressed_tensors.quantization.utils.helpers")
forward = need("compressed_tensors.quantization.lifecycle.forward")
safetensors_torch = need("safetensors.torch")

SEED: Final = 0
HEAD: Final = "lm_head"  # left float, as llm-compressor's recipes leave it
TOKENS: Final = ((1, 17, 42, 99, 3, 127, 64, 8, 77, 23, 5, 110, 31, 0, 56, 90),)
"""Fixed token ids the logits are computed on (any in the vocabulary of 128)."""


class Scheme(NamedTuple):
    """A compressed-tensors preset with the changes a 64-wide model needs, and what it stores."""

    preset: str
    weights: dict[str, Any]  # fields of the preset's weight arguments to replace
    weight_only: bool  # drop the preset's activation arguments
    stored_format: str  # the ``format`` compressed-tensors infers for it
    layout: str  # the weightstore layout its groups get


SCHEMES: Final = {
    "int4-group32": Scheme("W4A16", {"group_size": 32}, False, "pack-quantized", "int-pack"),
    "int4-asym-group32": Scheme(
        "W4A16_ASYM", {"group_size": 32}, False, "pack-quantized", "int-pack"
    ),
    "fp8-channel": Scheme("FP8_DYNAMIC", {}, False, "float-quantized", "fp8-channel"),
    "fp8-block32": Scheme(
        "FP8_BLOCK", {"block_structure": [32, 32]}, False, "float-quantized", "fp8-block"
    ),
    "fp8-block32-weight-only": Scheme(
        "FP8_BLOCK", {"block_structure": [32, 32]}, True, "naive-quantized", "fp8-block"
    ),
    "nvfp4": Scheme("NVFP4A16", {}, False, "nvfp4-pack-quantized", "nvfp4"),
    "int8-channel": Scheme("W8A8", {}, False, "int-quantized", "int8"),
    "int8-asym-group32": Scheme(
        "W8A8",
        {"strategy": "group", "group_size": 32, "symmetric": False},
        False,
        "int-quantized",
        "int8",
    ),
}
"""Name -> scheme. W4A16 (int4, groups of 32, symmetric and with packed zero points), FP8 per
channel with dynamic per-token activations (FP8_DYNAMIC), DeepSeek-style FP8 blocks shrunk to
32x32 (128 would be one block per tensor here), the same weight-only, NVFP4A16, and W8A8 (int8
weights per channel, activations per token, dynamic) with its weights also asymmetric in groups
of 32."""


def tiny_config() -> Any:
    """A Llama of hidden size 64, 2 layers, vocabulary 128: 14 Linear layers and a head."""
    return transformers.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        tie_word_embeddings=False,
    )  # fmt: skip


def float_model(dtype: Any) -> Any:
    """The float model (weights from `SEED`), built in `dtype`.

    Built with ``from_config(dtype=)``, not ``.to(dtype)``: the latter also casts the rotary
    ``inv_freq`` buffer, which ``from_pretrained`` keeps in float32, and the logits then differ
    by a bfloat16 ulp with identical weights.
    """
    torch.manual_seed(SEED)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config(), dtype=dtype)
    return model.eval()


def logits(model: Any) -> Any:
    """`model`'s logits on `TOKENS`, in the model's dtype."""
    with torch.no_grad():
        return model(torch.tensor(TOKENS)).logits


def _scheme(name: str) -> Any:
    spec = SCHEMES[name]
    preset = quantization.preset_name_to_scheme(spec.preset, ["Linear"])
    weights = preset.weights.model_copy(update=spec.weights)
    update: dict[str, Any] = {"weights": weights}
    if spec.weight_only:
        update["input_activations"] = None
    return preset.model_copy(update=update)


def _observe_weights(module: Any) -> None:
    """Fill `module`'s weight scale (and zero point, global scale) from the weight's min and
    max over each block its strategy defines."""
    args = module.quantization_scheme.weights
    weight = module.weight.detach()
    rows, cols = weight.shape
    strategy = str(getattr(args.strategy, "value", args.strategy))
    if strategy == "tensor":
        low, high = weight.amin(), weight.amax()
    elif strategy == "channel":
        low, high = weight.amin(-1, keepdim=True), weight.amax(-1, keepdim=True)
    elif strategy in ("group", "tensor_group"):
        groups = weight.reshape(rows, cols // args.group_size, args.group_size)
        low, high = groups.amin(-1), groups.amax(-1)
    elif strategy == "block":
        block_rows, block_cols = args.block_structure
        blocks = weight.reshape(rows // block_rows, block_rows, cols // block_cols, block_cols)
        low, high = blocks.amin((1, 3)), blocks.amax((1, 3))
    else:
        raise AssertionError(f"no observer for strategy {strategy}")
    global_scale = None
    if strategy == "tensor_group":
        global_scale = qparams.generate_gparam(weight.amin(), weight.amax())
        module.weight_global_scale.data.copy_(global_scale)
    scale, zero_point = qparams.calculate_qparams(low, high, args, global_scale=global_scale)
    module.weight_scale.data.copy_(scale.reshape(module.weight_scale.shape))
    if hasattr(module, "weight_zero_point"):
        module.weight_zero_point.data.copy_(zero_point.reshape(module.weight_zero_point.shape))


def save_quantized(directory: Path, scheme: str) -> list[str]:
    """Quantize the bfloat16 `float_model` with `scheme` and save it compressed into
    `directory`; returns the quantized Linear layers' weight names."""
    model = float_model(torch.bfloat16)
    config = quantization.QuantizationConfig(
        config_groups={"group_0": _scheme(scheme)}, ignore=[HEAD]
    )
    quantization.apply_quantization_config(model, config, show_progress=False)
    names = []
    for name, module in model.named_modules():
        if getattr(module, "quantization_scheme", None) is not None:
            _observe_weights(module)
            module.quantization_status = quantization.QuantizationStatus.FROZEN
            names.append(name + ".weight")
    compressor = compressors.ModelCompressor.from_pretrained_model(model)
    compressor.compress_model(model)
    model.save_pretrained(directory)
    compressor.update_config(str(directory))
    return names


def quantization_config(directory: Path) -> dict[str, Any]:
    """The ``quantization_config`` of `directory`'s ``config.json``."""
    config: dict[str, Any] = json.loads((directory / "config.json").read_text())
    return dict(config["quantization_config"])


def transformers_dequantized(directory: Path, dtype: Any) -> Any:
    """`directory`'s checkpoint as transformers loads it dequantized, into a `dtype` model."""
    ct_config = transformers.CompressedTensorsConfig(dequantize=True)
    with warnings.catch_warnings():  # "the model's quantization_config will be used", as meant
        warnings.simplefilter("ignore")
        model = transformers.AutoModelForCausalLM.from_pretrained(
            directory, dtype=dtype, quantization_config=ct_config
        )
    return model.eval()


def _stored(directory: Path) -> dict[str, Any]:
    """`directory`'s ``model.safetensors``, read by the safetensors package."""
    stored: dict[str, Any] = safetensors_torch.load_file(str(directory / "model.safetensors"))
    return stored


def _module_states(stored: dict[str, Any], weights: list[str]) -> dict[str, dict[str, Any]]:
    """Each quantized weight's module-local stored tensors (``weight_packed``, ...)."""
    states: dict[str, dict[str, Any]] = {weight: {} for weight in weights}
    for name, tensor in stored.items():
        prefix, _, local = name.rpartition(".")
        if prefix + ".weight" in states:
            states[prefix + ".weight"][local] = tensor
    return states


def _float32_weight(state: dict[str, Any], scheme: Any) -> Any:
    if scheme.format == "nvfp4-pack-quantized":
        packed = state["weight_packed"]
        rows, half = packed.shape
        codes = nvfp4_helpers.unpack_fp4_from_uint8(packed, rows, 2 * half, torch.float32)
        return forward.dequantize(
            x_q=codes, scale=state["weight_scale"].float(), args=scheme.weights,
            global_scale=state["weight_global_scale"], dtype=torch.float32,
        )  # fmt: skip
    compressor = compressors.BaseCompressor.get_value_from_registry(scheme.format)
    widened = {**state, "weight_scale": state["weight_scale"].float()}
    return compressor.decompress(widened, scheme)["weight"]


def float32_dequantized(directory: Path, weights: list[str]) -> Any:
    """A float32 model holding `directory`'s checkpoint, `weights` dequantized by
    compressed-tensors in float32 (module docstring), the rest widened from bfloat16."""
    config = quantization.QuantizationConfig.model_validate(quantization_config(directory))
    [scheme] = config.config_groups.values()
    stored = _stored(directory)
    state = {name: tensor.float() for name, tensor in stored.items()}
    for weight, parts in _module_states(stored, weights).items():
        for local in parts:  # FP8 codes are ``weight`` itself: gone first, then replaced
            del state[weight.removesuffix("weight") + local]
        state[weight] = _float32_weight(parts, scheme)
        assert state[weight].dtype == torch.float32
    model = float_model(torch.float32)
    model.load_state_dict(state, strict=True)
    return model
