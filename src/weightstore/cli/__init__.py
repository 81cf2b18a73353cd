"""The `weightstore` command line: one subcommand per job, every failure one line.

    weightstore inspect PATH...       format, metadata, objects and tensors of files
    weightstore convert SRC DST       any readable format into a writable one, streaming
    weightstore diff A B              tensors only in one file, changed dtype/shape or values
    weightstore verify PATH...        full validation, every tensor byte read
    weightstore demo                  inspect and round-trip the bundled example

Each subcommand lives in its own module (`_inspect`, `_convert`, `_diff`, `_verify`) with an
``add_parser`` and a ``run``; exit codes and the error line are `_errors`'s. No input makes the
command line print a traceback: an unexpected exception is one "internal error" line, exit 3,
and ``--debug`` prints the trace (`weightstore.cli._errors`).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final, NoReturn

from weightstore._version import __version__
from weightstore.cli._convert import add_parser as _add_convert
from weightstore.cli._demo import example_path, run_demo
from weightstore.cli._diff import add_parser as _add_diff
from weightstore.cli._errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    print_error,
    report_failure,
    routed_warnings,
)
from weightstore.cli._inspect import add_parser as _add_inspect
from weightstore.cli._render import render_text
from weightstore.cli._report import summarize
from weightstore.cli._verify import add_parser as _add_verify

__all__ = ["EXIT_BROKEN_PIPE", "build_parser", "console_main", "main"]

EXIT_BROKEN_PIPE: Final = 141  # 128 + SIGPIPE: the reader of our output went away
"""Exit code when whatever reads the output closes it early (``weightstore inspect | head``)."""

AddParser = Callable[[Any, argparse.ArgumentParser], None]


class _Parser(argparse.ArgumentParser):
    """argparse with its usage errors as one ``weightstore: error:`` line, exit code 2."""

    def error(self, message: str) -> NoReturn:
        print_error(f"{message} (see '{self.prog} --help')")
        raise SystemExit(EXIT_BAD_INPUT)


def _add_demo(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "demo", parents=[common], help="inspect and round-trip the bundled example file"
    )
    parser.set_defaults(run=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    print(render_text(summarize(example_path())))
    print()
    for line in run_demo():
        print(line)
    return 0


_COMMANDS: tuple[AddParser, ...] = (
    _add_inspect,
    _add_convert,
    _add_diff,
    _add_verify,
    _add_demo,
)


def build_parser() -> argparse.ArgumentParser:
    """The parser of the whole command line, every subcommand registered."""
    parser = _Parser(
        prog="weightstore",
        description="Save, load, inspect and convert neural-network weights.",
    )
    parser.add_argument("--version", action="version", version=f"weightstore {__version__}")
    parser.add_argument("--debug", action="store_true", help="print tracebacks of failures")
    # Accepted after the subcommand too; SUPPRESS keeps a subcommand from resetting it.
    common = _Parser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="print tracebacks"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in _COMMANDS:
        add(commands, common)
    return parser


def _tolerant_streams() -> None:
    """Never fail on an encoding: text the escaping missed prints as backslash escapes."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on `argv` (default: ``sys.argv[1:]``); returns the exit code."""
    _tolerant_streams()
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as done:  # --help, --version, or a usage error already printed
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        return EXIT_BAD_INPUT
    with routed_warnings():
        try:
            return int(args.run(args))
        except KeyboardInterrupt:
            print_error("interrupted")
            return EXIT_INTERRUPTED
        except BrokenPipeError:
            _detach_stdout()
            return EXIT_BROKEN_PIPE
        except Exception as err:
            return report_failure(err, args.debug)


def _detach_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (tests capture it)
        pass
    finally:
        os.close(devnull)


def console_main() -> None:
    """Entry point of the installed `weightstore` script and of ``python -m weightstore``."""
    sys.exit(main())
