"""Text that is safe to print, whatever a file put in it: one record per line, no crashes.

Tensor names, metadata, pickled strings and even file names come from the input, and the input
may be hostile. Two rules hold for everything the command line prints:

* text output goes through `printable`: control, format, separator and surrogate characters
  are escaped (``\\n``, ``\\u202e``, ``\\udc80``), so a name holding a newline stays on its line,
  a bidi override cannot reorder a listing, and a lone surrogate (valid in a JSON header,
  unencodable in UTF-8) cannot raise `UnicodeEncodeError`;
* JSON output goes through `dump_json`, which escapes every non-ASCII character, so the text is
  pure ASCII and a parser gets back the exact name, lone surrogates included.

Backslashes are not doubled: a literal ``\\n`` in a name prints as itself. The JSON output is
the exact form when that matters.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

__all__ = ["dump_json", "json_number", "plural", "printable", "shortened"]

MAX_TEXT_LEN: Final = 200  # characters of one file-supplied string shown in a listing


def printable(text: str) -> str:
    """`text` with every character that is not printable escaped, so it prints as one line.

    Example:
        >>> printable("fc\\n.weight\\udc80")
        'fc\\\\n.weight\\\\udc80'
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def _escape(ch: str) -> str:
    # unicode_escape writes \n, \t, \xNN, \uNNNN or \UNNNNNNNN; a surrogate becomes \udNNN.
    return ch.encode("unicode_escape", errors="backslashreplace").decode("ascii")


def shortened(text: str, limit: int = MAX_TEXT_LEN) -> str:
    """`printable(text)`, cut to `limit` characters with ``...`` when longer."""
    shown = printable(text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def plural(count: int, noun: str) -> str:
    """``1 tensor``, ``2 tensors``, ``1,024 tensors``: a count with its noun agreeing."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def json_number(value: float) -> float | str:
    """A float as JSON can hold it: finite values as numbers, others as ``"NaN"``,
    ``"Infinity"`` or ``"-Infinity"`` (JSON has no spelling for them)."""
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def dump_json(document: Any) -> str:
    """`document` as indented, pure-ASCII JSON; refuses NaN rather than writing invalid JSON."""
    return json.dumps(document, indent=2, ensure_ascii=True, allow_nan=False)
