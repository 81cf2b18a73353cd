"""NVFP4 in SafeTensors: E2M1 codes two to a byte, an E4M3 scale per 16, one F32 second scale.

Two producers write it, with the same codes and block scales and opposite second scales:

- compressed-tensors, format ``nvfp4-pack-quantized``: ``<m>.weight_packed`` U8 ``(*lead,
  cols / 2)``, ``<m>.weight_scale`` F8_E4M3 ``(*lead, cols / 16)``, ``<m>.weight_global_scale``
  F32 ``(1,)``, and for W4A4 ``<m>.input_global_scale``. A value is ``fp4 * (scale /
  global_scale)``, the division done in float32 first (``quantization.lifecycle.forward``'s
  ``_dequantize``; the decompressor then rounds to bfloat16).
- NVIDIA ModelOpt (``quant_algo: NVFP4``): ``<m>.weight`` U8, ``<m>.weight_scale`` F8_E4M3,
  ``<m>.weight_scale_2`` F32 and ``<m>.input_scale``. A value is ``fp4 * (scale *
  weight_scale_2)``, the product in float32 first (ModelOpt's ``NVFP4QTensor.dequantize``;
  compressed-tensors' converter maps ``weight_scale_2`` to ``1 / weight_global_scale``).

Byte i of a row holds elements 2i (low nibble) and 2i+1 (high nibble); a nibble is E2M1 (sign,
two exponent bits, one mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives, -0
included). Unlike ggml's NVFP4 (`_ggml_kernels`), the block scale is a signed E4M3FN whose NaN
codes stay NaN, as torch's ``float8_e4m3fn`` reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np

from weightstore.quantized._group import QuantizedGroup
from weightstore.quantized._hf_pack import (
    TensorInfo,
    companion_prefix,
    dtype_name,
    elements,
    group_error,
    output_dtype,
    part,
    row_chunks,
)
from weightstore.quantized._hf_shapes import check_addressable

__all__ = ["NVFP4_GROUP_SIZE", "dequantize_nvfp4", "rule_nvfp4"]

NVFP4_GROUP_SIZE: Final = 16
"""Elements per E4M3 block scale, fixed by the format (both producers, and the hardware)."""

LAYOUT: Final = "nvfp4"

_E2M1: Final = np.array(
    [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32
)
"""The 16 E2M1 codes' values, -0 kept so that zeros keep their sign as in the producers."""

_CT_FORMAT: Final = "nvfp4-pack-quantized"

# Per convention: the codes' suffix, then role -> suffix of the companions, required first.
_CT_NAMES: Final = (
    "weight_packed",
    {"scale": "weight_scale", "global_scale": "weight_global_scale"},
)
_CT_OPTIONAL: Final = {"input_global_scale": "input_global_scale"}
_MO_NAMES: Final = ("weight", {"scale": "weight_scale", "scale_2": "weight_scale_2"})
_MO_OPTIONAL: Final = {"input_scale": "input_scale"}


def _config_convention(config: Mapping[str, Any] | None) -> str | None:
    """``"ct"`` or ``"modelopt"`` when the config names NVFP4, ``"other"`` when it names some
    other method (no NVFP4 group then), None when it names none (recognise by names)."""
    if not isinstance(config, Mapping):
        return None
    method = config.get("quant_method")
    if method is None and isinstance(config.get("quantization"), Mapping):
        config, method = config["quantization"], "modelopt"  # hf_quant_config.json
    if method is None:
        return None
    if method == "compressed-tensors":
        formats = {config.get("format")}
        groups = config.get("config_groups")
        if isinstance(groups, Mapping):
            formats |= {g.get("format") for g in groups.values() if isinstance(g, Mapping)}
        return "ct" if _CT_FORMAT in formats else "other"
    if method == "modelopt":
        algo = config.get("quant_algo")
        return "modelopt" if isinstance(algo, str) and "NVFP4" in algo.upper() else "other"
    return "other"


def _check(group: QuantizedGroup, infos: Mapping[str, TensorInfo]) -> None:
    """Dtypes and shapes of every part against the scheme and the group's logical shape."""
    expected = {"scale": "F8_E4M3", "global_scale": "F32", "scale_2": "F32"}
    codes_dtype, codes_shape = infos[group.codes]
    if codes_dtype != "U8" or not codes_shape:
        raise group_error(
            group, None, f"codes are {codes_dtype} {list(codes_shape)}, not U8 in one dim or more"
        )
    logical = (*codes_shape[:-1], 2 * codes_shape[-1])
    scale_name = group.companions["scale"]
    if logical != group.logical_shape:
        raise group_error(
            group, None,
            f"codes {list(codes_shape)} unpack to {list(logical)}, not the group's "
            f"{list(group.logical_shape)}",
        )  # fmt: skip
    if logical[-1] % NVFP4_GROUP_SIZE:
        raise group_error(
            group, scale_name,
            f"{logical[-1]} columns are not whole blocks of {NVFP4_GROUP_SIZE}",
        )  # fmt: skip
    for role, name in group.companions.items():
        if role not in expected:
            continue
        dtype, shape = infos[name]
        if dtype != expected[role]:
            raise group_error(group, name, f"{role} is {dtype}, the scheme needs {expected[role]}")
        if role == "scale":
            wanted = (*logical[:-1], logical[-1] // NVFP4_GROUP_SIZE)
            if shape != wanted:
                raise group_error(
                    group, name,
                    f"scale shape {list(shape)}, blocks of {NVFP4_GROUP_SIZE} need {list(wanted)}",
                )  # fmt: skip
        elif elements(shape) != 1:
            raise group_error(group, name, f"{role} has shape {list(shape)}, not one value")


def _match(
    tensors: Mapping[str, TensorInfo], convention: str, strict: bool, rule: str
) -> list[QuantizedGroup]:
    codes_suffix, required = _CT_NAMES if convention == "ct" else _MO_NAMES
    optional = _CT_OPTIONAL if convention == "ct" else _MO_OPTIONAL
    groups = []
    for name, (dtype, shape) in tensors.items():
        prefix = companion_prefix(name, codes_suffix)
        if prefix is None or not all(prefix + s in tensors for s in required.values()):
            continue
        if convention == "modelopt" and dtype != "U8":
            continue  # ModelOpt leaves unquantized layers' `weight` in their own dtype
        companions = {role: prefix + suffix for role, suffix in required.items()}
        companions |= {r: prefix + s for r, s in optional.items() if prefix + s in tensors}
        logical = (*shape[:-1], 2 * shape[-1]) if shape else ()
        group = QuantizedGroup(
            name=prefix + "weight", layout=LAYOUT, codes=name, companions=companions,
            logical_shape=logical, block=(1, NVFP4_GROUP_SIZE), rule=rule,
        )  # fmt: skip
        if not strict:
            scale_dtype = tensors[companions["scale"]][0]
            if dtype != "U8" or scale_dtype != "F8_E4M3":
                continue  # not this layout by its dtypes: the tensors stay plain
        _check(group, tensors)
        groups.append(group)
    return groups


def rule_nvfp4(
    tensors: Mapping[str, TensorInfo], quantization_config: Mapping[str, Any] | None
) -> list[QuantizedGroup]:
    """The NVFP4 groups among `tensors` (stored name -> (dtype name, shape)).

    A config naming compressed-tensors ``nvfp4-pack-quantized`` or ModelOpt NVFP4 selects that
    convention and makes its names binding (a part of the wrong dtype or shape is an error); a
    config naming another method yields none; without one, both conventions are recognised by
    names and dtypes, and tensors whose dtypes do not fit stay plain.

    Raises:
        QuantizedLayoutError: a group's parts disagree (shapes, dtypes, packed length).
    """
    convention = _config_convention(quantization_config)
    if convention == "other":
        return []
    if convention == "ct":
        return _match(tensors, "ct", True, f"quantization_config: compressed-tensors {_CT_FORMAT}")
    if convention == "modelopt":
        return _match(tensors, "modelopt", True, "quantization_config: modelopt NVFP4")
    return [
        *_match(tensors, "ct", False, "names: weight_packed U8 + weight_scale F8_E4M3 + "
                "weight_global_scale F32"),
        *_match(tensors, "modelopt", False, "names: weight U8 + weight_scale F8_E4M3 + "
                "weight_scale_2 F32"),
    ]  # fmt: skip


def _second_scale(group: QuantizedGroup, parts: Mapping[str, np.ndarray]) -> tuple[str, float]:
    """The role and value of the group's F32 second scale, refused when not finite (or zero,
    for compressed-tensors' divisor)."""
    role = "global_scale" if "global_scale" in group.companions else "scale_2"
    name = group.companions[role]
    value = float(np.asarray(part(group, parts, name)).reshape(-1)[0])
    if not np.isfinite(value) or (role == "global_scale" and value == 0.0):
        raise group_error(group, name, f"{role} is {value}, not a finite divisor")
    return role, value


def dequantize_nvfp4(
    group: QuantizedGroup, parts: Mapping[str, np.ndarray], dtype: Any = None
) -> np.ndarray:
    """The values of NVFP4 `group` in `dtype` (float32 by default; float16 or bfloat16 are that
    float32 rounded to nearest even, a chunk at a time), shaped ``group.logical_shape``.

    `parts` maps stored names to arrays: the codes (uint8), the scale (ml_dtypes
    float8_e4m3fn) and the second scale (float32). Every check runs before the output exists.

    Raises:
        QuantizedLayoutError: a part is missing, or the parts disagree with each other or the
            scheme (a non-finite second scale included).
        DTypeError: `dtype` is not float32, float16 or bfloat16.
    """
    wanted = output_dtype(dtype, group)
    needed = [group.codes, *(group.companions[r] for r in ("scale", "global_scale", "scale_2")
                             if r in group.companions)]  # fmt: skip
    arrays = {name: part(group, parts, name) for name in needed}
    infos = {name: (dtype_name(array), tuple(array.shape)) for name, array in arrays.items()}
    _check(group, infos)
    check_addressable(group.name, group.codes, group.logical_shape)
    role, second = _second_scale(group, arrays)
    # Infinities and NaN are values here (an E4M3 NaN scale, a tiny divisor), as in FP8.
    with np.errstate(over="ignore", invalid="ignore"):
        scale = arrays[group.companions["scale"]].astype(np.float32)
        if role == "global_scale":
            np.divide(scale, np.float32(second), out=scale)
        else:
            np.multiply(scale, np.float32(second), out=scale)
        return _decoded(arrays[group.codes], scale, group.logical_shape, wanted)


def _decoded(
    codes: np.ndarray, scale: np.ndarray, shape: tuple[int, ...], wanted: np.dtype[Any]
) -> np.ndarray:
    """Checked codes and their float32 block scales as values of `shape`, a chunk at a time."""
    columns = shape[-1]
    if not elements(shape):
        return np.empty(shape, dtype=wanted)
    rows = elements(shape) // columns
    codes = codes.reshape(rows, columns // 2)
    scale = scale.reshape(rows, columns // NVFP4_GROUP_SIZE, 1)
    out = np.empty((rows, columns), dtype=wanted)
    staging = wanted != np.float32
    for chunk in row_chunks(rows, columns):
        packed = codes[chunk]
        nibbles = np.empty((*packed.shape, 2), dtype=np.uint8)
        np.bitwise_and(packed, np.uint8(0x0F), out=nibbles[..., 0])
        np.right_shift(packed, np.uint8(4), out=nibbles[..., 1])
        target = np.empty(nibbles.size, np.float32) if staging else out[chunk].reshape(-1)
        np.take(_E2M1, nibbles.reshape(-1), out=target)
        blocks = target.reshape(packed.shape[0], -1, NVFP4_GROUP_SIZE)
        np.multiply(blocks, scale[chunk], out=blocks)
        if staging:
            out[chunk] = target.reshape(packed.shape[0], columns)
    return out.reshape(shape)
