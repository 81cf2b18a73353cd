"""Quantized groups kept whole by selections: a filter may keep a group or drop it, not split it.

A quantized tensor stored as codes plus scales is several snapshots tagged with one group
(`weightstore.snapshot.GroupPart`). A filter that keeps the codes and drops their scales
would save or load codes as if they were weights, so saves (`collect`) and store loads refuse
it, naming both tensors.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from weightstore.errors import InvalidOptionError

if TYPE_CHECKING:
    from weightstore.paths import PathFilter
    from weightstore.snapshot import TensorSnapshot

__all__ = ["refuse_split_groups"]


def refuse_split_groups(
    snapshots: Sequence[TensorSnapshot],
    kept: Iterable[TensorSnapshot] | None = None,
    *,
    path_filter: PathFilter | None = None,
) -> None:
    """Refuse a selection that keeps part of a quantized group and drops the rest: codes
    without their scales would load or save as if they were weights. The kept ones are
    `kept`, or those `path_filter` matches.

    Raises:
        InvalidOptionError: naming the group, a part kept and a part dropped.
    """
    grouped = [s for s in snapshots if s.group is not None]
    if not grouped:
        return
    if kept is None:
        assert path_filter is not None
        kept_ids = {id(s) for s in grouped if path_filter.matches(s.full_path, s.container_path)}
    else:
        kept_ids = {id(s) for s in kept}
    by_group: dict[int, list[TensorSnapshot]] = {}
    for snapshot in grouped:
        assert snapshot.group is not None
        by_group.setdefault(id(snapshot.group.group), []).append(snapshot)
    for parts in by_group.values():
        kept_parts = [s for s in parts if id(s) in kept_ids]
        if kept_parts and len(kept_parts) != len(parts):
            dropped = next(s for s in parts if id(s) not in kept_ids)
            group = parts[0].group
            assert group is not None
            raise InvalidOptionError(
                f"the filter keeps {kept_parts[0].full_path!r} and drops "
                f"{dropped.full_path!r}: both are parts of one {group.group.layout} quantized "
                "tensor, which moves whole; keep both or neither (or dequantize it first)",
                option="filter",
            )
