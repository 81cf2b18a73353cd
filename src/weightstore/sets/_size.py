"""Shard sizes as people write them: ``"5GB"``, ``"1.5GB"``, ``"500MB"``, ``"5GiB"``, an int.

Units are the ones huggingface_hub and transformers use for ``max_shard_size``: decimal
(``KB``, ``MB``, ``GB``, ``TB``: powers of 1000, so ``"5GB"`` is 5 * 10**9 bytes) and binary
(``KiB`` .. ``TiB``: powers of 1024). A bare number, or a ``B`` suffix, is bytes. Fractions are
exact (``"1.1GB"`` is 1,100,000,000, not the float's 1,100,000,000.0000002) and round down to
whole bytes, as huggingface_hub's ``int(value * multiplier)`` does for sizes it can represent.

A lower-case ``b`` after a prefix (``"5Gb"``, ``"500mb"``) is refused: transformers reads it as
bits (an eighth of the bytes) and huggingface_hub as bytes, so the same string gives shards that
differ eightfold depending on which tool reads it.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Final

from weightstore.errors import InvalidOptionError

__all__ = ["MAX_SIZE_TEXT_LEN", "UNITS", "parse_size"]

UNITS: Final = {
    "": 1, "B": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40,
}  # fmt: skip
"""Bytes per unit, keyed by the unit upper-cased."""

MAX_SIZE_TEXT_LEN: Final = 64  # characters; a size is a few digits and a unit, never a page
MAX_SIZE: Final = 2**63 - 1  # bytes; no file or shard can be larger (an off_t)

_SIZE: Final = re.compile(r"\s*(?P<number>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>[A-Za-z]*)\s*")
_BITS: Final = re.compile(r"[KMGTkmgt]b")  # a decimal prefix, then a lower-case b


def parse_size(size: int | str, *, option: str = "max_shard_size") -> int:
    """Bytes in `size`: an int of bytes, or text such as ``"5GB"``, ``"1.5GB"``, ``"5GiB"``.

    Args:
        size: the size; ints are bytes.
        option: the option being set, named in the error.

    Returns:
        A positive number of bytes.

    Raises:
        InvalidOptionError: not an int or text, text that is no size, an unknown or ambiguous
            unit (``"5Gb"``), zero or less, or more than any file can hold.

    Example:
        >>> parse_size("5GB"), parse_size("1.5GB"), parse_size("5GiB"), parse_size(1000)
        (5000000000, 1500000000, 5368709120, 1000)
    """
    if isinstance(size, bool) or not isinstance(size, int | str):
        raise InvalidOptionError(
            f"{option} is an int of bytes or text such as '5GB', not {type(size).__name__}",
            option=option,
        )
    nbytes = size if isinstance(size, int) else _parse_text(size, option)
    if not 0 < nbytes <= MAX_SIZE:
        raise InvalidOptionError(
            f"{option} is {nbytes:,} bytes, expected between 1 and {MAX_SIZE:,}", option=option
        )
    return nbytes


def _parse_text(text: str, option: str) -> int:
    if len(text) > MAX_SIZE_TEXT_LEN:
        raise InvalidOptionError(
            f"{option} is {len(text):,} characters of text, not a size such as '5GB'",
            option=option,
        )
    match = _SIZE.fullmatch(text)
    if match is None:
        raise InvalidOptionError(
            f"{option} {text!r} is not a size; expected a number and a unit such as '5GB', "
            "'500MB', '1.5GB' or '5GiB'",
            option=option,
        )
    unit = match["unit"]
    if _BITS.fullmatch(unit):
        raise InvalidOptionError(
            f"{option} {text!r} is ambiguous: transformers reads a lower-case 'b' as bits, "
            f"huggingface_hub as bytes; write {match['number']}{unit[:-1].upper()}B",
            option=option,
        )
    multiplier = UNITS.get(unit.upper())
    if multiplier is None:
        raise InvalidOptionError(
            f"{option} {text!r} has unknown unit {unit!r}; expected one of "
            + ", ".join(name for name in ("B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB")),
            option=option,
        )
    return int(Decimal(match["number"]) * multiplier)
