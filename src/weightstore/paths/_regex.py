r"""Rust `regex` syntax on Python's `re`: patterns, replacements and `replace_all`.

Burn users write filters and remapping rules for Rust's `regex` crate, and the same strings must
mean the same thing here. Python's `re` accepts almost every Rust pattern, so we compile with `re`
(search semantics, as Rust's `is_match`) after rewriting the few constructs that differ:

    Rust                           Python              why
    (?<name>...)                   (?P<name>...)       re rejects the short form
    \z                             \Z                  end of text
    \< \> \b{start} \b{end} ...    look-around on \w   re would match a literal "<" or "{start}"
    \x{1F4A1} \u{..} \U{..}        \U0001F4A1          re wants a fixed number of hex digits
    [[:alpha:]] and other ASCII    [A-Za-z] ...        re would read a nested set

Constructs that `re` would silently read differently are refused with `InvalidOptionError`:
nested classes and set operations (`[a-z&&[^x]]`, `--`, `~~`) and Unicode properties (`\p{L}`).
Python-only features (look-around, back-references) are accepted; such a pattern will not work in
Burn, which is the caller's choice. One difference remains on purpose: Rust's `$` matches only at
the very end, Python's also before a final newline; tensor paths hold no newlines.

Replacements accept both dialects and are parsed once into literal text and group references:
Rust's `$1`, `${1}`, `$name`, `${name}`, `$$`, and Python's `\1`, `\g<1>`, `\g<name>`, `\\`.
A reference to a group the pattern lacks is an error (Rust silently substitutes nothing, which
hides the `$1_x` gotcha: that names the group "1_x"; write `${1}_x`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final, TypeAlias

from weightstore.base._record import ValueRecord
from weightstore.errors import InvalidOptionError

# Escapes that only Rust understands, outside character classes; each becomes a Python equivalent.
_RUST_ESCAPES: Final[dict[str, str]] = {
    "\\z": "\\Z",
    "\\<": "\\b(?=\\w)",
    "\\>": "\\b(?<=\\w)",
    "\\b{start}": "\\b(?=\\w)",
    "\\b{end}": "\\b(?<=\\w)",
    "\\b{start-half}": "(?<!\\w)",
    "\\b{end-half}": "(?!\\w)",
}

# Rust's ASCII classes, usable only inside brackets, as Python class bodies.
_POSIX_CLASSES: Final[dict[str, str]] = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7F",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1F\\x7F",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}

# Pattern texts, compiled at first use through re's own cache: compiling them at import would
# cost every `import weightstore.stores`, and most processes never translate a pattern.
_BRACED_HEX: Final = r"\\[xuU]\{([0-9A-Fa-f]{1,8})\}"
_POSIX_CLASS: Final = r"\[:(\^?)([a-z]+):\]"
_CLASS_OPERATORS: Final = ("&&", "--", "~~")


def _bad_pattern(pattern: str, why: str) -> InvalidOptionError:
    return InvalidOptionError(f"regex {pattern!r} {why}")


def _translate_escape(pattern: str, i: int, in_class: bool) -> tuple[str, int]:
    """The Python spelling of the escape starting at `pattern[i]` (a backslash), and its end."""
    if pattern.startswith(("\\p", "\\P"), i):
        raise _bad_pattern(pattern, "uses a Unicode property (\\p); Python's re has none")
    braced = re.compile(_BRACED_HEX).match(pattern, i)
    if braced:
        return f"\\U{int(braced.group(1), 16):08X}", braced.end()
    if not in_class:
        for rust, python in _RUST_ESCAPES.items():
            if pattern.startswith(rust, i):
                return python, i + len(rust)
    return pattern[i : i + 2], i + 2


def _translate_posix(pattern: str, i: int) -> tuple[str, int]:
    """The body of an ASCII class such as `[:alpha:]` inside brackets, and its end."""
    found = re.compile(_POSIX_CLASS).match(pattern, i)
    if not found or found.group(2) not in _POSIX_CLASSES or found.group(1):
        raise _bad_pattern(pattern, f"has a nested class at position {i}; re has none")
    return _POSIX_CLASSES[found.group(2)], found.end()


def _class_body_start(pattern: str, i: int) -> int:
    """Where a class opened at `pattern[i]` starts: a leading `^` and `]` belong to it."""
    i += 1
    if pattern.startswith("^", i):
        i += 1
    if pattern.startswith("]", i):
        i += 1
    return i


def translate_pattern(pattern: str) -> str:
    """Rewrite a Rust-syntax pattern for Python's `re`; see the module docstring for the table.

    Raises:
        InvalidOptionError: the pattern uses Rust syntax that `re` would read differently.
    """
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        if pattern[i] == "\\":
            piece, i = _translate_escape(pattern, i, in_class)
        elif in_class and pattern.startswith("[:", i):
            piece, i = _translate_posix(pattern, i)
        elif in_class and (pattern[i] == "[" or pattern.startswith(_CLASS_OPERATORS, i)):
            raise _bad_pattern(pattern, f"uses Rust set syntax at position {i}; re has none")
        elif not in_class and pattern[i] == "[":
            body = _class_body_start(pattern, i)  # a leading "]" is a member, not the end
            piece, i, in_class = pattern[i:body], body, True
        elif not in_class and pattern.startswith("(?<", i) and pattern[i + 3 : i + 4] not in "=!":
            piece, i = "(?P<", i + 3
        else:
            in_class = in_class and pattern[i] != "]"
            piece, i = pattern[i], i + 1
        out.append(piece)
    return "".join(out)


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """Compile a Rust- or Python-syntax regex, or fail at once with the reason.

    Callers validate options at the builder call with this, so a bad pattern never waits for a
    load to be found (Burn's `PathFilter::with_regex` silently drops it).

    Raises:
        InvalidOptionError: the pattern does not compile, or uses Rust syntax re would misread.
    """
    if not isinstance(pattern, str):
        raise InvalidOptionError(f"regex must be a str, got {type(pattern).__name__}")
    try:
        return re.compile(translate_pattern(pattern))
    except re.error as err:
        raise _bad_pattern(pattern, f"does not compile: {err}") from err


class GroupRef(ValueRecord):
    """A capture-group reference inside a replacement: a number or a name.

    A `ValueRecord`, not a dataclass: this module loads with every store, and generating a
    dataclass costs more at import than the whole class does in use."""

    key: int | str

    def __init__(self, key: int | str) -> None:
        self._set("key", key)


Replacement: TypeAlias = "tuple[str | GroupRef, ...]"

_RUST_NAME: Final = r"[_0-9A-Za-z]+"  # compiled at first use, as above
_PYTHON_REF: Final = r"\\(?:([1-9][0-9]?)|g<([^>]*)>|(\\))"


def _group_key(text: str) -> int | str:
    """Rust and Python both read an all-digit reference as a group number."""
    return int(text) if text.isascii() and text.isdigit() else text


def _read_dollar(replacement: str, i: int) -> tuple[str | GroupRef, int]:
    """One `$` item at `replacement[i]`; an unreadable reference stays a literal `$`, as in Rust."""
    if replacement.startswith("$$", i):
        return "$", i + 2
    if replacement.startswith("${", i):
        close = replacement.find("}", i + 2)
        if close > i + 2:
            return GroupRef(_group_key(replacement[i + 2 : close])), close + 1
        return "$", i + 1
    name = re.compile(_RUST_NAME).match(replacement, i + 1)
    if name is None:
        return "$", i + 1
    return GroupRef(_group_key(name.group())), name.end()


def _read_backslash(replacement: str, i: int) -> tuple[str | GroupRef, int]:
    """One Python escape at `replacement[i]`: `\\1`, `\\g<name>` or a doubled backslash."""
    found = re.compile(_PYTHON_REF).match(replacement, i)
    if found is None:
        raise InvalidOptionError(
            f"replacement {replacement!r} has an unknown escape at position {i}; "
            "write '\\\\' for a literal backslash"
        )
    number, name, backslash = found.groups()
    if backslash:
        return "\\", found.end()
    return GroupRef(int(number) if number else _group_key(name)), found.end()


def parse_replacement(replacement: str, regex: re.Pattern[str]) -> Replacement:
    """Split a replacement into literal text and group references checked against `regex`.

    Raises:
        InvalidOptionError: an unknown escape, or a reference to a group `regex` does not have.
    """
    items = parse_template(replacement)
    for item in items:
        if isinstance(item, GroupRef):
            _validate_group(item, replacement, regex)
    return items


def parse_template(replacement: str) -> Replacement:
    """`parse_replacement` without a regex to check the references against (a layout rule's
    target names, whose references are checked against several patterns at once).

    Raises:
        InvalidOptionError: an unknown escape.
    """
    if not isinstance(replacement, str):
        raise InvalidOptionError(f"replacement must be a str, got {type(replacement).__name__}")
    items: list[str | GroupRef] = []
    i = start = 0
    while i < len(replacement):
        if replacement[i] not in "$\\":
            i += 1
            continue
        items.append(replacement[start:i])
        reader = _read_dollar if replacement[i] == "$" else _read_backslash
        item, i = reader(replacement, i)
        items.append(item)
        start = i
    items.append(replacement[start:])
    return tuple(item for item in items if item != "")


def _validate_group(ref: GroupRef, replacement: str, regex: re.Pattern[str]) -> None:
    """Raise unless `regex` has the group `ref` names."""
    key = ref.key
    if isinstance(key, int) and key <= regex.groups:
        return
    if isinstance(key, str) and key in regex.groupindex:
        return
    hint = ""
    digits = re.match(r"[0-9]+", key) if isinstance(key, str) else None
    if digits:
        hint = f"; to follow group {digits.group()} with text write '${{{digits.group()}}}'"
    raise InvalidOptionError(
        f"replacement {replacement!r} refers to group {key!r}, "
        f"which regex {regex.pattern!r} does not have{hint}"
    )


def expand(replacement: Replacement, match: re.Match[str]) -> str:
    """The text a match is replaced with; a group that took no part in the match gives ""."""
    return "".join(
        item if isinstance(item, str) else (match.group(item.key) or "") for item in replacement
    )


def _matches_like_rust(regex: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    """Non-overlapping matches in the order Rust's `find_iter` gives them.

    Python reports an empty match right after a non-empty one (`x*` on "abxd" matches "" at 3);
    Rust skips an empty match that ends where the previous match ended and searches one
    character further on, so `replace_all` gives "-a-b-d-" where `re.sub` gives "-a-b--d-".
    """
    pos, last_end = 0, -1
    while pos <= len(text):
        found = regex.search(text, pos)
        if found is not None and found.start() == found.end() == last_end:
            found = regex.search(text, pos + 1) if pos < len(text) else None
        if found is None:
            return
        yield found
        pos = last_end = found.end()


def replace_all(regex: re.Pattern[str], replacement: Replacement, text: str) -> str:
    """Rust's `Regex::replace_all`: every non-overlapping match replaced, left to right."""
    pieces: list[str] = []
    done = 0
    for found in _matches_like_rust(regex, text):
        pieces.append(text[done : found.start()])
        pieces.append(expand(replacement, found))
        done = found.end()
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)
