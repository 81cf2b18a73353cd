"""Printing a `FileReport`: an aligned table for people, one JSON object for programs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from weightstore.cli._report import FileReport

__all__ = ["render_json", "render_text"]


def _dtype_name(row_dtype: Any) -> str:
    # JSON speaks SafeTensors spelling; burnpack-only dtypes keep their weightstore name.
    return str(row_dtype.safetensors or row_dtype.name)


def render_json(report: FileReport) -> str:
    """The report as one JSON object, dtypes in SafeTensors spelling (what ``--json`` prints)."""
    document = {
        "format": report.format,
        "version": report.version,
        "path": report.path,
        "file_size": report.file_size,
        "metadata": report.metadata,
        "scalars": report.scalars,
        "tensors": [
            {
                "name": row.name,
                "dtype": _dtype_name(row.dtype),
                "shape": list(row.shape),
                "nbytes": row.nbytes,
                "offset": row.offset,
            }
            for row in report.tensors
        ],
        "others": report.others,
        "total_nbytes": report.total_nbytes,
        "total_numel": report.total_numel,
    }
    return json.dumps(document, indent=2)


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]], right: set[int]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]  # fmt: skip

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=False))
        ).rstrip()

    return [line(header), *(line(row) for row in rows)]


def render_text(report: FileReport) -> str:
    """The report as a person reads it: format, metadata, a table of tensors, totals."""
    version = f" (version {report.version})" if report.version else ""
    lines = [
        f"file:     {report.path} ({report.file_size:,} bytes)",
        f"format:   {report.format}{version}",
    ]
    if report.metadata:
        lines.append("metadata:")
        lines += [f"  {key} = {value}" for key, value in report.metadata.items()]
    if report.scalars:
        lines.append("scalars:")
        lines += [f"  {key} = {value!r}" for key, value in report.scalars.items()]
    if report.others:
        lines.append("other entries:")
        lines += [f"  {key}: {value}" for key, value in report.others.items()]
    lines.append("")
    rows = [
        (
            row.name,
            _dtype_name(row.dtype),
            "[" + ", ".join(map(str, row.shape)) + "]",
            f"{row.nbytes:,}",
            "" if row.offset is None else f"{row.offset:,}",
        )
        for row in report.tensors
    ]
    lines += _table(("name", "dtype", "shape", "bytes", "offset"), rows, right={3, 4})
    lines.append("")
    lines.append(
        f"total: {len(report.tensors):,} tensors, {report.total_numel:,} elements, "
        f"{report.total_nbytes:,} bytes"
    )
    return "\n".join(lines)
