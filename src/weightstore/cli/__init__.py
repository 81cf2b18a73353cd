"""The `weightstore` command line: one subcommand per job, errors as one line and exit code 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from weightstore.cli._demo import example_path, run_demo
from weightstore.cli._render import render_json, render_text
from weightstore.cli._report import summarize
from weightstore.errors import WeightstoreError

__all__ = ["main"]

EXIT_BAD_INPUT = 2


def _add_inspect(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("inspect", help="show a file's format, metadata and tensors")
    parser.add_argument("path", help="a .bpk, .safetensors or .pt/.pth file")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--top-level-key", metavar="KEY", help="PyTorch: list the tensors under this key only"
    )
    parser.set_defaults(run=_run_inspect)


def _run_inspect(args: argparse.Namespace) -> int:
    report = summarize(args.path, top_level_key=args.top_level_key)
    print(render_json(report) if args.json else render_text(report))
    return 0


def _add_demo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("demo", help="inspect and round-trip the bundled example file")
    parser.set_defaults(run=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    print(render_text(summarize(example_path())))
    print()
    for line in run_demo():
        print(line)
    return 0


_COMMANDS: tuple[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None], ...] = (
    _add_inspect,
    _add_demo,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="weightstore",
        description="Save, load, inspect and convert neural-network weights.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in _COMMANDS:
        add(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except (WeightstoreError, OSError) as err:
        print(f"weightstore: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return code


def console_main() -> None:
    """Entry point of the installed `weightstore` script."""
    sys.exit(main())
