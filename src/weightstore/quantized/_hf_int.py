"""compressed-tensors ``pack-quantized``: 1- to 8-bit integer codes packed densely into int32.

Most int4 checkpoints on the Hub (GPTQ and AWQ models exported by llm-compressor) store a linear
layer ``<m>`` as:

- ``<m>.weight_packed`` I32 ``(*lead, ceil(cols * bits / 32))``: per row, element i holds bits
  ``[i * bits, (i + 1) * bits)`` of the row's words read as one little-endian bit string
  (int4: byte k's low nibble is element 2k; codes may straddle words for 3, 5, 6, 7 bits),
  stored as ``code + 2**(bits - 1)``.
- ``<m>.weight_scale`` F32, F16 or BF16: ``(*lead, cols / group_size)`` for the group strategy,
  ``(*lead, 1)`` per channel, ``(1,)`` per tensor.
- ``<m>.weight_zero_point`` when asymmetric: for group and channel scales I32, packed the same
  way down the rows, ``(*lead[:-1], ceil(rows * bits / 32), groups)``; per tensor I8 as is.
- ``<m>.weight_shape`` I64 (or I32): the logical shape as values.
- ``<m>.weight_g_idx`` (activation order, older exports): column j's group.

A value is ``(code - zero_point) * scale`` (``quantization.lifecycle.forward``'s
``_dequantize``): exact integers, one rounding in the product. The float32 output is that
product; with a bfloat16 or float16 scale it is exact, so rounding it to the scale's dtype is
bit for bit what compressed-tensors returns.

Bits are not in the tensors' shapes. A config names them; without one, `rule_int_pack` leaves
``num_bits`` 0 and assumes 4 for the logical shape, and `resolve_int_pack`, given the values of
``weight_shape`` (a few bytes, read by the caller), settles both.
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
    group_error,
    output_dtype,
    part,
    row_chunks,
)
from weightstore.quantized._hf_shapes import check_addressable

__all__ = ["IntPackGroup", "dequantize_int_pack", "resolve_int_pack", "rule_int_pack"]

LAYOUT: Final = "int-pack"
_FORMAT: Final = "pack-quantized"
_CONFIG_RULE: Final = f"quantization_config: compressed-tensors {_FORMAT}"
_NAMES_RULE: Final = (
    "names: weight_packed I32 + weight_scale + weight_shape (bits from weight_shape)"
)
_SCALE_DTYPES: Final = ("F32", "F16", "BF16")
_INDEX_DTYPES: Final = ("I32", "I64")
_SUFFIXES: Final = {
    "scale": "weight_scale",
    "shape": "weight_shape",
    "zero_point": "weight_zero_point",
    "g_idx": "weight_g_idx",
    "input_global_scale": "input_global_scale",
}


class IntPackGroup(QuantizedGroup):
    """A pack-quantized group, with the code width the tensors' shapes do not tell.

    Attributes:
        num_bits: bits per code (1 to 8), or 0 while only names matched and ``weight_shape``
            has not been read (`resolve_int_pack` settles it).
    """

    num_bits: int


class _Scheme:
    """One config group's weight arguments."""

    __slots__ = ("group_size", "num_bits")

    def __init__(self, num_bits: int, group_size: int | None) -> None:
        self.num_bits, self.group_size = num_bits, group_size


def _config_schemes(config: Mapping[str, Any] | None) -> list[_Scheme] | None:
    """The pack-quantized schemes a compressed-tensors config names ([] when it names another
    method or format), or None when there is no config to go by."""
    if not isinstance(config, Mapping) or config.get("quant_method") is None:
        return None
    if config.get("quant_method") != "compressed-tensors":
        return []
    schemes = []
    groups = config.get("config_groups")
    for entry in groups.values() if isinstance(groups, Mapping) else ():
        if (
            not isinstance(entry, Mapping)
            or (entry.get("format") or config.get("format")) != _FORMAT
        ):
            continue
        weights = entry.get("weights")
        if not isinstance(weights, Mapping) or weights.get("type", "int") != "int":
            continue
        bits, size = weights.get("num_bits"), weights.get("group_size")
        if isinstance(bits, int) and 1 <= bits <= 8:
            schemes.append(_Scheme(bits, size if isinstance(size, int) else None))
    return schemes


def _packed_words(count: int, bits: int) -> int:
    return -(-count * bits // 32)


def _layout(
    codes: tuple[int, ...],
    scale: tuple[int, ...],
    cols: int,
    group: QuantizedGroup,
    provisional: bool = False,
) -> tuple[int, tuple[int, ...]]:
    """Scale groups per row and the block for `cols` columns, refused when `scale` does not
    fit: ``(*lead, groups)`` with groups dividing cols (unchecked while `provisional`, when
    cols is only assumed), or one value per tensor."""
    lead = codes[:-1]
    scale_name = group.companions["scale"]
    if len(scale) == len(codes) and scale[:-1] == lead and scale[-1] >= 1:
        # g_idx names each column's group, so a column slice of it keeps every scale group
        if cols % scale[-1] and not provisional and "g_idx" not in group.companions:
            raise group_error(
                group, scale_name, f"{cols} columns do not split into {scale[-1]} equal groups"
            )
        return scale[-1], (*(1 for _ in lead), max(1, cols // scale[-1]))
    if elements(scale) == 1 and len(scale) <= 1:
        return 1, ()
    raise group_error(
        group, scale_name,
        f"scale shape {list(scale)} is neither {list(lead)} + [groups] nor one value",
    )  # fmt: skip


def _check_companions(
    group: QuantizedGroup, infos: Mapping[str, TensorInfo], bits: int, groups: int
) -> None:
    """Dtypes of scale, shape and g_idx; the zero point's dtype and (packed) shape."""
    codes_shape = infos[group.codes][1]
    for role, allowed in (("scale", _SCALE_DTYPES), ("shape", _INDEX_DTYPES),
                          ("g_idx", _INDEX_DTYPES)):  # fmt: skip
        name = group.companions.get(role)
        if name is not None and infos[name][0] not in allowed:
            raise group_error(
                group, name,
                f"{role} is {infos[name][0]}, the scheme needs one of {', '.join(allowed)}",
            )  # fmt: skip
    shape_name = group.companions["shape"]
    if infos[shape_name][1] != (len(codes_shape),):
        raise group_error(
            group, shape_name,
            f"weight_shape has shape {list(infos[shape_name][1])}, the codes need "
            f"[{len(codes_shape)}]",
        )  # fmt: skip
    zero_name = group.companions.get("zero_point")
    if zero_name is None:
        return
    zero_dtype, zero_shape = infos[zero_name]
    scale_shape = infos[group.companions["scale"]][1]
    if zero_dtype == "I8":
        wanted = scale_shape
    elif zero_dtype == "I32" and bits:
        lead = codes_shape[:-1]
        wanted = (*lead[:-1], _packed_words(lead[-1], bits), groups)
    elif zero_dtype == "I32":
        return  # packed, its rows checked once the bits are known
    else:
        raise group_error(group, zero_name, f"zero point is {zero_dtype}, not I32 or I8")
    if zero_shape != wanted:
        raise group_error(
            group, zero_name,
            f"zero point shape {list(zero_shape)}, the scales "
            f"({group.companions['scale']!r}) need {list(wanted)}",
        )  # fmt: skip


def _candidate(
    group: IntPackGroup, infos: Mapping[str, TensorInfo], scheme: _Scheme | None
) -> IntPackGroup | None:
    """`group` with bits, logical shape and block from `scheme` (names only: 4 bits assumed,
    num_bits 0), or None when the scheme's bits or group size do not fit the shapes."""
    codes_shape, scale_shape = infos[group.codes][1], infos[group.companions["scale"]][1]
    words = codes_shape[-1]
    bits = scheme.num_bits if scheme is not None else 4
    per_row = scale_shape[-1] if len(scale_shape) == len(codes_shape) else 1
    size = scheme.group_size if scheme is not None else None
    cols = per_row * size if size and per_row > 1 else 32 * words // bits
    if _packed_words(cols, bits) != words:
        return None
    groups, block = _layout(codes_shape, scale_shape, cols, group, provisional=scheme is None)
    _check_companions(group, infos, bits if scheme is not None else 0, groups)
    return group.replace(
        logical_shape=(*codes_shape[:-1], cols), block=block,
        num_bits=scheme.num_bits if scheme is not None else 0,
    )  # fmt: skip


def rule_int_pack(
    tensors: Mapping[str, TensorInfo], quantization_config: Mapping[str, Any] | None
) -> list[QuantizedGroup]:
    """The pack-quantized groups among `tensors` (stored name -> (dtype name, shape)).

    ``<m>.weight_packed`` I32 with ``<m>.weight_scale`` and ``<m>.weight_shape`` is a group; a
    compressed-tensors config with ``pack-quantized`` groups gives the bits (those of the
    schemes that fit the shapes; when several widths fit, the group is left for
    `resolve_int_pack` to settle, as without a config) and makes the names binding; one naming
    another method or format yields none. Returned groups are `IntPackGroup`.

    Raises:
        QuantizedLayoutError: a group's parts disagree, or no configured scheme fits them.
    """
    schemes = _config_schemes(quantization_config)
    if schemes is not None and not schemes:
        return []
    found: list[QuantizedGroup] = []
    for name, (dtype, shape) in tensors.items():
        prefix = companion_prefix(name, "weight_packed")
        if prefix is None or dtype != "I32":
            continue
        companions = {r: prefix + s for r, s in _SUFFIXES.items() if prefix + s in tensors}
        if "scale" not in companions or "shape" not in companions:
            continue
        if len(shape) < 2:
            raise QuantizedLayoutError(
                f"{LAYOUT}: codes have shape {list(shape)}, not at least two dims",
                group=prefix + "weight", codes=name,
            )  # fmt: skip
        rule = _CONFIG_RULE if schemes else _NAMES_RULE
        base = IntPackGroup(
            name=prefix + "weight", layout=LAYOUT, codes=name, companions=companions,
            logical_shape=(), block=(), rule=rule, num_bits=0,
        )  # fmt: skip
        options = schemes if schemes else [None]
        fitting = [g for g in (_candidate(base, tensors, s) for s in options) if g is not None]
        if not fitting:
            raise group_error(
                base, companions["scale"],
                f"no configured bit width fits {shape[-1]} words and scale "
                f"{list(tensors[companions['scale']][1])}",
            )  # fmt: skip
        if len({g.num_bits for g in fitting}) > 1:  # widths that only weight_shape tells apart
            unsettled = _candidate(base, tensors, None)
            fitting = [unsettled] if unsettled is not None else fitting
        found.append(fitting[0])
    return found


def _shape_values(group: QuantizedGroup, weight_shape: np.ndarray, ndim: int) -> tuple[int, ...]:
    """The values of ``weight_shape``, refused unless `ndim` integers of at least 1 (its
    length checked before its values are read: a long one is no shape at all)."""
    name = group.companions["shape"]
    values = np.asarray(weight_shape)
    if values.dtype.kind not in "iu" or values.shape != (ndim,):
        raise group_error(
            group, name,
            f"weight_shape is {values.dtype} {list(values.shape)}, the codes need {ndim} integers",
        )  # fmt: skip
    shape = tuple(int(v) for v in values)
    if any(v < 1 for v in shape):
        raise group_error(group, name, f"weight_shape {list(shape)} has a dim below 1")
    return shape


def resolve_int_pack(
    group: QuantizedGroup, weight_shape: np.ndarray, infos: Mapping[str, TensorInfo]
) -> IntPackGroup:
    """`group` with the logical shape ``weight_shape`` holds, its bits (inferred when the rule
    left 0, refused when ambiguous), and its block; every part's shape checked against them.

    `infos` describes the group's parts (dtype name, shape), as the rule saw them.

    Raises:
        QuantizedLayoutError: weight_shape disagrees with the codes or the scales, or the bits
            cannot be told apart (fewer than 32 columns and no config).
    """
    codes_dtype, codes_shape = infos[group.codes]
    if codes_dtype != "I32" or len(codes_shape) < 2:
        raise group_error(
            group, None, f"codes are {codes_dtype} {list(codes_shape)}, not I32 in two dims or more"
        )
    shape = _shape_values(group, weight_shape, len(codes_shape))
    shape_name = group.companions["shape"]
    if len(shape) != len(codes_shape) or shape[:-1] != codes_shape[:-1]:
        raise group_error(
            group, shape_name,
            f"codes {list(codes_shape)} cannot hold a {list(shape)} tensor",
        )  # fmt: skip
    known = group.num_bits if isinstance(group, IntPackGroup) else 0
    options = [known] if known else list(range(1, 9))
    fits = [b for b in options if _packed_words(shape[-1], b) == codes_shape[-1]]
    if len(fits) != 1:
        raise group_error(
            group, shape_name,
            f"{codes_shape[-1]} words per row hold {shape[-1]} codes of "
            f"{' or '.join(map(str, fits)) or 'no'} bits ({'ambiguous' if fits else 'mismatch'})",
        )  # fmt: skip
    base = group if isinstance(group, IntPackGroup) else IntPackGroup(
        group.name, group.layout, group.codes, group.companions, group.logical_shape,
        group.block, group.rule, 0,
    )  # fmt: skip
    groups, block = _layout(codes_shape, infos[group.companions["scale"]][1], shape[-1], base)
    _check_companions(base, infos, fits[0], groups)
    g_idx = group.companions.get("g_idx")
    if g_idx is not None and infos[g_idx][1] != (shape[-1],):
        raise group_error(
            group, g_idx, f"g_idx shape {list(infos[g_idx][1])}, weight_shape needs [{shape[-1]}]"
        )
    return base.replace(logical_shape=shape, block=block, num_bits=fits[0])


def _unpack(words: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Rows of packed int32 words as (rows, count) signed codes (int16)."""
    data = np.ascontiguousarray(words, dtype="<i4").view(np.uint8)
    rows = data.shape[0]
    if bits == 8:
        codes = data[:, :count]
    elif bits == 4:
        codes = np.empty((rows, data.shape[1], 2), dtype=np.uint8)
        np.bitwise_and(data, np.uint8(0x0F), out=codes[..., 0])
        np.right_shift(data, np.uint8(4), out=codes[..., 1])
        codes = codes.reshape(rows, -1)[:, :count]
    else:
        stream = np.unpackbits(data, axis=1, bitorder="little")[:, : count * bits]
        stream = stream.reshape(rows, count, bits)
        codes = np.zeros((rows, count), dtype=np.uint8)
        for k in range(bits):
            codes |= stream[:, :, k] << np.uint8(k)
    signed = codes.astype(np.int16)
    signed -= 1 << (bits - 1)
    return signed


def _byte_table(bits: int) -> np.ndarray:
    """Byte -> the float32 values of the codes it holds, offset removed, as one uint32 (8
    bits) or uint64 (4 bits) word, so that one gather turns bytes into values."""
    byte = np.arange(256, dtype=np.int32)
    if bits == 8:
        return (byte - 128).astype(np.float32).view(np.uint32)
    pairs = np.stack([(byte & 0x0F) - 8, (byte >> 4) - 8], axis=1).astype(np.float32)
    return np.ascontiguousarray(pairs).view(np.uint64).reshape(256)


_BYTE_TABLES: Final = {bits: _byte_table(bits) for bits in (4, 8)}


def _unpack_float(words: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Rows of packed int32 words as (rows, count) float32 codes, offset removed; 4- and
    8-bit codes through a byte table (one gather, no integer temporaries)."""
    table = _BYTE_TABLES.get(bits)
    if table is None:
        return _unpack(words, bits, count).astype(np.float32)
    data = np.ascontiguousarray(words, dtype="<i4").view(np.uint8)
    values = table[data].view(np.float32).reshape(data.shape[0], -1)
    return values[:, :count] if values.shape[1] != count else values


def _zero_points(
    group: IntPackGroup, zero: np.ndarray, rows_shape: tuple[int, ...], groups: int
) -> np.ndarray:
    """The zero points as (rows, groups) int16, unpacked down the rows when packed."""
    if zero.dtype == np.int8:
        return zero.astype(np.int16).reshape(-1, 1) if zero.size == 1 else zero.reshape(-1, groups)
    outer, rows = rows_shape[:-1], rows_shape[-1]
    columns = np.swapaxes(zero, -1, -2).reshape(-1, zero.shape[-2])
    values = _unpack(columns, group.num_bits, rows).reshape(*outer, groups, rows)
    return np.swapaxes(values, -1, -2).reshape(-1, groups)


def _g_idx(
    group: QuantizedGroup, arrays: Mapping[str, np.ndarray], groups: int
) -> np.ndarray | None:
    """Column -> scale group, refused when an entry names none of the `groups`."""
    name = group.companions.get("g_idx")
    if name is None:
        return None
    g_idx = arrays[name].astype(np.int64)
    bad = np.flatnonzero((g_idx < 0) | (g_idx >= groups))
    if bad.size:
        raise group_error(
            group, name,
            f"g_idx[{bad[0]}] = {g_idx[bad[0]]} names no group of the {groups} in "
            f"{group.companions['scale']!r}",
        )  # fmt: skip
    return g_idx


def dequantize_int_pack(
    group: QuantizedGroup, parts: Mapping[str, np.ndarray], dtype: Any = None
) -> np.ndarray:
    """The values of pack-quantized `group` in `dtype` (float32 by default; float16 or
    bfloat16 are that float32 rounded to nearest even, a chunk at a time), shaped by its
    ``weight_shape``, which must agree with ``group.logical_shape`` (see `resolve_int_pack`).

    Raises:
        QuantizedLayoutError: a part is missing, the parts disagree, weight_shape differs from the
            group's logical shape, or a g_idx entry names no group.
        DTypeError: `dtype` is not float32, float16 or bfloat16.
    """
    wanted = output_dtype(dtype, group)
    arrays = {name: part(group, parts, name) for name in group.parts
              if name != group.companions.get("input_global_scale")}  # fmt: skip
    infos = {name: (dtype_name(a), tuple(a.shape)) for name, a in arrays.items()}
    resolved = resolve_int_pack(group, arrays[group.companions["shape"]], infos)
    if resolved.logical_shape != group.logical_shape:
        raise group_error(
            group, group.companions["shape"],
            f"weight_shape is {list(resolved.logical_shape)}, the group says "
            f"{list(group.logical_shape)}",
        )  # fmt: skip
    shape, bits = resolved.logical_shape, resolved.num_bits
    check_addressable(group.name, group.codes, shape)
    cols, rows = shape[-1], elements(shape[:-1])
    scale_shape = infos[group.companions["scale"]][1]
    groups = scale_shape[-1] if len(scale_shape) == len(shape) else 1
    g_idx = _g_idx(group, arrays, groups)  # read before anything the sizes imply exists
    scale = arrays[group.companions["scale"]].astype(np.float32)
    scale = (
        scale.reshape(-1, groups) if scale.size > 1 else np.full((rows, 1), scale.reshape(-1)[0])
    )
    zero = None
    if "zero_point" in group.companions:
        zero = _zero_points(resolved, arrays[group.companions["zero_point"]], shape[:-1], groups)
        if zero.shape[0] == 1 and rows > 1:
            zero = np.broadcast_to(zero, (rows, 1))
    codes = arrays[group.codes].reshape(rows, -1)
    out = np.empty((rows, cols), dtype=wanted)
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN scales are values here
        _fill(out, codes, bits, scale, zero, g_idx, groups)
    return out.reshape(shape)


def _fill(
    out: np.ndarray,
    codes: np.ndarray,
    bits: int,
    scale: np.ndarray,
    zero: np.ndarray | None,
    g_idx: np.ndarray | None,
    groups: int,
) -> None:
    """`out` (rows, cols) from packed `codes`, `(code - zero) * scale`, a chunk at a time."""
    rows, cols = out.shape
    for chunk in row_chunks(rows, cols):
        values = _unpack_float(codes[chunk], bits, cols)
        if g_idx is not None:
            if zero is not None:
                values -= zero[chunk][:, g_idx]
            values *= scale[chunk][:, g_idx]
        else:
            blocks = values.reshape(values.shape[0], groups, cols // groups)
            if zero is not None:
                blocks -= zero[chunk][:, :, None]
            blocks *= scale[chunk][:, :, None]
        out[chunk] = values
