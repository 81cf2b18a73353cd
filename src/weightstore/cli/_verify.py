"""`weightstore verify PATH...`: full validation of each file, and every tensor byte read.

Opening a file through the registry's reader checks its whole structure (header, metadata,
descriptors, that the tensors tile the data section; for PyTorch the archive, the pickle and
every tensor's view of its storage; for GGUF every tensor info's size and offset). Then each
tensor is read through the reader (`get`, or the stored bytes for dtypes NumPy cannot hold; a
GGUF tensor in quantized blocks as its blocks, `get_raw`, dequantized only for ``--values``)
and every byte of it touched, one tensor at a time. A tensor that fails is reported and the
others are still read.

A PyTorch checkpoint whose pickle names globals that would run code
(`weightstore.pytorch_reader._policy`) fails unless ``--allow-objects``: weightstore ran
nothing, but ``torch.load`` would. A user's own classes (a whole-module save) are inert data:
noted, warned about, and passed.

A Hugging Face cache snapshot (or a file in one) has each LFS blob's bytes checked against
the SHA-256 its name is (`weightstore.cli._hub`); ``--manifest FILE`` checks a directory's
files against ``sha256sum`` lines (`weightstore.cli._hash`); ``--values`` scans every tensor
for NaN and Inf, and warns of all-zero and constant ones (`weightstore.cli._values`).

Digests a file carries (docs/integrity.md) are checked as each tensor is read, and a set's
shard files against the index's file digests; the report notes how many tensors were checked
and names those that carry none. A file without digests reads as before, with no note.

Output: one line per file (``ok`` or ``FAILED``), each problem indented below it. Exit 0 when
every file passes, else 2 (with a one-line error on stderr per failed file).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeGuard

import numpy as np

from weightstore.cli._errors import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    about,
    describe,
    print_error,
    print_warning,
)
from weightstore.cli._extent import unread_bytes
from weightstore.cli._hub import check_blobs
from weightstore.cli._keys import class_warning, place
from weightstore.cli._manifest import check_directory
from weightstore.cli._objects import Scan, scan_globals
from weightstore.cli._open import open_file, storage_options_of
from weightstore.cli._progress import Progress
from weightstore.cli._text import plural, printable
from weightstore.cli._values import ValueTally, scan_values
from weightstore.container._format import TensorReader
from weightstore.errors import DTypeError, SetWarning, WeightstoreError

if TYPE_CHECKING:
    from weightstore.sets import SetReader

__all__ = ["TOUCH_CHUNK_SIZE", "Verdict", "add_parser", "run", "verify_file"]

TOUCH_CHUNK_SIZE: Final = 16 * 2**20  # bytes checksummed at once, so progress moves smoothly
UNDIGESTED_LISTED: Final = 20  # tensors named as carrying no digest; the rest are counted


@dataclass(slots=True)
class Verdict:
    """What verifying one file found.

    Attributes:
        path: the file. format: its format's name, once known.
        tensors: tensors read in full. nbytes: bytes read.
        problems: one line per failure (``tensor 'x': what``, or the file's own failure).
        notes: lines that are no failure (a set's files left out, and why).
        scan: PyTorch: the suspicious globals its pickle names.
        objects_allowed: ``--allow-objects`` was given, so the scan does not fail the file.
    """

    path: str
    format: str | None = None
    tensors: int = 0
    nbytes: int = 0
    problems: list[str] = field(default_factory=list)
    scan: Scan | None = None
    objects_allowed: bool = False
    notes: list[str] = field(default_factory=list)  # a set: files its directory holds, left out
    warnings: list[str] = field(default_factory=list)  # no failure, but worth a warning line

    @property
    def failed(self) -> bool:
        """Whether the file fails verification."""
        flagged = self.scan is not None and self.scan.flagged and not self.objects_allowed
        return bool(self.problems) or flagged


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``verify`` on the subcommand table `commands`."""
    parser = commands.add_parser(
        "verify", parents=[common], help="validate files fully and read every tensor byte"
    )
    parser.add_argument(
        "paths", nargs="+", metavar="PATH", help="a file, or a sharded set (directory or index)"
    )
    parser.add_argument("--top-level-key", metavar="KEY", help="PyTorch: verify KEY's tensors")
    parser.add_argument(
        "--allow-objects",
        action="store_true",
        help="PyTorch: accept pickles that name globals that would run code (os.system, ...)",
    )
    parser.add_argument(
        "--values",
        action="store_true",
        help="scan every tensor for NaN and Inf (fails) and all-zero or constant ones (warns)",
    )
    parser.add_argument(
        "--manifest",
        metavar="FILE",
        help="check the directory's files against FILE's '<sha256>  <path>' lines",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Verify each file of ``args.paths``; 0 when all pass, else 2."""
    code = EXIT_OK
    for path in args.paths:
        verdict = verify_file(path, args)
        print(_text(verdict))
        warning = class_warning(verdict.scan)
        if warning is not None:
            print_warning(f"{path}: {warning}")
        for line in verdict.warnings:
            print_warning(f"{path}: {line}")
        if verdict.failed:
            count = plural(len(verdict.problems) + _flag_count(verdict), "problem")
            print_error(f"{path}: verification failed ({count})")
            code = EXIT_BAD_INPUT
    return code


def verify_file(path: str, args: argparse.Namespace) -> Verdict:
    """Open `path`, validating its structure, and read every tensor."""
    with warnings.catch_warnings():  # a set's left-out files are notes of the verdict
        warnings.simplefilter("ignore", SetWarning)
        verdict = _verify(path, args)
    _check_digests(verdict, args)
    return verdict


def _check_digests(verdict: Verdict, args: argparse.Namespace) -> None:
    """A Hub cache snapshot's blobs against their names, and ``--manifest``'s lines."""
    from weightstore.io import is_url

    if is_url(verdict.path):
        if getattr(args, "manifest", None) is not None:
            verdict.problems.append("--manifest checks a local directory, not a URL")
        return

    blobs = check_blobs(verdict.path, quiet=args.quiet)
    if blobs is not None:
        verdict.problems += blobs.problems
        verdict.notes += blobs.notes()
    if getattr(args, "manifest", None) is not None:
        check_directory(verdict, args.manifest, quiet=args.quiet)


def _verify(path: str, args: argparse.Namespace) -> Verdict:
    verdict = Verdict(path, objects_allowed=args.allow_objects)
    try:
        with about(path):
            fmt, reader = open_file(
                path, top_level_key=args.top_level_key, storage_options=storage_options_of(args),
                io=args.io,
            )  # fmt: skip
    except Exception as err:  # the file as a whole fails: that is the report
        verdict.problems.append(_problem(err, path))
        return verdict
    verdict.format = fmt.name
    with reader:
        failed = _read_all(reader, verdict, args.quiet, _tally(args))
        _check_carried_digests(reader, verdict, failed)
        _check_unread_bytes(reader, verdict)
        load_object = getattr(reader, "load_object", None)
        if load_object is not None:  # a PyTorch checkpoint: what would torch.load import?
            verdict.scan = _whole_file_scan(reader, path, args)
        if _is_set_reader(reader):
            _check_set(reader, verdict, storage_options_of(args))
    return verdict


def _check_unread_bytes(reader: TensorReader, verdict: Verdict) -> None:
    """A problem for each file (the file, or a set's shards) holding bytes its reader never
    reads: more archives back to back, or bytes after the last one (`unread_bytes`)."""
    if _is_set_reader(reader):
        for shard in reader.shards:
            found = unread_bytes(shard)
            if found is not None:
                verdict.problems.append(f"shard {os.path.basename(shard)} {found}")
        return
    found = unread_bytes(verdict.path)
    if found is not None:
        verdict.problems.append(found)


def _is_set_reader(reader: object) -> TypeGuard[SetReader]:
    """Whether `reader` reads a sharded set. Asked of the loaded module only: a single file's
    verify never loads the set reader."""
    module = sys.modules.get("weightstore.sets._reader")
    return module is not None and isinstance(reader, module.SetReader)


def _check_set(reader: SetReader, verdict: Verdict, storage_options: dict[str, Any] | None) -> None:
    """A set's own problems (tensors its index and its shards disagree on), what it left out,
    and for PyTorch shards the globals each pickle names."""
    try:
        report = reader.report()
    except Exception as err:  # a shard that failed to open was reported with its tensors
        verdict.problems.append(_problem(err, verdict.path))
        return
    verdict.notes += [f"ignored {os.path.basename(file)}: {why}" for file, why in report.ignored]
    verdict.notes += [
        f"skipped {os.path.basename(entry)}: {kind}, not a file" for entry, kind in report.skipped
    ]
    for shard, names in report.missing.items():
        verdict.problems += [
            f"tensor {name!r}: the index puts it in {os.path.basename(shard)}, which lacks it"
            for name in names
        ]
    for shard, names in report.unlisted.items():
        verdict.problems += [
            f"tensor {name!r}: {os.path.basename(shard)} holds it, but the index does not list it"
            for name in names
        ]
    if reader.format.holds_foreign_objects:  # pickles: what would torch.load import?
        verdict.scan = _scan_shards(report.shards, storage_options)


def _scan_shards(shards: tuple[str, ...], storage_options: dict[str, Any] | None) -> Scan:
    """The suspicious globals of every shard's pickle, as one scan."""
    found: dict[str, Any] = {}
    classes: dict[str, Any] = {}
    complete = True
    for shard in shards:
        _, opened = open_file(shard, storage_options=storage_options)
        with opened:
            scan = scan_globals(opened.load_object())  # type: ignore[attr-defined]
        complete = complete and scan.complete
        for suspicious in scan.suspicious:
            found.setdefault(suspicious.qualname, suspicious)
        for inert in scan.classes:
            classes.setdefault(inert.qualname, inert)
    return Scan(tuple(found.values()), complete, tuple(classes.values()))


def _whole_file_scan(reader: Any, path: str, args: argparse.Namespace) -> Scan:
    """The scan of the whole file, whatever key the reader selected."""
    scan = getattr(reader, "scan", None)
    if scan is not None:  # a PyTorch reader scans its whole file
        found: Scan = scan()
        return found
    return scan_globals(reader.load_object())


def _tally(args: argparse.Namespace) -> ValueTally | None:
    """With ``--values``, the tally its scan fills; else None (bytes are only touched)."""
    if not getattr(args, "values", False):
        return None

    return ValueTally()


def _check_carried_digests(reader: TensorReader, verdict: Verdict, failed: set[str]) -> None:
    """The digests the file carries (docs/integrity.md), each tensor's checked as it was
    read and a set's shard files' here; a note of how many were checked and one per tensor
    that carries none. A file without any digest gets no note."""
    verify = getattr(reader, "verify_digests", None)
    if verify is None:  # a format that carries no digests (PyTorch, DCP)
        return
    names = [name for name in reader.names() if name not in failed]
    try:
        with about(verdict.path):
            missing = verify(names, files=True) if _is_set_reader(reader) else verify(names)
    except Exception as err:  # a shard file whose bytes differ from the index's digest
        verdict.problems.append(_problem(err, verdict.path))
        return
    checked = len(names) - len(missing)
    if checked == 0 and not any(_digest_failure(problem) for problem in verdict.problems):
        return
    verdict.notes.append(f"digests checked: {plural(checked, 'tensor')}")
    shown = missing[:UNDIGESTED_LISTED]
    verdict.notes += [f"tensor {name!r} carries no digest" for name in shown]
    if len(missing) > len(shown):
        verdict.notes.append(f"and {plural(len(missing) - len(shown), 'more tensor')} without")


def _digest_failure(problem: str) -> bool:
    return "digest mismatch" in problem


def _read_all(
    reader: TensorReader, verdict: Verdict, quiet: bool, values: ValueTally | None = None
) -> set[str]:
    """Read every tensor into `verdict`; the names that failed."""
    failed: set[str] = set()
    names = reader.names_in_file_order()
    plan = getattr(reader, "plan_reads", None)
    if plan is not None:  # a URL's reader then fetches them in large, concurrent batches
        plan(names)
    judging = values is not None
    total = sum(_nbytes(reader, name, judging) for name in names)
    with Progress(total, verdict.path, quiet=quiet) as progress:
        for name in names:
            try:
                with about(verdict.path):
                    data = _read(reader, name, judging)
                    if values is None:
                        nbytes = _touch(data, progress.advance)
                    else:
                        nbytes = _judge(reader, name, data, progress.advance, verdict, values)
                        nbytes = _blocks_nbytes(reader, name) or nbytes  # those of the file
            except Exception as err:
                verdict.problems.append(_problem(err, verdict.path, name))
                failed.add(name)
                continue
            verdict.tensors += 1
            verdict.nbytes += nbytes
    if values is not None:
        verdict.notes.append(values.note())
    return failed


def _judge(
    reader: TensorReader,
    name: str,
    data: np.ndarray[Any, Any] | memoryview,
    advance: Any,
    verdict: Verdict,
    tally: ValueTally,
) -> int:
    """Read `data` scanning its values (``--values``): NaN or Inf fails the tensor, all-zero
    or constant warns; the bytes read."""

    counts = None
    if isinstance(data, np.ndarray):
        counts = scan_values(data, _dtype(reader, name), advance)
    tally.add(counts)
    if counts is None:  # a dtype that is not judged: read like any other
        return _touch(data, advance)
    if counts.broken:
        verdict.problems.append(f"tensor {name!r}: {counts.problem()}")
    warning = counts.warning()
    if warning is not None:
        verdict.warnings.append(f"tensor {name!r}: {warning}")
    return int(data.nbytes)


def _dtype(reader: TensorReader, name: str) -> Any:
    try:
        return reader.descriptor(name).dtype
    except WeightstoreError:  # the array's own dtype decides
        return None


def _nbytes(reader: TensorReader, name: str, judging: bool) -> int:
    """Bytes `_read` hands out for `name`: its blocks for a quantized tensor read raw."""
    try:
        info = reader.descriptor(name)
        blocks = None if judging else _blocks_nbytes(reader, name)
        return blocks or int(info.dtype.nbytes(tuple(info.shape)))
    except WeightstoreError:  # reported when the tensor is read
        return 0


def _blocks_nbytes(reader: TensorReader, name: str) -> int | None:
    """The bytes of a tensor stored in quantized blocks (its size in the file, whatever it
    dequantizes to); None for any other."""
    info: Any = reader.descriptor(name)
    return int(info.nbytes) if _quantized(info) else None


def _quantized(info: Any) -> bool:
    """Whether a descriptor is of a tensor stored in quantized blocks (GGUF's Q4_K...)."""
    return getattr(info, "quantized", False) is True


def _read(reader: TensorReader, name: str, judging: bool) -> np.ndarray[Any, Any] | memoryview:
    """The tensor as the reader gives it, or its stored bytes when NumPy cannot hold it. A
    quantized tensor is read as its blocks (every byte, digest checked), and dequantized
    only when its values are judged (``--values``)."""
    get_raw = getattr(reader, "get_raw", None)
    if not judging and get_raw is not None and _quantized(reader.descriptor(name)):
        blocks: np.ndarray[Any, Any] = get_raw(name)
        return blocks
    try:
        array: np.ndarray[Any, Any] = reader.get(name)
        return array
    except DTypeError:
        get_bytes = getattr(reader, "get_bytes", None)
        if get_bytes is None:
            raise
        data: memoryview = get_bytes(name)
        return data


def _touch(data: np.ndarray[Any, Any] | memoryview, advance: Any) -> int:
    """Read every byte of `data` (a checksum pass); the bytes read."""
    if isinstance(data, np.ndarray):
        view = np.ascontiguousarray(data).reshape(-1).view(np.uint8).data
    else:
        view = data.cast("B")
    for start in range(0, view.nbytes, TOUCH_CHUNK_SIZE):
        chunk = view[start : start + TOUCH_CHUNK_SIZE]
        zlib.crc32(chunk)
        advance(chunk.nbytes)
    return view.nbytes


def _problem(err: BaseException, path: str, tensor: str | None = None) -> str:
    """One report line for `err`: the error line without the file, which heads the report."""
    message, _ = describe(err)
    for prefix in (f"{path}, ", f"{path}: "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
            break
    if tensor is not None and not message.startswith("tensor "):
        message = f"tensor {tensor!r}: {message}"
    return message


def _flag_count(verdict: Verdict) -> int:
    scan = verdict.scan
    if scan is None or verdict.objects_allowed:
        return 0
    return len(scan.suspicious) + (0 if scan.complete else 1)


def _text(verdict: Verdict) -> str:
    state = "FAILED" if verdict.failed else "ok"
    if verdict.format is not None:
        read = f"{plural(verdict.tensors, 'tensor')}, {verdict.nbytes:,} bytes read"
        state += f" ({verdict.format}, {read})"
    lines = [f"{printable(verdict.path)}: {state}"]
    lines += [f"  {printable(problem)}" for problem in verdict.problems]
    lines += [f"  note: {printable(note)}" for note in verdict.notes]
    lines += _scan_lines(verdict)
    return "\n".join(lines)


def _scan_lines(verdict: Verdict) -> list[str]:
    scan = verdict.scan
    if scan is None:
        return []
    objects = [
        f"  note: an object of class {printable(g.qualname)} at {printable(place(g.where))}, "
        "read as inert data"
        for g in scan.classes
    ]
    if not scan.flagged:
        return objects
    note = "allowed by --allow-objects" if verdict.objects_allowed else "pass --allow-objects"
    lines = [
        f"  suspicious global {printable(g.qualname)} at {printable(place(g.where))} "
        f"(torch.load would run it; {note})"
        for g in scan.suspicious
    ]
    if not scan.complete:
        lines.append(f"  the scan of the pickle's objects stopped early ({note})")
    return objects + lines
