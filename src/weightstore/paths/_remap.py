"""`KeyRemapper`: rename tensor paths with an ordered chain of regex rules.

Each rule is a pattern and a replacement. `remap` feeds a path through every rule in the order
added, each rule seeing the previous rule's output, and each rule replaces **all**
non-overlapping matches, exactly as Burn's `KeyRemapper` does with Rust's `replace_all`. So
``^encoder\\.`` → ``transformer.encoder.`` followed by ``\\.gamma$`` → ``.weight`` turns
``encoder.layer1.gamma`` into ``transformer.encoder.layer1.weight``.

Replacements may be written for Rust (``$1``, ``${name}``) or Python (``\\1``, ``\\g<name>``);
`weightstore.paths._regex` says how each is read.

One departure from Burn: when two tensors remap to the same name, Burn keeps whichever it meets
last; `remap_names` raises `RemapCollisionError` naming both, so no tensor vanishes unnoticed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from weightstore.base._record import ValueRecord, field
from weightstore.errors import InvalidOptionError, RemapCollisionError
from weightstore.paths._regex import Replacement, compile_pattern, parse_replacement, replace_all


class RemapRule(ValueRecord):
    """One compiled rule; built by `KeyRemapper.with_rule`, which validates both halves.

    Equal when pattern and replacement are (the compiled halves follow from them).

    Attributes:
        pattern: the pattern as the user wrote it.
        replacement: the replacement as the user wrote it.
        regex: `pattern` compiled (translated from Rust syntax where needed).
        parts: `replacement` parsed into literal text and checked group references.
    """

    pattern: str
    replacement: str
    regex: re.Pattern[str] = field(repr=False, compare=False)
    parts: Replacement = field(repr=False, compare=False)

    @classmethod
    def compile(cls, pattern: str, replacement: str) -> RemapRule:
        """Compile `pattern` and parse `replacement` against its groups.

        Raises:
            InvalidOptionError: either half is invalid; see `parse_replacement`.
        """
        if not isinstance(replacement, str):
            raise InvalidOptionError(f"replacement must be a str, got {type(replacement).__name__}")
        regex = compile_pattern(pattern)
        return cls(pattern, replacement, regex, parse_replacement(replacement, regex))

    def apply(self, path: str) -> str:
        """`path` with every match of this rule replaced."""
        return replace_all(self.regex, self.parts, path)


class KeyRemapper(ValueRecord):
    """An ordered, immutable chain of renaming rules; `with_rule` returns a new remapper.

    A `ValueRecord`, not a dataclass: this module loads with every store, and generating the
    dataclass cost more at import than the class does in use.

    Example:
        >>> remapper = (
        ...     KeyRemapper()
        ...     .with_rule(r"^conv_blocks\\.0\\.(.*)", "conv1.$1")
        ...     .with_rule(r"\\.gamma$", r".weight")
        ... )
        >>> remapper.remap("conv_blocks.0.norm.gamma")
        'conv1.norm.weight'

    Attributes:
        rules: the rules in the order they run.
    """

    rules: tuple[RemapRule, ...]

    def __init__(self, rules: tuple[RemapRule, ...] = ()) -> None:
        self._set("rules", rules)

    @classmethod
    def from_patterns(cls, pairs: Iterable[tuple[str, str]]) -> KeyRemapper:
        """A remapper with one rule per ``(pattern, replacement)`` pair, in order.

        Raises:
            InvalidOptionError: a pattern or replacement is invalid.
        """
        return cls(tuple(RemapRule.compile(pattern, repl) for pattern, repl in pairs))

    def with_rule(self, pattern: str, replacement: str) -> KeyRemapper:
        """A remapper with one more rule, run after the existing ones.

        `replacement` may use Rust references (``$1``, ``${1}``, ``$name``, ``${name}``, ``$$``
        for a dollar sign) or Python ones (``\\1``, ``\\g<1>``, ``\\g<name>``, ``\\\\`` for a
        backslash); ``$0`` / ``\\g<0>`` is the whole match.

        Raises:
            InvalidOptionError: `pattern` does not compile, `replacement` has an unknown
                escape, or it refers to a group `pattern` lacks (Rust would silently insert
                nothing: ``$1_x`` names a group "1_x"; write ``${1}_x``).
        """
        return KeyRemapper((*self.rules, RemapRule.compile(pattern, replacement)))

    def add_pattern(self, pattern: str, replacement: str) -> KeyRemapper:
        """Alias of `with_rule` under Burn's name (``KeyRemapper::add_pattern``), so code ported
        from Rust reads the same; it validates and returns exactly what `with_rule` does."""
        return self.with_rule(pattern, replacement)

    @property
    def is_empty(self) -> bool:
        """True when there are no rules, so `remap` returns every path unchanged."""
        return not self.rules

    @property
    def patterns(self) -> tuple[tuple[str, str], ...]:
        """The rules as the ``(pattern, replacement)`` strings the user gave."""
        return tuple((rule.pattern, rule.replacement) for rule in self.rules)

    def remap(self, path: str) -> str:
        """`path` after every rule, each applied to the previous rule's result."""
        for rule in self.rules:
            path = rule.apply(path)
        return path

    def remap_names(self, names: Iterable[str], *, path: str | None = None) -> dict[str, str]:
        """Remap every name and map each new name to the original it came from.

        The result keeps the input order; a name given twice counts once. Names that no rule
        changes map to themselves.

        Args:
            names: the tensor names a store read.
            path: the file the names come from, named in the error.

        Raises:
            RemapCollisionError: two different names remap to one; Burn would keep the last.
        """
        originals: dict[str, str] = {}
        for name in names:
            new = self.remap(name)
            first = originals.setdefault(new, name)
            if first != name:
                raise RemapCollisionError(new, first, name, path=path)
        return originals

    def __str__(self) -> str:
        rules = ", ".join(f"{p!r} -> {r!r}" for p, r in self.patterns)
        return f"KeyRemapper({rules})"
