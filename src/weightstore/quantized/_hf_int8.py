"""compressed-tensors ``int-quantized`` (W8A8 int8): one int8 code per value, beside its scale.

llm-compressor's W8A8 (SmoothQuant + GPTQ) checkpoints store a linear layer ``<m>`` as:

- ``<m>.weight`` I8, the logical shape itself (codes of 8 bits or fewer, one per byte).
- ``<m>.weight_scale`` F32, BF16 or F16: ``(*lead, 1)`` per channel (the W8A8 preset),
  ``(*lead, cols / group_size)`` per group, ``(1,)`` or ``()`` per tensor; ``(rows,)`` is
  taken as per channel too.
- ``<m>.weight_zero_point`` I8 (or I32), the scale's shape, when asymmetric.
- ``<m>.input_scale`` and ``<m>.input_zero_point`` for static activation quantization: they
  travel with the group, and dequantization does not use them.

A value is ``(code - zero_point) * scale``, as compressed-tensors' ``_dequantize`` computes it
in the scale's dtype. Codes and zero points are integers of at most 8 bits, so the difference
(at most 9 bits) is exact in every scale dtype, and its float32 product with a 16-bit scale is
exact too: the float32 product rounded once to the scale's dtype is bit for bit what
compressed-tensors returns.

Recognition. Under a compressed-tensors config, only a config group whose format is
``int-quantized`` (or ``naive-quantized``, whose tensors are the same) with int weights makes
``weight`` I8 + ``weight_scale`` a group, and the scale's shape must fit one of its
strategies; a config naming another method or format yields none. Without a config the names
alone decide: an I8 ``weight`` with a float ``weight_scale`` is quantized under every
convention that writes them (compressed-tensors, ModelOpt, Quark), and loading its codes as
weights would be silently wrong, so it is a group when the scale's shape is one of the three
above and is refused (`QuantizedLayoutError`) when it is not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np

from weightstore.errors import QuantizedLayoutError
from weightstore.quantized._group import QuantizedGroup
from weightstore.quantized._hf_pack import (
    TensorInfo,
    companion_prefix,
    dtype_name,
    elements,
    output_dtype,
    row_chunks,
)

__all__ = ["LAYOUT", "dequantize_int8", "rule_int8"]

LAYOUT: Final = "int8"
"""The layout's name: what is stored (one int8 code per value), as ``int-pack`` names its
packing; W4A8 checkpoints store 4-bit codes the same way."""
_FORMATS: Final = ("int-quantized", "naive-quantized")
_SCALE_DTYPES: Final = ("F32", "BF16", "F16")
_ZERO_DTYPES: Final = ("I8", "I32")
_COMPANIONS: Final = {
    "scale": "weight_scale",
    "zero_point": "weight_zero_point",
    "input_scale": "input_scale",
    "input_zero_point": "input_zero_point",
}


def _config_strategies(config: Mapping[str, Any] | None) -> list[Mapping[str, Any]] | None:
    """The weight arguments of every int-quantized config group ([] when the config names
    another method or format), or None when there is no config to go by."""
    if not isinstance(config, Mapping) or config.get("quant_method") is None:
        return None
    if config.get("quant_method") != "compressed-tensors":
        return []
    found = []
    groups = config.get("config_groups")
    for entry in groups.values() if isinstance(groups, Mapping) else ():
        if not isinstance(entry, Mapping):
            continue
        weights = entry.get("weights")
        stored = entry.get("format") or config.get("format")
        if stored in _FORMATS and isinstance(weights, Mapping) and weights.get("type") == "int":
            found.append(weights)
    return found


def _block(shape: tuple[int, ...], scale: tuple[int, ...]) -> tuple[int, ...] | None:
    """The block `scale`'s shape gives `shape`'s codes: ``()`` per tensor, ``(1.., cols)``
    per channel, ``(1.., cols / groups)`` per group; None when it fits none."""
    if elements(scale) == 1 and len(scale) <= 1:
        return ()
    cols, lead = shape[-1], shape[:-1]
    if len(shape) == 2 and scale == (shape[0],):
        scale = (shape[0], 1)
    if len(scale) == len(shape) and scale[:-1] == lead and scale[-1] >= 1 and cols % scale[-1] == 0:
        return (*(1 for _ in lead), cols // scale[-1])
    return None


def _strategy_fits(
    weights: Mapping[str, Any], shape: tuple[int, ...], block: tuple[int, ...]
) -> bool:
    strategy = weights.get("strategy")
    if strategy == "tensor":
        return block == ()
    if strategy == "channel":
        return block != () and block[-1] == shape[-1]
    group_size = weights.get("group_size")
    return strategy == "group" and block != () and block[-1] == group_size


def _check(group: QuantizedGroup, infos: Mapping[str, TensorInfo], path: str | None) -> None:
    """Dtypes and shapes of every part against the codes; the first disagreement raised."""
    codes_dtype, shape = infos[group.codes]
    scale_name = group.companions["scale"]
    scale_dtype, scale_shape = infos[scale_name]

    def refuse(companion: str | None, detail: str) -> QuantizedLayoutError:
        return QuantizedLayoutError(
            f"{LAYOUT}: {detail}", group=group.name, codes=group.codes, companion=companion,
            path=path,
        )  # fmt: skip

    if codes_dtype != "I8" or len(shape) < 1:
        raise refuse(None, f"codes are {codes_dtype} {list(shape)}, not I8 of at least one dim")
    if scale_dtype not in _SCALE_DTYPES:
        raise refuse(scale_name, f"scale is {scale_dtype}, not one of {', '.join(_SCALE_DTYPES)}")
    if _block(shape, scale_shape) is None:
        raise refuse(
            scale_name,
            f"scale shape {list(scale_shape)} is not per tensor ([1]), per channel "
            f"({[*shape[:-1], 1]}) or per group (groups dividing {shape[-1]} columns) for "
            f"codes {list(shape)}",
        )
    zero_name = group.companions.get("zero_point")
    if zero_name is not None:
        zero_dtype, zero_shape = infos[zero_name]
        if zero_dtype not in _ZERO_DTYPES:
            raise refuse(zero_name, f"zero point is {zero_dtype}, not I8 or I32")
        if elements(zero_shape) != elements(scale_shape) or (
            elements(scale_shape) > 1 and zero_shape != scale_shape
        ):
            raise refuse(
                zero_name,
                f"zero point shape {list(zero_shape)}, the scale's is {list(scale_shape)}",
            )


def rule_int8(
    tensors: Mapping[str, TensorInfo],
    quantization_config: Mapping[str, Any] | None,
    path: str | None = None,
) -> list[QuantizedGroup]:
    """The int8 groups among `tensors` (stored name -> (dtype name, shape)), by the rules of
    the module docstring.

    Raises:
        QuantizedLayoutError: a candidate whose parts disagree, or whose scale fits none of
            the config's strategies, naming the codes and the companion at fault.
    """
    strategies = _config_strategies(quantization_config)
    if strategies is not None and not strategies:
        return []
    rule = (
        "names: weight I8 + weight_scale"
        if strategies is None
        else "quantization_config: compressed-tensors int-quantized"
    )
    found: list[QuantizedGroup] = []
    for name, (dtype, shape) in tensors.items():
        prefix = companion_prefix(name, "weight")
        if prefix is None or dtype != "I8" or prefix + "weight_scale" not in tensors:
            continue
        companions = {r: prefix + s for r, s in _COMPANIONS.items() if prefix + s in tensors}
        base = QuantizedGroup(
            name=name, layout=LAYOUT, codes=name, companions=companions, logical_shape=shape,
            block=(), rule=rule,
        )  # fmt: skip
        _check(base, tensors, path)
        block = _block(shape, tensors[companions["scale"]][1])
        assert block is not None  # _check refused the rest
        if strategies is not None and not any(_strategy_fits(w, shape, block) for w in strategies):
            raise QuantizedLayoutError(
                f"{LAYOUT}: scale shape {list(tensors[companions['scale']][1])} fits none of the "
                "config's weight strategies "
                f"({', '.join(str(w.get('strategy')) for w in strategies)})",
                group=name, codes=name, companion=companions["scale"], path=path,
            )  # fmt: skip
        found.append(base.replace(block=block))
    return found


def dequantize_int8(
    group: QuantizedGroup, parts: Mapping[str, np.ndarray], dtype: Any = None
) -> np.ndarray:
    """The values of int8 `group` in `dtype` (float32 by default; float16 and bfloat16 are
    the float32 product rounded once), a chunk of rows at a time into the output.

    Raises:
        QuantizedLayoutError: a part missing, or parts that disagree (before allocating).
        DTypeError: `dtype` is not float32, float16 or bfloat16.
    """
    wanted = output_dtype(dtype, group)
    names = [group.codes, group.companions["scale"]]
    names += [group.companions[r] for r in ("zero_point",) if r in group.companions]
    missing = next((name for name in names if name not in parts), None)
    if missing is not None:
        raise QuantizedLayoutError(
            f"{LAYOUT}: needs its part {missing!r}, which was not given",
            group=group.name, codes=group.codes, companion=missing,
        )  # fmt: skip
    arrays = {name: np.asarray(parts[name]) for name in names}
    infos = {n: (dtype_name(a), a.shape) for n, a in arrays.items()}
    _check(group, infos, None)
    codes = arrays[group.codes]
    if codes.shape != group.logical_shape:
        raise QuantizedLayoutError(
            f"{LAYOUT}: codes are {list(codes.shape)}, the group says {list(group.logical_shape)}",
            group=group.name, codes=group.codes,
        )  # fmt: skip
    shape = codes.shape
    cols, rows = shape[-1], elements(shape[:-1])
    scale = arrays[group.companions["scale"]].astype(np.float32)
    groups = scale.shape[-1] if scale.ndim == len(shape) and scale.size > 1 else 1
    scale = np.broadcast_to(scale.reshape(-1, groups), (rows, groups))
    zero = None
    if "zero_point" in group.companions:
        zero_array = arrays[group.companions["zero_point"]].astype(np.float32)
        zero = np.broadcast_to(zero_array.reshape(-1, groups), (rows, groups))
    flat = codes.reshape(rows, cols)
    out = np.empty((rows, cols), dtype=wanted)
    for chunk in row_chunks(rows, cols):
        values = flat[chunk].astype(np.float32)
        blocks = values.reshape(values.shape[0], groups, cols // groups)
        if zero is not None:
            blocks -= zero[chunk][:, :, None]
        blocks *= scale[chunk][:, :, None]
        out[chunk] = values
    return out.reshape(shape)
