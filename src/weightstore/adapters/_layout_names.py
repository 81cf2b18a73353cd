"""The names of a layout rule: source patterns matched whole, target templates filled from
their captures, and each turned into the other for the rule's inverse.

A source pattern is a regex (the syntax of ``with_key_remapping``), a target a replacement
(``$1``, ``${name}``, ``\\1``). The inverse matches target names and fills source names, so a
pattern it inverts may hold only literal text and top-level captures (an unescaped ``.``
outside a capture reads as a literal dot, as names hold); a capture's number ``1`` becomes the
group name ``g1`` on the other side, so both sides of an inverse agree by name.
"""

from __future__ import annotations

import re
from typing import Final

from weightstore.errors import LayoutError
from weightstore.paths._regex import GroupRef, Replacement, compile_pattern, parse_template

__all__ = ["Key", "capture_keys", "compile_source", "pattern_of_template", "template_of_pattern"]

Key = int | str
"""A capture's key: its number, or its name."""
_METACHARS: Final = set("*+?{}[]|^$")


def compile_source(pattern: str) -> re.Pattern[str]:
    """`pattern` compiled, matched against whole names (`re.fullmatch`)."""
    try:
        return compile_pattern(pattern)
    except Exception as err:
        raise LayoutError(f"source pattern {pattern!r}: {err}") from err


def capture_keys(regex: re.Pattern[str]) -> frozenset[Key]:
    """The keys of `regex`'s captures: names for named ones, numbers for the rest."""
    named = {index: name for name, index in regex.groupindex.items()}
    return frozenset(named.get(i, i) for i in range(1, regex.groups + 1))


def _side_name(key: Key) -> str:
    return f"g{key}" if isinstance(key, int) else key


def pattern_of_template(
    template: Replacement,
    numbered: frozenset[Key] = frozenset(),
    bodies: dict[str, str] | None = None,
) -> str:
    """A regex that matches the names `template` fills; each reference becomes a named
    capture (``$1`` -> ``(?P<g1>...)``) of the pattern the capture had on the other side
    (`bodies`, by side name), else of any text (those in `numbered`: of digits alone)."""
    pieces: list[str] = []
    seen: set[str] = set()
    for item in template:
        if isinstance(item, str):
            pieces.append(re.escape(item))
            continue
        name = _side_name(item.key)
        if name in seen:
            pieces.append(f"(?P={name})")
            continue
        seen.add(name)
        body = (bodies or {}).get(name) or ("[0-9]+" if item.key in numbered else ".+")
        pieces.append(f"(?P<{name}>{body})")
    return "".join(pieces)


def template_of_pattern(pattern: str, bodies: dict[str, str] | None = None) -> Replacement:
    """The template that fills the names `pattern` matches: its literal text, each top-level
    capture a reference (``(.*)\\.q_proj`` -> ``${g1}.q_proj``); each capture's own pattern
    is put in `bodies` under its side name.

    Raises:
        LayoutError: the pattern holds more than literal text and captures, so no one name
            corresponds to a set of captures.
    """
    items: list[str | GroupRef] = []
    literal: list[str] = []
    number, i = 0, 0
    body = pattern[1:] if pattern.startswith("^") else pattern
    body = body[:-1] if body.endswith("$") and not body.endswith("\\$") else body
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body) and not body[i + 1].isalnum():
            literal.append(body[i + 1])
            i += 2
        elif char == "(":
            end = _group_end(body, i, pattern)
            inner = body[i + 1 : end]
            if inner.startswith("?P<"):
                key: Key = inner[3 : inner.index(">")]
                number += 1
            elif inner.startswith("?"):
                raise _not_invertible(pattern, "a group that captures nothing")
            else:
                number += 1
                key = number
            if "(" in inner.replace("\\(", ""):
                raise _not_invertible(pattern, "a capture inside a capture")
            items.extend(["".join(literal), GroupRef(_side_name(key))])
            if bodies is not None:
                named = inner.startswith("?P<")
                bodies[_side_name(key)] = inner[inner.index(">") + 1 :] if named else inner
            literal = []
            i = end + 1
        elif char == "\\" or char in _METACHARS:
            raise _not_invertible(pattern, f"{char!r} outside a capture")
        else:
            literal.append(char)
            i += 1
    items.append("".join(literal))
    return tuple(item for item in items if item != "")


def _group_end(body: str, start: int, pattern: str) -> int:
    """Where the group opened at `body[start]` closes."""
    depth, i, in_class = 0, start, False
    while i < len(body):
        char = body[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise _not_invertible(pattern, "an unclosed group")


def _not_invertible(pattern: str, why: str) -> LayoutError:
    return LayoutError(
        f"source pattern {pattern!r} has {why}, so its inverse cannot name the tensors it "
        "matched; write it as literal text and captures"
    )


def parse_target(template: str) -> Replacement:
    """A target template parsed (its references are checked by the rule)."""
    try:
        return parse_template(template)
    except Exception as err:
        raise LayoutError(f"target {template!r}: {err}") from err
