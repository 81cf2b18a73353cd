"""A quantized group's stored parts sliced together, for a load without ``with_dequantize``.

A model whose parameters are a quantized tensor's parts (FP8 ``weight`` and
``weight_scale_inv``, MXFP4 ``*_blocks`` and ``*_scales``) shards them together: rows
``[a:b]`` of the codes go with scale rows ``[a / 128 : b / 128]``. So the plan names the
codes, and every companion follows: it takes the part of itself that scales this rank's codes
(`quantized._hf_slice.slice_group`), or all of itself for a per-tensor scale. A plan that
names a companion alone, or on another dim than its codes, is refused, and so is a split
whose edges cut a block, since the parts of a cut block are no group of the layout.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from weightstore.distributed._plan import chunk_bounds
from weightstore.errors import InvalidOptionError
from weightstore.quantized._hf_slice import logical_bounds, slice_group

if TYPE_CHECKING:
    from weightstore.quantized import QuantizedGroup
    from weightstore.quantized._hf_slice import PartIndex
    from weightstore.snapshot import TensorSnapshot

__all__ = ["group_part_keys"]


def group_part_keys(
    snapshots: Iterable[TensorSnapshot], dims: Mapping[str, int], rank: int, world_size: int
) -> dict[str, PartIndex]:
    """Snapshot name -> the index rank `rank` reads of it, for every part of each group whose
    codes `dims` splits (None: the whole part).

    Raises:
        InvalidOptionError: a companion split without its codes or on another dim; a split
            that cuts the layout's blocks; a layout not read in slices.
    """
    by_group: dict[int, dict[str, TensorSnapshot]] = {}
    for snapshot in snapshots:
        if snapshot.group is not None:
            by_group.setdefault(id(snapshot.group.group), {})[snapshot.group.role] = snapshot
    keys: dict[str, PartIndex] = {}
    for roles in by_group.values():
        codes = roles.get("codes")
        dim = None if codes is None else dims.get(codes.full_path)
        _check_companions(roles, dims, dim)
        if codes is None or dim is None or codes.group is None:
            continue
        group = codes.group.group
        start, stop = chunk_bounds(codes.shape[dim], rank, world_size)
        box = logical_bounds(group, codes.shape, dim, start, stop)
        shapes = {_stored(group, role): s.shape for role, s in roles.items()}
        cut = slice_group(group, shapes, box, enclose=False)
        for role, snapshot in roles.items():
            keys[snapshot.full_path] = cut.parts.get(_stored(group, role))
    return keys


def _stored(group: QuantizedGroup, role: str) -> str:
    """The stored name of `group`'s part `role` (as the file names it)."""
    name: str = group.codes if role == "codes" else group.companions[role]
    return name


def _check_companions(
    roles: Mapping[str, TensorSnapshot], dims: Mapping[str, int], dim: int | None
) -> None:
    """Refuse a plan that splits a companion other than as its codes (`dim`) are split."""
    for role, snapshot in roles.items():
        planned = dims.get(snapshot.full_path)
        if role == "codes" or planned is None or planned == dim:
            continue
        codes = roles.get("codes")
        codes_name = "the codes" if codes is None else f"the codes ({codes.full_path!r})"
        split = "are not split" if dim is None else f"are split on dim {dim}"
        raise InvalidOptionError(
            f"the plan splits {snapshot.full_path!r} ({role} of a quantized tensor) on dim "
            f"{planned}, but {codes_name} {split}; a group's parts follow its codes, so "
            "split the codes",
            option="plan",
        )
