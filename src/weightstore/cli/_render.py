"""Printing a `FileReport`: an aligned table for people, one JSON object for programs.

Every string a file supplied goes through `printable` (text) or `dump_json` (JSON), so hostile
names cannot break lines or the terminal (`weightstore.cli._text`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from weightstore.base._render import bounded_int
from weightstore.cli._keys import keys_text, place, suggested_key
from weightstore.cli._objects import MAX_SCAN_DEPTH, MAX_SCAN_NODES, Scan
from weightstore.cli._report import FileReport, GroupRow, SetSummary, TensorRow
from weightstore.cli._text import dump_json, plural, printable, shortened
from weightstore.dtypes import DType

__all__ = ["json_document", "render_json", "render_text"]

_UNREADABLE = "unreadable tensor: "  # how the PyTorch summarizer marks an unreadable tensor


def _dtype_name(dtype: DType) -> str:
    # JSON speaks SafeTensors spelling; burnpack-only dtypes keep their weightstore name.
    return str(dtype.safetensors or dtype.name)


def _json_row(row: TensorRow) -> dict[str, Any]:
    document: dict[str, Any] = {
        "name": row.name,
        "dtype": _dtype_name(row.dtype),
        "shape": list(row.shape),
        "nbytes": row.nbytes,
        "offset": row.offset,
    }
    if row.storage is not None:
        document["storage"] = row.storage
    if row.chunks is not None:
        document["chunks"] = row.chunks
    if row.ggml is not None:
        document["ggml_type"] = row.ggml
    return document


def json_document(report: FileReport) -> dict[str, Any]:
    """The report as JSON types: what ``--json`` prints for one file."""
    document: dict[str, Any] = {
        "format": report.format,
        "version": report.version,
        "path": report.path,
        "file_size": report.file_size,
        "metadata": report.metadata,
        "scalars": report.scalars,
        "tensors": [_json_row(row) for row in report.tensors],
        "others": report.other_values,
        "total_nbytes": report.total_nbytes,
        "total_numel": report.total_numel,
    }
    if report.layout:
        document["layout"] = report.layout
    if any(row.ggml is not None for row in report.tensors):
        document["ggml_types"] = {
            name: {"tensors": count, "nbytes": nbytes}
            for name, (count, nbytes) in _ggml_totals(report.tensors).items()
        }
    if report.quantized:
        document["quantized"] = [_json_group(group) for group in report.quantized]
    if report.listed_from is not None:
        document["tensors_before_filter"] = report.listed_from
    if report.set is not None:
        document["set"] = _json_set(report.set)
    if report.scan is not None:
        document["suspicious_globals"] = [
            {"module": g.module, "name": g.name, "where": g.where} for g in report.scan.suspicious
        ]
        document["scan_complete"] = report.scan.complete
        document["object_classes"] = [
            {"module": g.module, "name": g.name, "where": g.where} for g in report.scan.classes
        ]
    if report.tensor_keys:
        document["tensor_keys"] = report.tensor_keys
    if report.training_groups:
        document["training_groups"] = {
            group: {"tensors": tensors, "nbytes": nbytes}
            for group, (tensors, nbytes) in report.training_groups.items()
        }
    return document


def _json_group(group: GroupRow) -> dict[str, Any]:
    return {
        "name": group.name,
        "layout": group.layout,
        "logical_shape": list(group.logical_shape),
        "block": list(group.block),
        "rule": group.rule,
        "nbytes": group.nbytes,
        "parts": [
            {"name": p.name, "role": p.role, "dtype": p.dtype, "shape": list(p.shape),
             "nbytes": p.nbytes}
            for p in group.parts
        ],
    }  # fmt: skip


def _json_set(summary: SetSummary) -> dict[str, Any]:
    return {
        "index": summary.index,
        "shards": [
            {"file": name, "file_size": size, "tensors": count}
            for name, size, count in summary.shards
        ],
        "ignored": [{"file": name, "why": why} for name, why in summary.ignored],
        "missing": summary.missing,
        "unlisted": summary.unlisted,
        "skipped": [{"file": name, "is": kind} for name, kind in summary.skipped],
        "damaged": [{"file": name, "error": error} for name, error in summary.damaged],
    }


def render_json(report: FileReport) -> str:
    """The report as one JSON object, dtypes in SafeTensors spelling (what ``--json`` prints)."""
    return dump_json(json_document(report))


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]], right: set[int]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]  # fmt: skip

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=False))
        ).rstrip()

    return [line(header), *(line(row) for row in rows)]


def _value_text(value: Any) -> str:
    return shortened(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))


def _pairs(title: str, pairs: dict[str, Any], separator: str = " = ") -> list[str]:
    if not pairs:
        return []
    return [title, *(f"  {printable(k)}{separator}{_value_text(v)}" for k, v in pairs.items())]


def _others(report: FileReport) -> list[str]:
    objects = {k or "(the whole file)": v for k, v in report.others.items()
               if not v.startswith(_UNREADABLE)}  # fmt: skip
    unreadable = {k: v.removeprefix(_UNREADABLE) for k, v in report.others.items()
                  if v.startswith(_UNREADABLE)}  # fmt: skip
    return _pairs("objects:", objects, ": ") + _pairs("unreadable tensors:", unreadable, ": ")


def _suspicious(scan: Scan | None) -> list[str]:
    if scan is None or not scan.flagged:
        return []
    lines = ["suspicious globals (torch.load would run these; weightstore ran nothing):"]
    lines += [f"  {printable(g.qualname)}  at {printable(place(g.where))}" for g in scan.suspicious]
    if not scan.complete:
        lines.append(
            f"  (the scan stopped at {MAX_SCAN_NODES:,} values or {MAX_SCAN_DEPTH:,} levels; "
            "there may be more)"
        )
    return lines


def _key_lines(counts: dict[str, int]) -> list[str]:
    """Which top-level keys hold tensors, and the flag that lists one, when several do."""
    if not counts:
        return []
    return [
        f"tensors under several top-level keys: {printable(keys_text(counts))}; "
        f"--top-level-key {printable(str(suggested_key(counts)))} lists one"
    ]


def _offset_cell(row: TensorRow) -> str:
    if row.chunks is not None:
        return bounded_int(row.chunks)
    if row.offset is None:
        return ""
    offset = bounded_int(row.offset)
    return offset if row.storage is None else f"{printable(row.storage)}:{offset}"


def _ggml_totals(rows: list[TensorRow]) -> dict[str, tuple[int, int]]:
    """GGUF: per ggml type, its tensors and their bytes in the file, by bytes, largest first."""
    totals: dict[str, tuple[int, int]] = {}
    for row in rows:
        if row.ggml is not None:
            count, nbytes = totals.get(row.ggml, (0, 0))
            totals[row.ggml] = (count + 1, nbytes + row.nbytes)
    return dict(sorted(totals.items(), key=lambda item: (-item[1][1], item[0])))


def _shape_text(shape: Sequence[int]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def _tensor_lines(report: FileReport) -> list[str]:
    parts = {part.name for group in report.quantized for part in group.parts}
    rows = [
        (
            printable(row.name),
            row.ggml or _dtype_name(row.dtype),
            _shape_text(row.shape),
            bounded_int(row.nbytes),
            _offset_cell(row),
        )
        for row in report.tensors
        if row.name not in parts  # listed under their group
    ]
    if not rows and parts:
        return []
    offset = "storage:offset" if any(row.storage for row in report.tensors) else "offset"
    if any(row.chunks is not None for row in report.tensors):
        offset = "chunks"  # DCP: a whole tensor is pieces of rank files, not one offset
    kind = "type" if any(row.ggml is not None for row in report.tensors) else "dtype"
    return _table(("name", kind, "shape", "bytes", offset), rows, right={3, 4})


def _group_lines(groups: Sequence[GroupRow]) -> list[str]:
    """Each quantized tensor as one row (logical name, layout, logical shape, the bytes of
    all its parts), then the rule that recognised it and its parts, indented."""
    if not groups:
        return []
    rows: list[tuple[str, ...]] = []
    rules: dict[int, str] = {}  # table row -> the rule line printed after it
    for group in groups:
        rules[len(rows)] = f"    rule: {printable(group.rule)}" + (
            f"; block {'x'.join(map(str, group.block))}" if group.block else ""
        )
        rows.append(
            (printable(group.name), group.layout, _shape_text(group.logical_shape),
             bounded_int(group.nbytes))
        )  # fmt: skip
        rows += [
            (f"    {printable(p.name)}", f"{p.role} {p.dtype}", _shape_text(p.shape),
             bounded_int(p.nbytes))
            for p in group.parts
        ]  # fmt: skip
    table = _table(("quantized", "layout", "shape", "bytes"), rows, right={3})
    lines = [table[0]]
    for index, line in enumerate(table[1:]):
        lines.append(line)
        if index in rules:
            lines.append(rules[index])
    return ["", *lines]


def _total(report: FileReport) -> str:
    count = plural(len(report.tensors), "tensor")
    if report.listed_from is not None:
        count += f" (of {report.listed_from:,})"
    numel, nbytes = bounded_int(report.total_numel), bounded_int(report.total_nbytes)
    shared = ""
    if report.listed_nbytes != report.total_nbytes:  # tied tensors: one storage, two names
        shared = f" (shared storage counted once; {bounded_int(report.listed_nbytes)} listed)"
    total = f"total: {count}, {numel} elements, {nbytes} bytes{shared}"
    if report.quantized:
        stored = sum(len(group.parts) for group in report.quantized)
        total += (
            f"\nquantized: {plural(len(report.quantized), 'tensor')} stored as "
            f"{plural(stored, 'part')}, {bounded_int(sum(g.nbytes for g in report.quantized))} "
            "bytes"
        )
    by_type = _ggml_totals(report.tensors)
    if not by_type:
        return total
    parts = [f"{name}: {plural(n, 'tensor')}, {bounded_int(size)} bytes"
             for name, (n, size) in by_type.items()]  # fmt: skip
    return f"{total}\nby type: {'; '.join(parts)}"


def _set_lines(summary: SetSummary | None) -> list[str]:
    if summary is None:
        return []
    total = sum(size for _, size, _ in summary.shards)
    lines = [f"set:      {plural(len(summary.shards), 'shard')}, {total:,} bytes"]
    damaged = dict(summary.damaged)
    lines += [
        f"  {printable(name)}  {size:,} bytes, "
        + (f"DAMAGED: {printable(damaged[name])}" if name in damaged else plural(count, "tensor"))
        for name, size, count in summary.shards
    ]
    lines += _pairs("ignored (not part of the set):", dict(summary.ignored), ": ")
    lines += _pairs("skipped (not files, never opened):", dict(summary.skipped), ": ")
    for title, table in (
        ("missing (listed by the index, not in their shard):", summary.missing),
        ("unlisted (in a shard, not listed by the index; never loaded):", summary.unlisted),
    ):
        lines += _pairs(title, {shard: ", ".join(names) for shard, names in table.items()}, ": ")
    return lines


def _layout_lines(layout: dict[str, Any]) -> list[str]:
    if not layout:
        return []
    pairs = ", ".join(
        f"{printable(key)} {bounded_int(value) if type(value) is int else _value_text(value)}"
        for key, value in layout.items()
    )
    return [f"layout:   {pairs}"]


def _training_lines(groups: dict[str, tuple[int, int]]) -> list[str]:
    """A training checkpoint's groups: what convert writes (the model) and leaves out."""
    if not groups:
        return []
    parts = ", ".join(
        f"{group} {plural(tensors, 'tensor')} ({nbytes:,} bytes)"
        for group, (tensors, nbytes) in groups.items()
    )
    return [f"groups:   {parts}"]


def render_text(report: FileReport) -> str:
    """The report as a person reads it: format, metadata, objects, a table of tensors, totals."""
    version = f" (version {printable(report.version)})" if report.version else ""
    if report.set is None:
        where = f"file:     {printable(report.path)} ({report.file_size:,} bytes)"
    else:  # the sizes are the shards', listed below
        where = f"{'index' if report.set.index else 'file'}:    {printable(report.path)}"
    lines = [
        where,
        f"format:   {report.format}{version}",
        *_set_lines(report.set),
        *_layout_lines(report.layout),
        *_pairs("metadata:", {**report.metadata, **report.metadata_text}),
        *_pairs("scalars:", report.scalars),
        *_others(report),
        *_suspicious(report.scan),
        *_key_lines(report.tensor_keys),
        *_training_lines(report.training_groups),
        "",
        *_tensor_lines(report),
        *_group_lines(report.quantized),
        "",
        _total(report),
    ]
    return "\n".join(lines)
