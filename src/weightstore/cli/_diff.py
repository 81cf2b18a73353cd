"""`weightstore diff A B`: how two files' tensors differ, across formats.

Tensors are matched by name. The report lists names only in A, only in B, tensors whose dtype
or shape changed, and tensors whose values differ, with the count of differing elements and the
largest absolute and relative difference (`weightstore.cli._compare`). Values are compared one
tensor pair at a time, a slice at a time, so memory holds one pair of (mapped) tensors at most.
Metadata is not compared: formats keep different pairs.

A GGUF tensor stored in quantized blocks is compared by its dequantized values, against
another GGUF file's or any other format's tensor; its dtype in the report is its ggml type
(``Q4_K``), so ``Q8_0 vs F32`` says what each file stores. Two tensors of one ggml type whose
blocks are byte for byte the same are equal without being dequantized ("identical blocks").

A quantized tensor that SafeTensors, burnpack or PyTorch stores as several tensors (FP8 codes
and scales) is one entry under its logical name, compared part by part or by its dequantized
values, against a group or a plain tensor (`weightstore.cli._diff_quantized`).

Exit codes: 0 the files hold the same tensors, 1 they differ, 2 a file could not be read.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from weightstore.base._record import ValueRecord
from weightstore.cli._compare import Difference, compare_arrays, compare_bytes
from weightstore.cli._diff_quantized import Entries, QuantizedDiff, compare_entry, entries_of
from weightstore.cli._errors import EXIT_DIFFERENT, EXIT_OK, about
from weightstore.cli._open import honours_top_level_key, open_file, storage_options_of
from weightstore.cli._progress import Progress
from weightstore.cli._text import dump_json, json_number, plural, printable
from weightstore.container._format import ContainerFormat, TensorReader
from weightstore.errors import DTypeError, InvalidOptionError

__all__ = ["DiffReport", "Side", "add_parser", "compare_files", "run", "stored_type"]


class Side(ValueRecord):
    """One of the two files: its path, format and tensor count."""

    path: str
    format: str
    count: int


@dataclass(slots=True)
class DiffReport:
    """Everything `diff` found; names are sorted within each list.

    Attributes:
        only_in_a, only_in_b: names one file has and the other lacks.
        dtype_changed: ``(name, A's dtype, B's dtype, Difference)``; the values are compared
            as well (in float64) when the shapes agree and NumPy holds both dtypes, else None.
        shape_changed: ``(name, A's shape, B's shape)``.
        values_differ: ``(name, Difference)`` for tensors of one dtype and shape whose values
            differ beyond the tolerance.
        common: tensors both files have. equal: those of one dtype, shape and (within the
            tolerance) values.
        identical_blocks: ``(name, ggml type)`` for the equal GGUF tensors whose quantized
            blocks are byte for byte the same, so were not dequantized.
        quantized: the names quantized on either side (a group of several stored tensors,
            a torch quantized tensor), compared by their parts or values.
    """

    a: Side
    b: Side
    only_in_a: list[str] = field(default_factory=list)
    only_in_b: list[str] = field(default_factory=list)
    dtype_changed: list[tuple[str, str, str, Difference | None]] = field(default_factory=list)
    shape_changed: list[tuple[str, list[int], list[int]]] = field(default_factory=list)
    values_differ: list[tuple[str, Difference]] = field(default_factory=list)
    common: int = 0
    equal: int = 0
    identical_blocks: list[tuple[str, str]] = field(default_factory=list)
    quantized: list[QuantizedDiff] = field(default_factory=list)

    @property
    def different(self) -> bool:
        """Whether anything differs."""
        return bool(
            self.only_in_a or self.only_in_b or self.dtype_changed or self.shape_changed
            or self.values_differ or any(q.differing for q in self.quantized)
        )  # fmt: skip


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``diff`` on the subcommand table `commands`."""
    parser = commands.add_parser("diff", parents=[common], help="compare two files' tensors")
    parser.add_argument("a", metavar="A", help="a file or a sharded set, of any format")
    parser.add_argument("b", metavar="B", help="another, of any format")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--atol", type=float, default=0.0, help="absolute tolerance (0)")
    parser.add_argument("--rtol", type=float, default=0.0, help="relative tolerance (0)")
    parser.add_argument(
        "--top-level-key", metavar="KEY", help="PyTorch: compare the tensors under KEY"
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Compare ``args.a`` with ``args.b``; 0 when equal, 1 when different."""
    if args.atol < 0 or args.rtol < 0:
        raise InvalidOptionError("--atol and --rtol cannot be negative", option="tolerance")
    options = {
        "top_level_key": args.top_level_key,
        "storage_options": storage_options_of(args),
        "io": args.io,
    }
    with about(args.a):
        fmt_a, reader_a = open_file(args.a, strict=False, **options)
    with reader_a, about(args.b):
        fmt_b, reader_b = open_file(args.b, strict=False, **options)
        with reader_b:
            _check_top_level_key(args.top_level_key, fmt_a, fmt_b)
            report = compare_files(args, (fmt_a, reader_a), (fmt_b, reader_b))
    print(dump_json(_json(report, args)) if args.json else _text(report))
    return EXIT_DIFFERENT if report.different else EXIT_OK


def _check_top_level_key(key: str | None, *formats: ContainerFormat) -> None:
    if key is not None and not any(honours_top_level_key(fmt) for fmt in formats):
        raise InvalidOptionError(
            "neither file has top-level keys (--top-level-key is for PyTorch checkpoints)",
            option="top_level_key",
        )


def compare_files(
    args: argparse.Namespace,
    a: tuple[ContainerFormat, TensorReader],
    b: tuple[ContainerFormat, TensorReader],
) -> DiffReport:
    """Match the two readers' tensors by name and compare each pair."""
    (fmt_a, reader_a), (fmt_b, reader_b) = a, b
    entries_a, entries_b = entries_of(args.a, reader_a), entries_of(args.b, reader_b)
    names_a, names_b = entries_a.names(), entries_b.names()
    report = DiffReport(
        Side(args.a, fmt_a.name, len(names_a)),
        Side(args.b, fmt_b.name, len(names_b)),
        only_in_a=sorted(names_a - names_b),
        only_in_b=sorted(names_b - names_a),
    )
    common = sorted(names_a & names_b)
    report.common = len(common)
    grouped = _grouped(report, common, entries_a, entries_b)
    comparable = []
    for name in common:
        if entries_a.group(name) is not None or entries_b.group(name) is not None:
            continue  # compared by its logical values below
        info_a, info_b = reader_a.descriptor(name), reader_b.descriptor(name)
        if tuple(info_a.shape) == tuple(info_b.shape):
            comparable.append((name, info_a, info_b))
            continue
        report.shape_changed.append((name, list(info_a.shape), list(info_b.shape)))
        type_a, type_b = stored_type(info_a), stored_type(info_b)
        if type_a != type_b:  # no values to compare either
            report.dtype_changed.append((name, type_a, type_b, None))
    total = sum(a.dtype.nbytes(tuple(a.shape)) for _, a, _ in comparable)
    total += sum(4 * math.prod(shape) for shape in grouped.values())  # float32 values
    for reader in (reader_a, reader_b):  # a URL's reader fetches them in large batches
        plan = getattr(reader, "plan_reads", None)
        if plan is not None:
            plan([name for name, _, _ in comparable])
    with Progress(total, f"{args.a} vs {args.b}", quiet=args.quiet) as progress:
        for name, info_a, info_b in comparable:
            type_a, type_b = stored_type(info_a), stored_type(info_b)
            if type_a == type_b and _same_blocks(reader_a, reader_b, name, progress.advance):
                report.identical_blocks.append((name, type_a))
                report.equal += 1
                continue
            _record(report, name, type_a, type_b,
                    _compare_one(reader_a, reader_b, name, args, progress.advance))  # fmt: skip
        for name in grouped:
            found = compare_entry(name, entries_a, entries_b, stored_type,
                                  (args.atol, args.rtol), progress.advance)  # fmt: skip
            report.quantized.append(found)
            report.equal += not found.differing
    report.dtype_changed.sort(key=lambda entry: entry[0])
    return report


def _grouped(
    report: DiffReport, common: list[str], a: Entries, b: Entries
) -> dict[str, tuple[int, ...]]:
    """The names quantized on either side whose logical shapes agree, with that shape; the
    others are recorded as shape changes. Compared apart (`weightstore.cli._diff_quantized`)."""
    grouped: dict[str, tuple[int, ...]] = {}
    for name in common:
        if a.group(name) is None and b.group(name) is None:
            continue
        shape_a, shape_b = a.shape(name), b.shape(name)
        if shape_a == shape_b:
            grouped[name] = shape_a
        else:
            report.shape_changed.append((name, list(shape_a), list(shape_b)))
    return grouped


def stored_type(info: Any) -> str:
    """The type a tensor is stored in: its dtype, or for GGUF's quantized blocks their ggml
    type (whose dtype is F32, what they dequantize to)."""
    return str(info.ggml.name) if _quantized(info) else str(info.dtype.name)


def _quantized(info: Any) -> bool:
    return getattr(info, "quantized", False) is True


def _same_blocks(
    reader_a: TensorReader, reader_b: TensorReader, name: str, advance: Callable[[int], None]
) -> bool:
    """Whether both tensors are quantized blocks (of one type, checked by the caller) holding
    the same bytes; read a chunk at a time, never dequantized."""
    raw_a, raw_b = getattr(reader_a, "get_raw", None), getattr(reader_b, "get_raw", None)
    if raw_a is None or raw_b is None or not _quantized(reader_a.descriptor(name)):
        return False  # a plain type: its values are compared as any other format's
    blocks_a, blocks_b = raw_a(name).reshape(-1), raw_b(name).reshape(-1)
    if blocks_a.size != blocks_b.size:
        return False
    for chunk_a, chunk_b in _chunks(blocks_a, blocks_b):
        if chunk_a != chunk_b:
            return False
        advance(len(chunk_a))
    return True


_BLOCK_CHUNK: Final = 16 * 2**20  # bytes of blocks compared at once


def _chunks(a: Any, b: Any) -> Iterator[tuple[bytes, bytes]]:
    for start in range(0, a.size, _BLOCK_CHUNK):
        stop = start + _BLOCK_CHUNK
        yield a[start:stop].tobytes(), b[start:stop].tobytes()


def _record(
    report: DiffReport, name: str, dtype_a: str, dtype_b: str, found: Difference | None
) -> None:
    if dtype_a != dtype_b:
        report.dtype_changed.append((name, dtype_a, dtype_b, found))
    elif found is not None and found.differing:
        report.values_differ.append((name, found))
    elif found is not None:
        report.equal += 1


def _compare_one(
    reader_a: TensorReader,
    reader_b: TensorReader,
    name: str,
    args: argparse.Namespace,
    advance: Callable[[int], None],
) -> Difference | None:
    """One pair of tensors of one shape, read now and released when this returns; None when
    their values cannot be compared (two dtypes, one of which NumPy cannot hold)."""
    try:
        with about(args.a):
            array_a = reader_a.get(name)
        with about(args.b):
            array_b = reader_b.get(name)
    except DTypeError:  # no NumPy form (packed 4-bit floats, ggml blocks no kernel reads)
        bytes_a = getattr(reader_a, "get_bytes", None)  # compare the stored bytes
        bytes_b = getattr(reader_b, "get_bytes", None)
        if stored_type(reader_a.descriptor(name)) != stored_type(reader_b.descriptor(name)):
            return None
        if bytes_a is None or bytes_b is None:
            raise
        return compare_bytes(bytes_a(name), bytes_b(name), _numel(reader_a, name), advance)
    return compare_arrays(array_a, array_b, atol=args.atol, rtol=args.rtol, advance=advance)


def _numel(reader: TensorReader, name: str) -> int:
    count = 1
    for size in reader.descriptor(name).shape:
        count *= size
    return count


# -- output -------------------------------------------------------------------------------------


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.6g}"


def _values_note(found: Difference | None) -> str:
    if found is None or found.max_abs is None:
        return ""
    if not found.differing:
        return " (values equal)"
    return (
        f" ({found.differing:,} of {found.numel:,} values differ, max abs diff "
        f"{_number(found.max_abs)}, max rel diff {_number(found.max_rel)})"
    )


def _quantized_line(found: QuantizedDiff) -> str:
    head = f"quantized: {printable(found.name)}: {found.a} vs {found.b}: "
    d = found.values
    if d is None:
        return head + "identical parts"
    if not d.differing:
        return head + f"values equal ({d.numel:,} elements)"
    return head + (
        f"{d.differing:,} of {d.numel:,} values differ, max abs diff {_number(d.max_abs)}, "
        f"max rel diff {_number(d.max_rel)}"
    )


def _text(report: DiffReport) -> str:
    a, b = report.a, report.b
    lines = [
        f"a: {printable(a.path)} ({a.format}, {plural(a.count, 'tensor')})",
        f"b: {printable(b.path)} ({b.format}, {plural(b.count, 'tensor')})",
    ]
    lines += [f"only in a: {printable(name)}" for name in report.only_in_a]
    lines += [f"only in b: {printable(name)}" for name in report.only_in_b]
    lines += [
        f"dtype differs: {printable(n)}: {x} vs {y}{_values_note(d)}"
        for n, x, y, d in report.dtype_changed
    ]
    lines += [f"shape differs: {printable(n)}: {x} vs {y}" for n, x, y in report.shape_changed]
    lines += [
        f"values differ: {printable(name)}: {d.differing:,} of {d.numel:,} elements, "
        f"max abs diff {_number(d.max_abs)}, max rel diff {_number(d.max_rel)}"
        for name, d in report.values_differ
    ]
    lines += [_quantized_line(found) for found in report.quantized]
    if report.identical_blocks:
        kinds = sorted({kind for _, kind in report.identical_blocks})
        lines.append(
            f"identical blocks: {plural(len(report.identical_blocks), 'tensor')} "
            f"({', '.join(kinds)}), equal without dequantizing"
        )
    if report.different:
        names = len(report.only_in_a) + len(report.only_in_b) + report.common
        lines.append(f"result: different ({report.equal:,} of {names:,} tensors equal)")
    else:
        lines.append(f"result: equal ({plural(report.equal, 'tensor')})")
    return "\n".join(lines)


def _stat(value: float | None) -> float | str | None:
    return None if value is None else json_number(value)


def _json_values(found: Difference) -> dict[str, Any]:
    return {
        "numel": found.numel,
        "differing": found.differing,
        "max_abs": _stat(found.max_abs),
        "max_rel": _stat(found.max_rel),
    }


def _json_side(side: Side) -> dict[str, Any]:
    return {"path": side.path, "format": side.format, "tensors": side.count}


def _json(report: DiffReport, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "a": _json_side(report.a),
        "b": _json_side(report.b),
        "equal": not report.different,
        "only_in_a": report.only_in_a,
        "only_in_b": report.only_in_b,
        "dtype_changed": [
            {"name": n, "a": x, "b": y, "values": None if d is None else _json_values(d)}
            for n, x, y, d in report.dtype_changed
        ],
        "shape_changed": [{"name": n, "a": x, "b": y} for n, x, y in report.shape_changed],
        "values_differ": [{"name": n, **_json_values(d)} for n, d in report.values_differ],
        "identical_blocks": [{"name": n, "type": t} for n, t in report.identical_blocks],
        "quantized": [
            {
                "name": q.name,
                "a": q.a,
                "b": q.b,
                "identical": q.identical,
                "values": None if q.values is None else _json_values(q.values),
            }
            for q in report.quantized
        ],
        "equal_tensors": report.equal,
        "atol": args.atol,
        "rtol": args.rtol,
    }
