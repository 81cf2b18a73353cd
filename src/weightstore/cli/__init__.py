"""The `weightstore` command line: one subcommand per job, every failure one line.

    weightstore inspect PATH...       format, metadata, objects and tensors of files
    weightstore convert SRC DST       any readable format into a writable one, streaming
    weightstore diff A B              tensors only in one file, changed dtype/shape or values
    weightstore verify PATH...        full validation, every tensor byte read
    weightstore hash FILE...          SHA-256 lines in sha256sum format; --check reads them
    weightstore demo                  inspect and round-trip the bundled example

Each subcommand lives in its own module (`_inspect`, `_convert`, `_diff`, `_verify`, `_hash`)
with an ``add_parser`` and a ``run``; exit codes and the error line are `_errors`'s. No input
makes the command line print a traceback: an unexpected exception is one "internal error"
line, exit 3, and ``--debug`` prints the trace (`weightstore.cli._errors`).
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final, NoReturn

from weightstore.base import __version__
from weightstore.cli._errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    print_error,
    report_failure,
    routed_warnings,
)

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
    from weightstore.cli._demo import example_path, run_demo
    from weightstore.cli._render import render_text
    from weightstore.cli._report import summarize

    print(render_text(summarize(example_path())))
    print()
    for line in run_demo():
        print(line)
    return 0


# Each subcommand and the module whose ``add_parser`` registers it, in help order. A run
# imports only its own command's module: ``inspect --json`` of a SafeTensors file loads no NumPy.
_COMMANDS: Final[dict[str, str | AddParser]] = {
    "inspect": "weightstore.cli._inspect",
    "convert": "weightstore.cli._convert",
    "diff": "weightstore.cli._diff",
    "verify": "weightstore.cli._verify",
    "hash": "weightstore.cli._hash",
    "demo": _add_demo,
}


def _adder(command: str) -> AddParser:
    home = _COMMANDS[command]
    if callable(home):
        return home
    add: AddParser = importlib.import_module(home).add_parser
    return add


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand `argv` names, or None when it names none or asks for the overall help
    (then every subcommand is registered, as the help lists them all)."""
    for arg in argv:
        if arg in ("-h", "--help"):
            return None
        if not arg.startswith("-"):
            return arg if arg in _COMMANDS else None
    return None


# Where `--help` sends a reader for more: the page lists what the help cannot hold (exit
# codes, output formats, URLs and their options, real output of each command).
HELP_EPILOG: Final = (
    "'weightstore COMMAND --help' lists a command's flags. Every command, flag and exit code, "
    "with real output, and the S3 settings: docs/cli.md in the weightstore repository "
    "(docs/remote.md for URLs)."
)


def build_parser() -> argparse.ArgumentParser:
    """The parser of the whole command line, every subcommand registered."""
    return _parser_for(None)


def _parser_for(command: str | None) -> argparse.ArgumentParser:
    """The command line's parser with only `command` registered (every one for None): `main`
    knows which runs, so the other commands' modules stay unloaded."""
    parser = _Parser(
        prog="weightstore",
        description="Save, load, inspect and convert neural-network weights.",
        epilog=HELP_EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"weightstore {__version__}")
    parser.add_argument("--debug", action="store_true", help="print tracebacks of failures")
    # Accepted after the subcommand too; SUPPRESS keeps a subcommand from resetting it.
    common = _Parser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="print tracebacks"
    )
    common.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="storage_option",
        help="for URL paths: an option of their filesystem (endpoint_url=..., anon=true); "
        "the value is read as JSON when it parses, else as text",
    )
    common.add_argument(
        "--io",
        choices=("auto", "mmap", "pread", "direct"),
        default="auto",
        help="how local files are read: auto (mmap on a local disk; pread on a network or "
        "FUSE file system, or for a file larger than free memory), mmap, pread, or direct "
        "(O_DIRECT, the page cache bypassed); docs/io.md",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMANDS if command is None else (command,):
        _adder(name)(commands, common)
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
        arguments = sys.argv[1:] if argv is None else list(argv)
        args = _parser_for(_command_in(arguments)).parse_args(arguments)
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
