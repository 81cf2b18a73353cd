"""The quantized tensors `inspect` lists: each group once, its stored parts under it.

A SafeTensors, burnpack or PyTorch file stores a quantized tensor as several tensors (FP8
codes and their block scales, an MXFP4 ``*_blocks`` + ``*_scales`` pair) or as one that no
plain dtype describes (a torch quantized tensor, Burn's ``QFloat``). The summarizers list what
is stored; this module asks the store's view (`weightstore.stores._groups.source_view`, the
one a load and ``convert`` use) which of those tensors form groups, so the listing and a load
always agree. A file none of whose dtypes can hold codes is not reopened: a float checkpoint
costs nothing more.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from weightstore.cli._open import open_file
from weightstore.cli._report import FileReport, GroupRow, PartRow
from weightstore.dtypes import from_name
from weightstore.paths import PathFilter
from weightstore.quantized import QuantizedGroup

__all__ = ["filter_groups", "with_groups"]

_CODE_DTYPES: Final = frozenset({"F8_E4M3", "F8_E5M2", "F8_E8M0", "U8", "I32", "QFLOAT"})
"""Stored dtypes some group's codes have (the view's own candidates); a file with none of them
holds no group. A torch quantized tensor is listed by the summarizer as an unreadable one, a
quantized one; a file whose unreadable tensors are of other kinds (65 dims) is not reopened."""
_UNREADABLE: Final = "unreadable tensor: "  # how the PyTorch summarizer marks such a tensor


def with_groups(
    report: FileReport, top_level_key: str | None, storage_options: dict[str, Any] | None
) -> FileReport:
    """`report` with its quantized groups (`FileReport.quantized`); a torch quantized tensor
    leaves the unreadable entries, as it is listed as a group. Unchanged without groups."""
    if not _may_hold_groups(report):
        return report
    from weightstore.quantized._view import stored_infos
    from weightstore.stores._groups import source_view

    _, reader = open_file(
        report.path, top_level_key=top_level_key, strict=False, storage_options=storage_options
    )
    with reader:
        view = source_view(reader, report.path)
        if view is None:
            return report
        groups = view.groups()
        infos = stored_infos(reader) if groups else {}
    if not groups:
        return report
    sizes = {row.name: row.nbytes for row in report.tensors}
    rows = [_group_row(group, infos, sizes) for group in groups]
    parts = {part.name for row in rows for part in row.parts}
    others = {k: v for k, v in report.others.items() if k not in parts}
    values = {k: v for k, v in report.other_values.items() if k not in parts}
    return dataclasses.replace(report, quantized=rows, others=others, other_values=values)


def filter_groups(report: FileReport, keep: PathFilter) -> list[GroupRow]:
    """The groups ``--filter`` keeps: those whose logical name or any part matches."""
    return [
        row
        for row in report.quantized
        if keep.matches(row.name) or any(keep.matches(part.name) for part in row.parts)
    ]


def _may_hold_groups(report: FileReport) -> bool:
    if any(row.dtype.name in _CODE_DTYPES for row in report.tensors):
        return True
    return any(  # the PyTorch reader's refusal of a torch quantized tensor's `get`
        text.startswith(_UNREADABLE) and " quantized " in text for text in report.others.values()
    )


def _group_row(
    group: QuantizedGroup,
    infos: dict[str, tuple[str, tuple[int, ...]]],
    sizes: dict[str, int],
) -> GroupRow:
    roles = {name: role for role, name in group.companions.items()}
    parts = []
    for name in group.parts:
        dtype, shape = infos[name]
        nbytes = sizes.get(name)
        if nbytes is None:  # a torch quantized tensor (listed apart): its codes' bytes
            nbytes = from_name(dtype).nbytes(shape)
        parts.append(PartRow(name, roles.get(name, "codes"), dtype, shape, nbytes))
    return GroupRow(
        group.name, group.layout, group.logical_shape, group.block, group.rule, tuple(parts)
    )
