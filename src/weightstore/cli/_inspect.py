"""`weightstore inspect`: what one or more files hold, read from their headers.

Each file's format comes from its bytes (`weightstore.formats`); no tensor data is read. A file
that fails prints its one-line error and the others are still listed. A PyTorch checkpoint
whose pickle names globals that would run code (`weightstore.pytorch_reader._policy`) is
listed in full, then refused with exit code 2 unless ``--allow-objects``; one holding a user's
classes (a whole-module save) lists them as objects and warns, exit 0. A quantized tensor
stored as several (FP8 codes and scales) is listed once more as one row, its parts under it
(`weightstore.cli._report_quantized`).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from weightstore.cli._errors import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    about,
    describe,
    print_error,
    print_warning,
    report_failure,
)
from weightstore.cli._extent import unread_bytes
from weightstore.cli._keys import class_warning
from weightstore.cli._layout import add_layout_flags, layout_of
from weightstore.cli._open import storage_options_of
from weightstore.cli._render import json_document, render_text
from weightstore.cli._report import FileReport, summarize
from weightstore.cli._report_quantized import filter_groups, with_groups
from weightstore.cli._text import dump_json
from weightstore.paths import PathFilter

__all__ = ["add_parser", "flag_damage", "flag_objects", "run"]


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``inspect`` on the subcommand table `commands`."""
    parser = commands.add_parser(
        "inspect", parents=[common], help="show files' format, metadata, objects and tensors"
    )
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="a file, or a sharded set (directory or index); local or a URL (s3://, https://)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON (a list for several)")
    parser.add_argument("--filter", metavar="REGEX", help="list only tensors whose name matches")
    parser.add_argument(
        "--top-level-key", metavar="KEY", help="PyTorch: list the tensors under this key only"
    )
    parser.add_argument(
        "--allow-objects",
        action="store_true",
        help="PyTorch: accept pickles that name globals that would run code (os.system, ...)",
    )
    add_layout_flags(parser, "also show what a load would make")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """List every file of ``args.paths``; the worst exit code of them all."""
    with about("--filter"):
        keep = PathFilter().with_regex(args.filter) if args.filter else None
    storage = storage_options_of(args)
    code, documents = EXIT_OK, []
    for index, path in enumerate(args.paths):
        try:
            with about(path):
                summary = summarize(path, top_level_key=args.top_level_key, storage_options=storage)
                summary = with_groups(summary, args.top_level_key, storage)
                report = _filtered(summary, keep)
        except Exception as err:
            code = max(code, report_failure(err, args.debug))
            documents.append({"path": path, "error": describe(err)[0]})
            continue
        documents.append(json_document(report))
        if not args.json:  # each report as soon as it is ready, a blank line between
            print(("\n" if index else "") + render_text(report))
        code = max(code, flag_damage(report))
        unread = unread_bytes(report.path)
        if unread is not None:  # verify fails the file; a listing shows what was read
            print_warning(f"{report.path}: {unread}")
        warning = class_warning(report.scan)
        if warning is not None:
            print_warning(f"{report.path}: {warning}")
        if not args.allow_objects:
            code = max(code, flag_objects(report))
        if getattr(args, "layout", None) or getattr(args, "layout_file", None):
            code = max(code, _show_layout(path, args, storage))
    if args.json:
        print(dump_json(documents[0] if len(args.paths) == 1 else documents))
    return code


def _show_layout(path: str, args: argparse.Namespace, storage: dict[str, Any] | None) -> int:
    """Print what the ``--layout`` rules make of `path`'s tensors (no data read); a layout
    that meets problems fails the command."""
    from weightstore.adapters._layout_rewrite import rewrite_layout
    from weightstore.stores import Store

    layout = layout_of(args)
    assert layout is not None
    with about(path), Store.from_file(path, storage_options=storage) as store:
        if args.top_level_key is not None:
            store = store.with_top_level_key(args.top_level_key)
        _, plan = rewrite_layout(layout, list(store.get_all_snapshots().values()))
    print(f"\nlayout {layout.name or args.layout_file}: {plan}")
    return EXIT_BAD_INPUT if plan.problems else EXIT_OK


def _filtered(report: FileReport, keep: PathFilter | None) -> FileReport:
    if keep is None:
        return report
    rows = [row for row in report.tensors if keep.matches(row.name)]
    groups = filter_groups(report, keep)
    return dataclasses.replace(
        report, tensors=rows, listed_from=len(report.tensors), quantized=groups
    )


def flag_damage(report: FileReport) -> int:
    """Print the error for a set whose shards did not all read (listed, marked, in the
    report); its exit code: the set is damaged even though the rest is listed."""
    damaged = report.set.damaged if report.set is not None else ()
    if not damaged:
        return EXIT_OK
    (first, why), more = damaged[0], len(damaged) - 1
    others = f" (and {more:,} more)" if more else ""
    print_error(f"{report.path}: shard {first}{others} cannot be read: {why}")
    return EXIT_BAD_INPUT


def flag_objects(report: FileReport) -> int:
    """Print the error for a report whose pickle names globals that would run code; its exit
    code."""
    scan = report.scan
    if scan is None or not scan.flagged:
        return EXIT_OK
    names = ", ".join(g.qualname for g in scan.suspicious[:5])
    more = len(scan.suspicious) - 5
    what = f"the pickle names {names}" + (f" and {more:,} more" if more > 0 else "")
    if not scan.complete:
        what = f"{what}; the scan stopped early" if scan.suspicious else "the scan stopped early"
    print_error(
        f"{report.path}: {what}, which torch.load would import and may run; pass "
        "--allow-objects to accept it"
    )
    return EXIT_BAD_INPUT
