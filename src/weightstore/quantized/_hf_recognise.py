"""Which stored tensors of a SafeTensors-style checkpoint form quantized groups, and by which rule.

A checkpoint that is not a quantized format stores a quantized tensor as several tensors tied
by a naming convention. `recognise` reads only names, dtypes and shapes (a header is enough,
no NumPy) and the checkpoint's ``quantization_config`` when there is one:

- ``quant_method: fp8`` (``weight_block_size``): ``N`` F8 + ``N_scale_inv``; fp8-block, or
  fp8-tensor where the config names no block.
- ``compressed-tensors`` ``float-quantized`` (or ``naive-quantized``, which it writes for FP8
  weights without activation quantization), and ``modelopt`` FP8: ``P.weight`` F8 +
  ``P.weight_scale``; the layout is the strategy (tensor, channel, block, group) the scale's
  shape fits.
- ``quant_method: mxfp4`` (gpt-oss): ``X_blocks`` U8 + ``X_scales`` U8; mxfp4.
- no config: the same pairs by names, F8 codes only, the block read from the shapes.

``P.input_scale`` (an activation scale) joins an FP8 group as its ``input_scale`` companion.
Each rule is a function of the tensors not yet claimed and the config; `RULES` runs them in
order, and other layouts add theirs to that tuple. A candidate whose parts are consistent becomes
a group; one whose parts disagree (a scale shape the codes' blocks do not imply, a dtype
outside the scheme) raises `QuantizedLayoutError`; a tensor without companions stays plain.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Final

from weightstore.errors import MetadataError, QuantizedLayoutError
from weightstore.quantized._group import QuantizedGroup
from weightstore.quantized._hf_int import rule_int_pack
from weightstore.quantized._hf_int8 import rule_int8
from weightstore.quantized._hf_nvfp4 import rule_nvfp4
from weightstore.quantized._hf_shapes import (
    FP8_CODE_DTYPES,
    check_fp8,
    check_fp8_dtypes,
    check_mxfp4,
    fp8_accepts_scale,
    fp8_row_block,
    fp8_scale_mismatch,
    mxfp4_logical_shape,
)

__all__ = ["RULES", "Rule", "StoredTensor", "recognise"]

StoredTensor = tuple[str, tuple[int, ...]]
"""A stored tensor as a header describes it: weightstore dtype name and shape."""

Rule = Callable[
    [Mapping[str, StoredTensor], Mapping[str, object] | None, str | None], list[QuantizedGroup]
]
"""Find groups among the unclaimed tensors, given the ``quantization_config`` (or ``None``)
and the file (for errors); raise `QuantizedLayoutError` on an inconsistent candidate."""

DEEPSEEK_BLOCK: Final = (128, 128)
"""The block every FP8 block-scaled checkpoint published so far uses; tried first when a
checkpoint names no block size."""


def recognise(
    tensors: Mapping[str, StoredTensor],
    quantization_config: Mapping[str, object] | None = None,
    *,
    rules: Sequence[Rule] | None = None,
    path: str | None = None,
) -> tuple[list[QuantizedGroup], list[str]]:
    """The quantized groups among `tensors` (name -> (dtype name, shape)) and the names left
    plain, in their order; `rules` default to `RULES`.

    Raises:
        QuantizedLayoutError: a candidate group whose parts disagree, naming both tensors, or
            one that claims a tensor another group holds.
        MetadataError: a ``quantization_config`` value that cannot be a block size.
    """
    remaining = dict(tensors)
    groups: list[QuantizedGroup] = []
    for rule in RULES if rules is None else rules:
        for group in rule(remaining, quantization_config, path):
            taken = next((part for part in group.parts if part not in remaining), None)
            if taken is not None:
                raise QuantizedLayoutError(
                    "a part already belongs to another group (or is no stored tensor)",
                    group=group.name,
                    codes=group.codes,
                    companion=None if taken == group.codes else taken,
                    path=path,
                )
            for part in group.parts:
                del remaining[part]
            groups.append(group)
    return groups, [name for name in tensors if name in remaining]


def _method(config: Mapping[str, object] | None) -> str | None:
    method = None if config is None else config.get("quant_method")
    return method.lower() if isinstance(method, str) else None


def _fp8_layout(block: tuple[int, ...], shape: tuple[int, ...]) -> str:
    if not block or (len(shape) == 2 and block == shape):
        return "fp8-tensor"
    if len(shape) == 2 and block == (1, fp8_row_block(shape[1])):
        return "fp8-channel"
    return "fp8-block"


def _block_text(block: tuple[int, ...], shape: tuple[int, ...]) -> str:
    layout = _fp8_layout(block, shape)
    if layout == "fp8-block":
        return f"fp8 block {block[0]}x{block[1]}"
    return layout.replace("-", " per ")


def _input_scale(codes: str, tensors: Mapping[str, StoredTensor]) -> dict[str, str]:
    """``P.input_scale`` (or ``P.activation_scale``) beside ``P.weight``, as a companion."""
    prefix = codes[: -len("weight")] if codes.endswith("weight") else None
    for suffix in ("input_scale", "activation_scale"):
        if prefix is not None and prefix + suffix in tensors:
            return {"input_scale": prefix + suffix}
    return {}


def _fp8_group(
    codes: str,
    scale: str,
    block: tuple[int, ...],
    tensors: Mapping[str, StoredTensor],
    rule: str,
    path: str | None,
) -> QuantizedGroup:
    """The group of `codes` and `scale` in `block`s, checked."""
    (codes_dtype, codes_shape), (scale_dtype, scale_shape) = tensors[codes], tensors[scale]
    check_fp8(
        codes, codes, codes_dtype, codes_shape, scale, scale_dtype, scale_shape, block, path=path
    )
    return QuantizedGroup(
        name=codes,
        layout=_fp8_layout(block, codes_shape),
        codes=codes,
        companions={"scale": scale, **_input_scale(codes, tensors)},
        logical_shape=codes_shape,
        block=block,
        rule=rule,
    )


def _pairs(tensors: Mapping[str, StoredTensor], suffix: str) -> Iterator[tuple[str, str]]:
    """(codes, companion) for every name that has a companion ``name + suffix``."""
    for name in tensors:
        if name + suffix in tensors:
            yield name, name + suffix


def _config_block(config: Mapping[str, object], key: str, path: str | None) -> tuple[int, ...]:
    """A config's block size: two positive integers, or ``()`` where it names none."""
    value = config.get(key)
    if value is None:
        return ()
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 2
        or not all(isinstance(size, int) and not isinstance(size, bool) for size in value)
        or not all(size > 0 for size in value)
    ):
        raise MetadataError(
            f"quantization_config {key} is {value!r}; a block size is two positive integers",
            path=path,
        )
    return (value[0], value[1])


def fp8_config_rule(
    tensors: Mapping[str, StoredTensor], config: Mapping[str, object] | None, path: str | None
) -> list[QuantizedGroup]:
    """transformers' ``FineGrainedFP8Config`` (DeepSeek, Qwen3-FP8): every ``N`` that has an
    ``N_scale_inv`` is FP8 in ``weight_block_size`` blocks (one scale when it names none)."""
    if _method(config) != "fp8" or config is None:
        return []
    block = _config_block(config, "weight_block_size", path)
    rule = "quantization_config: fp8 " + (f"block {block[0]}x{block[1]}" if block else "tensor")
    return [
        _fp8_group(codes, scale, block, tensors, rule, path)
        for codes, scale in list(_pairs(tensors, "_scale_inv"))
    ]


_FLOAT_FORMATS: Final = ("float-quantized", "naive-quantized")
"""compressed-tensors formats that store float weights as codes of their own dtype beside a
scale: ``float-quantized`` where activations are quantized too, ``naive-quantized`` (its
fallback compressor, the same tensors) for weight-only FP8 such as FP8 blocks without
activation arguments."""


def _compressed_float_strategies(
    config: Mapping[str, object],
) -> list[tuple[Mapping[str, object], str]]:
    """The weight arguments and stored format of every compressed-tensors group that stores
    float codes as they are (`_FLOAT_FORMATS`)."""
    found: list[tuple[Mapping[str, object], str]] = []
    default_format = config.get("format")
    groups = config.get("config_groups")
    if not isinstance(groups, Mapping):
        return found
    for scheme in groups.values():
        if not isinstance(scheme, Mapping):
            continue
        weights = scheme.get("weights")
        stored = scheme.get("format") or default_format
        is_float = isinstance(weights, Mapping) and weights.get("type", "float") == "float"
        if stored in _FLOAT_FORMATS and is_float and isinstance(weights, Mapping):
            found.append((weights, str(stored)))
    return found


def _strategy_block(
    weights: Mapping[str, object], shape: tuple[int, ...], path: str | None
) -> tuple[int, ...] | None:
    strategy = weights.get("strategy")
    columns = shape[-1] if shape else 1
    if strategy == "tensor":
        return ()
    if strategy == "channel":
        return (1, fp8_row_block(columns))
    if strategy == "block":
        return _config_block(weights, "block_structure", path) or None
    group_size = weights.get("group_size")
    if strategy == "group" and isinstance(group_size, int) and group_size > 0:
        return (1, group_size)
    return None


def _float_quantized_group(
    codes: str,
    scale: str,
    schemes: Sequence[tuple[Mapping[str, object], str]],
    tensors: Mapping[str, StoredTensor],
    path: str | None,
) -> QuantizedGroup:
    """The group of `codes` and `scale` under the first scheme (weight arguments, and the
    origin its rule names) whose blocks fit the scale."""
    codes_shape, scale_shape = tensors[codes][1], tensors[scale][1]
    blocks = [(_strategy_block(weights, codes_shape, path), origin) for weights, origin in schemes]
    fitting = [
        (b, origin)
        for b, origin in blocks
        if b is not None and fp8_accepts_scale(codes_shape, b, scale_shape)
    ]
    prefix = codes[: -len("weight")]
    if prefix + "weight_zero_point" in tensors:
        raise QuantizedLayoutError(
            "a zero point in an FP8 group (asymmetric FP8 is no layout weightstore reads)",
            group=codes,
            codes=codes,
            companion=prefix + "weight_zero_point",
            path=path,
        )
    if not fitting:
        (codes_dtype, _), (scale_dtype, _) = tensors[codes], tensors[scale]
        check_fp8_dtypes(codes, codes, codes_dtype, scale, scale_dtype, path=path)
        candidates = [b for b, _ in blocks if b is not None]
        raise fp8_scale_mismatch(
            codes, codes, codes_shape, scale, scale_shape, candidates, path=path
        )
    block, origin = fitting[0]
    rule = f"quantization_config: {origin} {_block_text(block, codes_shape)}"
    return _fp8_group(codes, scale, block, tensors, rule, path)


def fp8_scale_rule(
    tensors: Mapping[str, StoredTensor], config: Mapping[str, object] | None, path: str | None
) -> list[QuantizedGroup]:
    """compressed-tensors ``float-quantized`` (or ``naive-quantized``) and ModelOpt FP8:
    ``P.weight`` F8 with ``P.weight_scale`` whose shape one of the config's strategies implies."""
    method = _method(config)
    if config is None or method not in ("compressed-tensors", "modelopt"):
        return []
    if method == "modelopt":
        algo = config.get("quant_algo")
        if not (isinstance(algo, str) and "FP8" in algo.upper()):
            return []
        schemes: list[tuple[Mapping[str, object], str]] = [
            ({"strategy": "tensor"}, "modelopt"),
            ({"strategy": "channel"}, "modelopt"),
        ]
    else:
        schemes = [
            (weights, f"compressed-tensors {stored}")
            for weights, stored in _compressed_float_strategies(config)
        ]
    if not schemes:
        return []
    return [
        _float_quantized_group(codes, scale, schemes, tensors, path)
        for codes, scale in list(_pairs(tensors, "_scale"))
        if codes.endswith("weight") and tensors[codes][0] in FP8_CODE_DTYPES
    ]


def _mxfp4_group(
    blocks: str, tensors: Mapping[str, StoredTensor], rule: str, path: str | None
) -> QuantizedGroup:
    base = blocks[: -len("_blocks")]
    scales = base + "_scales"
    (blocks_dtype, blocks_shape), (scales_dtype, scales_shape) = tensors[blocks], tensors[scales]
    check_mxfp4(
        base, blocks, blocks_dtype, blocks_shape, scales, scales_dtype, scales_shape, path=path
    )
    return QuantizedGroup(
        name=base,
        layout="mxfp4",
        codes=blocks,
        companions={"scale": scales},
        logical_shape=mxfp4_logical_shape(blocks_shape),
        block=(*(1,) * (len(blocks_shape) - 2), 32),
        rule=rule,
    )


def _mxfp4_candidates(tensors: Mapping[str, StoredTensor]) -> list[str]:
    return [
        name
        for name in tensors
        if name.endswith("_blocks") and name[: -len("_blocks")] + "_scales" in tensors
    ]


def mxfp4_config_rule(
    tensors: Mapping[str, StoredTensor], config: Mapping[str, object] | None, path: str | None
) -> list[QuantizedGroup]:
    """gpt-oss (``quant_method: mxfp4``): every ``X_blocks`` with an ``X_scales``."""
    if _method(config) != "mxfp4":
        return []
    rule = "quantization_config: mxfp4"
    return [_mxfp4_group(name, tensors, rule, path) for name in _mxfp4_candidates(tensors)]


def _inferred_fp8_block(
    codes_shape: tuple[int, ...], scale_shape: tuple[int, ...]
) -> tuple[int, ...]:
    """The block a scale's shape implies: one scale, one per row, DeepSeek's 128x128, or the
    grid's exact division of the codes; DeepSeek's where none fits (the check then says why)."""
    if math.prod(scale_shape) == 1 and len(scale_shape) <= 2:
        return ()
    matrix = (1,) * max(0, 2 - len(codes_shape)) + codes_shape
    rows, columns = matrix[-2:]
    if len(codes_shape) == 2 and scale_shape == (rows,):
        return (1, fp8_row_block(columns))
    if fp8_accepts_scale(codes_shape, DEEPSEEK_BLOCK, scale_shape):
        return DEEPSEEK_BLOCK
    if len(scale_shape) == len(matrix) and scale_shape[:-2] == matrix[:-2]:
        grid_rows, grid_columns = scale_shape[-2:]
        nonzero = grid_rows and grid_columns and rows and columns  # empty codes imply no block
        if nonzero and rows % grid_rows == 0 and columns % grid_columns == 0:
            return (rows // grid_rows, columns // grid_columns)
    return DEEPSEEK_BLOCK


def names_rule(
    tensors: Mapping[str, StoredTensor], config: Mapping[str, object] | None, path: str | None
) -> list[QuantizedGroup]:
    """Without a config: F8 ``N`` with ``N_scale_inv`` or ``N_scale``, the block read from the
    scale's shape; ``X_blocks`` with ``X_scales``."""
    if config is not None:
        return []
    groups: list[QuantizedGroup] = []
    claimed: set[str] = set()
    for suffix in ("_scale_inv", "_scale"):
        for codes, scale in list(_pairs(tensors, suffix)):
            if codes in claimed or scale in claimed or tensors[codes][0] not in FP8_CODE_DTYPES:
                continue
            block = _inferred_fp8_block(tensors[codes][1], tensors[scale][1])
            rule = f"names: *{suffix} beside F8 codes ({_block_text(block, tensors[codes][1])})"
            group = _fp8_group(codes, scale, block, tensors, rule, path)
            claimed.update(group.parts)
            groups.append(group)
    rule = "names: *_blocks + *_scales (mxfp4)"
    groups.extend(_mxfp4_group(name, tensors, rule, path) for name in _mxfp4_candidates(tensors))
    return groups


def nvfp4_rule(
    tensors: Mapping[str, StoredTensor], config: Mapping[str, object] | None, path: str | None
) -> list[QuantizedGroup]:
    """NVFP4, compressed-tensors ``nvfp4-pack-quantized`` and ModelOpt (`_hf_nvfp4`)."""
    return rule_nvfp4(tensors, config)


def int_pack_rule(
    tensors: Mapping[str, StoredTensor], config: Mapping[str, object] | None, path: str | None
) -> list[QuantizedGroup]:
    """compressed-tensors ``pack-quantized`` int codes (`_hf_int`)."""
    return rule_int_pack(tensors, config)


def int8_rule(
    tensors: Mapping[str, StoredTensor], config: Mapping[str, object] | None, path: str | None
) -> list[QuantizedGroup]:
    """compressed-tensors ``int-quantized`` int8 codes, or I8 ``weight`` + ``weight_scale``
    without a config (`_hf_int8`)."""
    return rule_int8(tensors, config, path)


RULES: Final[tuple[Rule, ...]] = (
    fp8_config_rule,
    fp8_scale_rule,
    mxfp4_config_rule,
    nvfp4_rule,
    int_pack_rule,
    int8_rule,
    names_rule,
)
"""The rules `recognise` runs, in order; each sees only the tensors earlier ones left. The
config rules come first; the name rules of the F8 and MXFP4 layouts last, as they match
whatever pairs the others left (NVFP4 and int codes are U8, I32 and I8, never F8)."""
