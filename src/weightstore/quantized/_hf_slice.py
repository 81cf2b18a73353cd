"""A box of a quantized group's logical tensor as the part ranges that hold it: `slice_group`.

A tensor-parallel rank or a JAX device wants rows ``[a:b]`` (or columns) of a quantized tensor.
Its codes and scales are stored as separate tensors, so the box becomes one index per part:
FP8 codes rows ``[a:b]`` and scale rows ``[a // 128 : ceil(b / 128)]``; MXFP4 values
``[..., a:b]`` are blocks ``[..., a // 32 : b // 32, :]`` and scales ``[..., a // 32 : b //
32]``; NVFP4 packed bytes ``[a // 2 : b // 2]`` and scales ``[a // 16 : b // 16]``; int8
codes as the box and scales (and zero points) by their groups; int-pack words ``[a * bits /
32 : b * bits / 32]``, scales by their groups, zero points (packed down the rows) by their
words, ``g_idx`` ``[a:b]``; a per-tensor scale (FP8's, NVFP4's second scale,
``input_scale``) and int-pack's ``weight_shape`` are read whole.

A block here is what a slice must not cut: the elements one scale covers, and, for int-pack,
the codes that fill whole int32 words (8 columns at 4 bits; 8 rows too when zero points are
packed down the rows): a share of a packed row must start on a word.

Two uses, two rules for a box whose edges cut a block:

- parts loaded as they are (``enclose=False``): the parts' slices must be a group of the same
  layout on their own, so the box's start is on a block boundary (FP8 also takes a box inside
  one block, and a stop mid-block, as its partial edge blocks); otherwise `InvalidOptionError`
  names the tensor, the dim and the block size.
- values dequantized (``enclose=True``): the box grows to the blocks that enclose it; the
  sub-group dequantizes that, and ``keep`` cuts the box out of it.

Nothing here reads a tensor: `GroupSlice` says what to read and how the result is shaped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from weightstore.base._record import ValueRecord
from weightstore.errors import InvalidOptionError
from weightstore.quantized._group import QuantizedGroup
from weightstore.quantized._hf_shapes import MXFP4_BLOCK, fp8_scale_grid

__all__ = ["SLICED_LAYOUTS", "GroupSlice", "logical_bounds", "slice_group"]

Bounds = tuple[tuple[int, int], ...]
"""(start, stop) along every dim of a shape."""
PartIndex = tuple[slice, ...] | None
"""The index of one stored part to read; None for the whole part."""

NVFP4_BLOCK: Final = 16  # values per E4M3 scale, fixed by the format (`_hf_nvfp4`)


class GroupSlice(ValueRecord):
    """What to read of a group for one box of its values, and what the reading makes.

    Attributes:
        group: the group of the parts as read: the same names and layout, `logical_shape`
            that of the read range (`dequantize_group` takes it with the sliced parts).
        parts: stored name -> the index to read of it (None: all of it).
        keep: the box within the read range's values (all of them unless enclosed).
        derived: (part, values): parts a dequantization of the read range takes as these
            integers instead of reading them: int-pack's ``weight_shape`` as the read range's
            shape and, for columns that cut a scale group, a ``g_idx`` naming each read
            column's scale column (`group` lists it); empty for the other layouts.
    """

    group: QuantizedGroup
    parts: Mapping[str, PartIndex]
    keep: tuple[slice, ...]
    derived: tuple[tuple[str, tuple[int, ...]], ...] = ()


def slice_group(
    group: QuantizedGroup,
    shapes: Mapping[str, tuple[int, ...]],
    bounds: Sequence[tuple[int, int]],
    *,
    enclose: bool,
) -> GroupSlice:
    """The part ranges holding box `bounds` (start, stop per logical dim) of `group`.

    Args:
        group: a recognised group of a layout in `SLICED_LAYOUTS`.
        shapes: every part's stored shape (by stored name).
        bounds: the box, one (start, stop) per dim of ``group.logical_shape``.
        enclose: read the blocks enclosing the box (for a dequantization) rather than
            refuse a box whose edges cut a block.

    Raises:
        InvalidOptionError: a layout that is not sliced, or (without `enclose`) a box edge
            inside a block, naming the tensor, the dim and the block size.
    """
    layout = _LAYOUTS.get(group.layout)
    if layout is None and group.layout in ("torch-affine", "burn"):
        raise InvalidOptionError(
            f"tensor {group.name!r} is a {group.layout} quantized tensor: its codes and "
            "scales are one stored tensor, which no plain parameter holds, so its parts are "
            "not split; read it with with_dequantize to load this rank's slice of its values",
            option="plan",
        )
    if layout is None:
        raise InvalidOptionError(
            f"tensor {group.name!r} is a {group.layout} quantized tensor, which is not read "
            f"in slices (sliced layouts: {', '.join(sorted(SLICED_LAYOUTS))}); leave it "
            "out of the plan to read it whole",
            option="plan",
        )
    shape = group.logical_shape
    assert len(bounds) == len(shape), (bounds, shape)
    blocks_of, keys_of, partial_edges = layout
    if enclose and group.layout == "int-pack":
        blocks_of = _int_pack_enclosing_blocks
    read = tuple(
        _read_range(group, dim, start, stop, size, block, enclose, partial_edges)
        for dim, ((start, stop), size, block) in enumerate(
            zip(bounds, shape, blocks_of(group), strict=True)
        )
    )
    sub_shape = tuple(stop - start for start, stop in read)
    sub = group.replace(logical_shape=sub_shape)
    if group.layout.startswith("fp8-"):
        sub = sub.replace(block=_fp8_sub_block(group, sub_shape))
    elif group.layout in _INTEGER_LAYOUTS:
        sub = sub.replace(block=_spanning_sub_block(group, sub_shape))
    keep = tuple(
        slice(start - first, stop - first)
        for (start, stop), (first, _) in zip(bounds, read, strict=True)
    )
    keys = keys_of(group, shapes, read)
    if group.layout != "int-pack":
        return GroupSlice(sub, keys, keep)
    derived = [(group.companions["shape"], sub_shape)]
    size, (start, stop) = _column_group(group), read[-1]
    if start % size or (stop - start) % size:  # a cut group: each column names its scale
        name = group.codes.removesuffix("_packed") + "_g_idx"
        derived.append((name, tuple(c // size - start // size for c in range(start, stop))))
        sub = sub.replace(companions={**sub.companions, "g_idx": name})
    return GroupSlice(sub, keys, keep, tuple(derived))


def logical_bounds(
    group: QuantizedGroup, codes_shape: tuple[int, ...], dim: int, start: int, stop: int
) -> Bounds:
    """The logical box of codes ``[start:stop]`` along stored dim `dim` (every other dim
    whole): the same for FP8; MXFP4's block dim G is 32 values a block; NVFP4's last dim
    is two values a byte.

    Raises:
        InvalidOptionError: a split of MXFP4's 16 bytes per block, which cuts every block.
    """
    logical = group.logical_shape
    whole = [(0, size) for size in logical]
    if group.layout == "mxfp4" and dim >= len(codes_shape) - 2:
        if dim == len(codes_shape) - 1:
            raise InvalidOptionError(
                f"tensor {group.codes!r}: its last dim holds the 16 bytes of each MXFP4 "
                f"block of {MXFP4_BLOCK} values, so a split there cuts every block; split "
                "the block dim (-2) instead",
                option="plan",
            )
        whole[-1] = (start * MXFP4_BLOCK, stop * MXFP4_BLOCK)
    elif group.layout == "nvfp4" and dim == len(codes_shape) - 1:
        whole[-1] = (start * 2, stop * 2)
    elif group.layout == "int-pack" and dim == len(codes_shape) - 1:
        whole[-1] = _packed_columns(group, codes_shape[-1], start, stop)
    else:
        whole[dim] = (start, stop)
    return tuple(whole)


def _packed_columns(group: QuantizedGroup, words: int, start: int, stop: int) -> tuple[int, int]:
    """The columns int32 words ``[start:stop]`` of an int-pack row hold, refused when a
    boundary falls inside a code (3-, 5-, 6- and 7-bit codes straddle words)."""
    bits = _bits(group)
    cols = group.logical_shape[-1]
    for edge in (start, stop):
        if edge * 32 % bits and edge != words:
            raise InvalidOptionError(
                f"tensor {group.codes!r} packs {bits}-bit codes into int32 words, so a split "
                f"at word {edge} cuts a code; split at multiples of {bits // math.gcd(bits, 32)} "
                "words",
                option="plan",
            )
    return start * 32 // bits, cols if stop == words else min(cols, stop * 32 // bits)


def _read_range(
    group: QuantizedGroup,
    dim: int,
    start: int,
    stop: int,
    size: int,
    block: int,
    enclose: bool,
    partial_edges: bool,
) -> tuple[int, int]:
    """The range of dim `dim` to read for ``[start:stop]`` in blocks of `block`."""
    if start >= stop or block == 1:
        return start, stop
    if enclose:
        return start - start % block, min(size, -(-stop // block) * block)
    if partial_edges:  # FP8: a partial block is a block; only the start must be on an edge
        if start % block == 0 or start // block == (stop - 1) // block:
            return start, stop
    elif start % block == 0 and (stop % block == 0 or stop == size):
        return start, stop
    raise InvalidOptionError(
        f"tensor {group.name!r} ({group.layout}, blocks of {_block_text(group.block)}): "
        f"the slice [{start}:{stop}] of dim {dim} (size {size:,}) cuts its blocks of "
        f"{block}; split where every rank's share is whole blocks of {block}, or read it "
        "with with_dequantize",
        option="plan",
    )


def _block_text(block: tuple[int, ...]) -> str:
    return "one scale" if not block else "x".join(str(size) for size in block)


# -- the layouts -------------------------------------------------------------------------------


def _fp8_blocks(group: QuantizedGroup) -> tuple[int, ...]:
    """Codes per scale along each dim; 1 where one scale spans the dim (a per-row scale's
    columns), since any slice of it takes that one scale."""
    shape = group.logical_shape
    if not group.block or not shape:
        return (1,) * len(shape)
    blocks = ((1,) * max(0, len(shape) - 2) + group.block)[-len(shape) :]
    return tuple(1 if block >= size else block for block, size in zip(blocks, shape, strict=True))


def _fp8_sub_block(group: QuantizedGroup, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The block of a sub-group of `shape`: a block that spans a dim still spans it (a
    per-row scale is ``(1, columns)`` of the columns read)."""
    if not group.block:
        return group.block
    matrix = (1,) * max(0, 2 - len(group.logical_shape)) + group.logical_shape
    sub = (1,) * max(0, 2 - len(shape)) + shape
    return tuple(
        max(1, part) if block >= size else block
        for block, size, part in zip(group.block, matrix[-2:], sub[-2:], strict=True)
    )


def _fp8_keys(
    group: QuantizedGroup, shapes: Mapping[str, tuple[int, ...]], read: Bounds
) -> dict[str, PartIndex]:
    """Codes as the box; the block scale by its blocks (a per-row ``[rows]`` spelling by
    rows); one scale, and ``input_scale``, whole."""
    keys: dict[str, PartIndex] = dict.fromkeys(group.companions.values())
    keys[group.codes] = _as_index(read)
    scale = group.companions.get("scale")
    if scale is None or not group.block or math.prod(shapes[scale]) == 1:
        return keys  # one scale for the tensor
    matrix = ((0, 1),) * max(0, 2 - len(read)) + read
    blocks = (1,) * (len(matrix) - 2) + group.block
    grid = tuple(
        (start // block, -(-stop // block)) if start < stop else (-(-start // block),) * 2
        for (start, stop), block in zip(matrix, blocks, strict=True)
    )
    if shapes[scale] == fp8_scale_grid(group.logical_shape, group.block):
        keys[scale] = _as_index(grid)
    else:  # per row, ``[rows]``: one scale a row
        keys[scale] = _as_index(grid[-2:-1])
    return keys


def _mxfp4_blocks(group: QuantizedGroup) -> tuple[int, ...]:
    return (*(1,) * (len(group.logical_shape) - 1), MXFP4_BLOCK)


def _mxfp4_keys(
    group: QuantizedGroup, shapes: Mapping[str, tuple[int, ...]], read: Bounds
) -> dict[str, PartIndex]:
    *leading, (start, stop) = read
    blocks = (*leading, (start // MXFP4_BLOCK, stop // MXFP4_BLOCK))
    keys: dict[str, PartIndex] = dict.fromkeys(group.companions.values())
    keys[group.codes] = (*_as_index(blocks), slice(None))
    keys[group.companions["scale"]] = _as_index(blocks)
    return keys


def _nvfp4_blocks(group: QuantizedGroup) -> tuple[int, ...]:
    return (*(1,) * (len(group.logical_shape) - 1), NVFP4_BLOCK)


def _nvfp4_keys(
    group: QuantizedGroup, shapes: Mapping[str, tuple[int, ...]], read: Bounds
) -> dict[str, PartIndex]:
    """Packed bytes two values each, E4M3 scales one per 16; the second scales whole."""
    *leading, (start, stop) = read
    keys: dict[str, PartIndex] = dict.fromkeys(group.companions.values())
    keys[group.codes] = _as_index((*leading, (start // 2, stop // 2)))
    keys[group.companions["scale"]] = _as_index(
        (*leading, (start // NVFP4_BLOCK, stop // NVFP4_BLOCK))
    )
    return keys


def _bits(group: QuantizedGroup) -> int:
    """An int-pack group's code width (a resolved group always has one)."""
    bits = getattr(group, "num_bits", 0)
    assert isinstance(bits, int) and bits > 0, group
    return bits


def _word_unit(bits: int) -> int:
    """Codes of `bits` that fill whole int32 words: 8 at 4 bits, 32 at 3."""
    return 32 // math.gcd(32, bits)


def _column_group(group: QuantizedGroup) -> int:
    """Columns per scale when scales are per group along the columns, else 1 (one scale per
    row or tensor, or ``g_idx`` naming any column's group, when every scale column is read)."""
    block = group.block
    if not block or "g_idx" in group.companions or block[-1] >= group.logical_shape[-1]:
        return 1
    return block[-1]


def _spanning_sub_block(group: QuantizedGroup, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The block of a sub-group of `shape`: a per-row scale spans the columns read."""
    block = group.block
    if not block or block[-1] < group.logical_shape[-1]:
        return block
    return (*block[:-1], max(1, shape[-1]))


def _int8_blocks(group: QuantizedGroup) -> tuple[int, ...]:
    return (*(1,) * (len(group.logical_shape) - 1), _column_group(group))


def _scale_groups(group: QuantizedGroup, columns: tuple[int, int]) -> tuple[int, int] | None:
    """The scale columns read for `columns`; None for all of them."""
    size = _column_group(group)
    if size == 1:
        return None
    start, stop = columns
    return start // size, -(-stop // size)


def _int8_keys(
    group: QuantizedGroup, shapes: Mapping[str, tuple[int, ...]], read: Bounds
) -> dict[str, PartIndex]:
    """Codes as the box; scale and zero point (the scale's shape) by rows and groups, a
    ``[rows]`` spelling by rows; one scale, and the input's, whole."""
    keys: dict[str, PartIndex] = dict.fromkeys(group.companions.values())
    keys[group.codes] = _as_index(read)
    scale = group.companions["scale"]
    if not group.block:
        return keys
    *lead, columns = read
    if len(shapes[scale]) < len(read):  # ``[rows]``, one scale a row
        index = _as_index(lead)
    else:
        groups = _scale_groups(group, columns)
        index = (*_as_index(lead), slice(None) if groups is None else slice(*groups))
    for role in ("scale", "zero_point"):
        if role in group.companions:
            keys[group.companions[role]] = index
    return keys


def _int_pack_blocks(group: QuantizedGroup) -> tuple[int, ...]:
    """Rows: a word of packed zero points when there are some; columns: whole words and
    whole scale groups."""
    unit = _word_unit(_bits(group))
    rows = unit if "zero_point" in group.companions and group.block else 1
    lead = (1,) * (len(group.logical_shape) - 2) + (rows,)
    return (*lead, math.lcm(unit, _column_group(group)))


def _int_pack_enclosing_blocks(group: QuantizedGroup) -> tuple[int, ...]:
    """For a dequantization: whole words along the columns, scale groups aside (the read
    range may start inside one: `slice_group` gives it a ``g_idx``)."""
    *lead, _ = _int_pack_blocks(group)
    return (*lead, _word_unit(_bits(group)))


def _int_pack_keys(
    group: QuantizedGroup, shapes: Mapping[str, tuple[int, ...]], read: Bounds
) -> dict[str, PartIndex]:
    bits = _bits(group)
    *lead, columns = read

    def words(span: tuple[int, int]) -> slice:
        return slice(span[0] * bits // 32, -(-span[1] * bits // 32))

    keys: dict[str, PartIndex] = dict.fromkeys(group.companions.values())
    keys[group.codes] = (*_as_index(lead), words(columns))
    if "g_idx" in group.companions:
        keys[group.companions["g_idx"]] = (slice(*columns),)
    if not group.block:
        return keys  # one scale and one zero point for the tensor
    groups = _scale_groups(group, columns)
    scale_columns = slice(None) if groups is None else slice(*groups)
    keys[group.companions["scale"]] = (*_as_index(lead), scale_columns)
    if "zero_point" in group.companions:
        keys[group.companions["zero_point"]] = (*_as_index(lead[:-1]), words(lead[-1]),
                                                 scale_columns)  # fmt: skip
    return keys


def _as_index(bounds: Sequence[tuple[int, int]]) -> tuple[slice, ...]:
    return tuple(slice(start, stop) for start, stop in bounds)


_Layout = tuple[
    Callable[[QuantizedGroup], tuple[int, ...]],
    Callable[[QuantizedGroup, Mapping[str, tuple[int, ...]], Bounds], dict[str, PartIndex]],
    bool,
]

_LAYOUTS: Final[Mapping[str, _Layout]] = {
    "fp8-block": (_fp8_blocks, _fp8_keys, True),
    "fp8-channel": (_fp8_blocks, _fp8_keys, True),
    "fp8-tensor": (_fp8_blocks, _fp8_keys, True),
    "mxfp4": (_mxfp4_blocks, _mxfp4_keys, False),
    "nvfp4": (_nvfp4_blocks, _nvfp4_keys, False),
    "int8": (_int8_blocks, _int8_keys, False),
    "int-pack": (_int_pack_blocks, _int_pack_keys, False),
}
"""Layout -> (elements per scale along each logical dim, the part indices of a read range,
whether a partial block is a block of the layout)."""

_INTEGER_LAYOUTS: Final = frozenset({"int8", "int-pack"})

SLICED_LAYOUTS: Final = frozenset(_LAYOUTS)
"""Layouts whose parts `slice_group` reads in slices. torch's and Burn's quantized tensors
are one stored tensor each, sliced by their readers (``get_dequantized_part``)."""
