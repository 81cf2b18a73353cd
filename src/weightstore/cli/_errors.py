"""Exit codes and the one line every failure prints.

Whatever goes wrong, the command line prints one line on stderr and exits with a code a script
can act on; it never prints a traceback unless asked (``--debug``)::

    weightstore: error: <file>[, tensor '<name>']: <what>

| code | meaning |
|---|---|
| 0 | success (`diff`: the files hold equal tensors) |
| 1 | `diff` only: the files differ |
| 2 | bad input: a damaged or hostile file, a missing file, a bad option, a failed `verify` |
| 3 | internal error: a bug in weightstore; ``--debug`` prints the traceback |
| 130 | interrupted (Ctrl-C) |

The line is built from the error's fields (`WeightstoreError.path`, ``.tensor``, ``.detail``;
`OSError.filename`, ``.strerror``), not its text, so every error has the same shape. An error
that names no file gets the file the command was working on (`about`).
"""

from __future__ import annotations

import contextlib
import sys
import traceback
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final, TextIO

from weightstore.cli._text import printable, shortened
from weightstore.errors import DestinationExistsError, WeightstoreError

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_DIFFERENT",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "about",
    "describe",
    "print_error",
    "print_warning",
    "report_failure",
    "routed_warnings",
]

EXIT_OK: Final = 0
"""Success; for `diff`, the files hold equal tensors."""
EXIT_DIFFERENT: Final = 1
"""`diff` only: the files differ."""
EXIT_BAD_INPUT: Final = 2
"""Bad input: a damaged, hostile or missing file, a bad option (argparse's code too)."""
EXIT_INTERNAL: Final = 3
"""A bug in weightstore: an exception no input should cause."""
EXIT_INTERRUPTED: Final = 130
"""Ctrl-C: 128 + SIGINT, as shells report it."""

PROG: Final = "weightstore"
_SUBJECT: Final = "_weightstore_cli_subject"  # attribute `about` leaves on an exception
# Hints that name the library's keyword where the command line has a flag.
_CLI_HINTS: Final[dict[type[WeightstoreError], str]] = {
    DestinationExistsError: "file exists; pass --overwrite to replace it",
}


@contextmanager
def about(path: str | None) -> Iterator[None]:
    """Attribute errors raised inside the block to `path` when they name no file themselves."""
    try:
        yield
    except Exception as err:
        if not hasattr(err, _SUBJECT):
            setattr(err, _SUBJECT, path)
        raise


def _where(path: str | None, tensor: str | None) -> str:
    parts = [path] if path else []
    if tensor is not None:
        parts.append(f"tensor {tensor!r}")
    return ", ".join(parts)


def describe(err: BaseException) -> tuple[str, int]:
    """The message (after ``weightstore: error: ``) and exit code for `err`."""
    subject = getattr(err, _SUBJECT, None)
    if isinstance(err, WeightstoreError):
        detail = _CLI_HINTS.get(type(err)) or getattr(err, "detail", None) or str(err)
        where = _where(getattr(err, "path", None) or subject, getattr(err, "tensor", None))
        return _joined(where, detail), EXIT_BAD_INPUT
    if isinstance(err, OSError):
        reason = err.strerror or str(err) or type(err).__name__
        detail = reason[:1].lower() + reason[1:]
        filename = err.filename if isinstance(err.filename, str) else None
        return _joined(filename or subject or "", detail), EXIT_BAD_INPUT
    detail = f"internal error: {type(err).__name__}: {err}"
    hint = " (rerun with --debug for the traceback, and please report it)"
    return _joined(subject or "", shortened(detail, 300) + hint), EXIT_INTERNAL


def _joined(where: str, detail: str) -> str:
    return f"{where}: {detail}" if where else detail


def print_error(message: str) -> None:
    """Print ``weightstore: error: <message>`` as one line on stderr, after what stdout holds
    (so a log capturing both shows the error after the report it concerns)."""
    _flush_stdout()
    print(f"{PROG}: error: {printable(message)}", file=sys.stderr)


def print_warning(message: str) -> None:
    """Print ``weightstore: warning: <message>`` as one line on stderr."""
    _flush_stdout()
    print(f"{PROG}: warning: {printable(message)}", file=sys.stderr)


def _flush_stdout() -> None:
    with contextlib.suppress(OSError, ValueError):  # a closed pipe: the error line matters more
        sys.stdout.flush()


def report_failure(err: BaseException, debug: bool) -> int:
    """Print `err` as one line (and, with `debug`, its traceback first); its exit code."""
    if debug:
        traceback.print_exception(type(err), err, err.__traceback__, file=sys.stderr)
    message, code = describe(err)
    print_error(message)
    return code


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    print_warning(f"{category.__name__}: {message}")


@contextmanager
def routed_warnings() -> Iterator[None]:
    """Print Python warnings raised in the block as one ``weightstore: warning:`` line each
    (NumPy's overflow warning on a cast to f16 would otherwise print a source line)."""
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = _show_warning
        yield
