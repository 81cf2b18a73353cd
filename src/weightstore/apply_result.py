"""The load report: what happened to every tensor, as data and as the summary a person reads.

A load sorts each tensor into one bucket, as Burn's applier does:

    applied   found in the source and written into the model, in model order
    skipped   found in the source but excluded by the load filter; sorted
    missing   the model asked for it and the source has no such path; (path, container path),
              sorted by path. A filtered-out parameter absent from the source is missing, not
              skipped, as in Burn
    unused    in the source and never asked for by the model; sorted
    errors    found but not loadable: wrong shape, a dtype the model cannot hold exactly, or
              data that failed to read

`is_success()` follows Burn exactly: true when `errors` is empty, whatever is missing or unused;
whether missing tensors fail a load is the store's `allow_partial` decision, not the report's.

`str(result)` prints Burn's "Tensor Loading Summary" box line for line (so users of both read one
format), with Python instead of Rust in its hints, and "did you mean" suggestions for missing
paths computed with the Jaro similarity exactly as Rust's `textdistance` 1.1.1 computes it (see
`jaro_similarity`; docs/paths.md shows the summary).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

from weightstore.paths import ENUM_CONTAINER_PREFIX, strip_enum_variants

__all__ = [
    "SHOWN_PER_SECTION",
    "SUGGESTION_THRESHOLD",
    "ApplyError",
    "ApplyErrorKind",
    "ApplyResult",
    "jaro_similarity",
]

SUGGESTION_THRESHOLD: Final = 0.7
"""Lowest Jaro similarity a "did you mean" suggestion may have; Burn's cut-off, below which
suggestions are mostly noise."""

SHOWN_PER_SECTION: Final = 10
"""Entries the summary lists per section, as Burn; the rest are counted, not listed."""

DTYPE_HINT: Final = "converting would lose information; cast explicitly with an adapter"

ApplyErrorKind: TypeAlias = Literal["shape_mismatch", "dtype_mismatch", "load_error"]
"""Which failure an `ApplyError` records; Burn's variant names in snake case."""
_MISMATCH_WHAT: Final[dict[str, str]] = {"shape_mismatch": "shape", "dtype_mismatch": "dtype"}


@dataclass(frozen=True, slots=True)
class ApplyError:
    """One tensor that was found but could not be loaded; `str()` builds the message from fields.

    Build one with `shape_mismatch`, `dtype_mismatch` or `load_error`. Burn also declares
    dtype-mismatch and adapter errors but never produces them; we produce dtype mismatches (a
    lossy conversion) and fold adapter failures into load errors.

    Attributes:
        kind: which failure.
        path: the tensor's path in the model.
        expected: what the model holds (a shape such as ``(2, 3)``, or a dtype name).
        found: what the source holds, in the same form; ``""`` for load errors.
        message: the cause of a load error, or advice appended to a mismatch.
    """

    kind: ApplyErrorKind
    path: str
    expected: str = ""
    found: str = ""
    message: str = ""

    @classmethod
    def shape_mismatch(cls, path: str, expected: Sequence[int], found: Sequence[int]) -> ApplyError:
        """The source tensor's shape differs from the model parameter's."""
        return cls("shape_mismatch", path, _shape_text(expected), _shape_text(found))

    @classmethod
    def dtype_mismatch(
        cls, path: str, expected: str, found: str, message: str = DTYPE_HINT
    ) -> ApplyError:
        """The model cannot hold the source dtype without loss (f32 into f16, float into int)."""
        return cls("dtype_mismatch", path, expected, found, message)

    @classmethod
    def load_error(cls, path: str, message: str) -> ApplyError:
        """Reading or adapting the tensor's data failed; `message` says why."""
        return cls("load_error", path, message=message)

    def __str__(self) -> str:
        if self.kind == "load_error":
            return f"tensor {self.path!r}: data failed to load: {self.message}"
        what = _MISMATCH_WHAT[self.kind]
        text = f"tensor {self.path!r}: {what} is {self.found}, expected {self.expected}"
        return f"{text}; {self.message}" if self.message else text


def _shape_text(shape: Sequence[int]) -> str:
    """A shape as Python prints a tuple: ``(2, 3)``, ``(3,)``, ``()``."""
    return str(tuple(int(dim) for dim in shape))


def jaro_similarity(first: str, second: str) -> float:
    """Jaro similarity as Rust's `textdistance` 1.1.1 computes it (`nstr::jaro`), in [0, 1].

    This is not the textbook algorithm: each character of `first` takes the first unused equal
    character of `second` within the window, and a transposition is counted whenever that
    position lies before the previous one taken. Matching it keeps our suggestions Burn's.

    Example:
        >>> jaro_similarity("test", "tset")
        0.9166666666666666
    """
    len1, len2 = len(first), len(second)
    if len1 == 0 or len2 == 0:
        return 1.0 if len1 == len2 else 0.0
    if len1 == 1 and len2 == 1:
        return 1.0 if first == second else 0.0
    reach = max(len1, len2) // 2 - 1  # >= 0 here: the longer string has at least 2 characters
    taken = [False] * len2
    matches = transpositions = last = 0
    for i, char in enumerate(first):
        for j in range(max(0, i - reach), min(len2 - 1, i + reach) + 1):
            if not taken[j] and second[j] == char:
                taken[j] = True
                matches += 1
                transpositions += j < last
                last = j
                break
    if matches == 0:
        return 0.0
    return (matches / len1 + matches / len2 + (matches - transpositions) / matches) / 3


@dataclass(slots=True)
class ApplyResult:
    """What a load did; filled in by the applier, then read by stores and users.

    Attributes:
        applied: paths written into the model, in the model's order.
        skipped: paths in the source that the load filter excluded; sorted.
        missing: ``(path, container_path)`` for each path the model asked for and the source
            lacks, sorted by path; the container path joins the module types with ``.``.
        unused: paths in the source that the model never asked for; sorted.
        errors: tensors found but not loaded.
    """

    applied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    missing: list[tuple[str, str]] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)
    errors: list[ApplyError] = field(default_factory=list)

    def is_success(self) -> bool:
        """True when no tensor failed to load; missing and unused tensors do not count (Burn)."""
        return not self.errors

    def suggestions(self, path: str, *, limit: int = 1) -> list[str]:
        """Unused source paths that `path` (usually a missing one) was probably meant to be.

        First, if dropping the first segment that looks like an enum variant gives an unused
        path, that path alone is the answer. Otherwise the unused paths with a Jaro similarity
        of at least `SUGGESTION_THRESHOLD`, most similar first (ties keep `unused` order), at
        most `limit` of them. The summary shows one.
        """
        stripped = strip_enum_variants(path, first_only=True)
        if stripped != path and stripped in self.unused:
            return [stripped]
        scored = [(jaro_similarity(path, name), name) for name in self.unused]
        close = [pair for pair in scored if pair[0] >= SUGGESTION_THRESHOLD]
        close.sort(key=lambda pair: pair[0], reverse=True)  # stable: ties keep unused order
        return [name for _, name in close[:limit]]

    def __str__(self) -> str:
        lines = _counts_lines(self)
        if self.missing:
            lines += _missing_lines(self)
        if self.unused:
            lines += _listing(
                "Unused Tensors (in source but not used by model)",
                [
                    f"│  First {SHOWN_PER_SECTION} unused tensors:",
                    *_bulleted(self.unused, "│    • {}"),
                ],
            )
        if self.errors:
            errors = [str(error) for error in self.errors]
            lines += _listing("Errors", _bulleted(errors, "│  ⚠️  {}"))
        lines += ["│", "└" + "─" * 51]
        return "\n".join(lines)


def _counts_lines(result: ApplyResult) -> list[str]:
    """The box top and the five counts. The odd spacing after "Skipped" is Burn's, kept."""
    return [
        "┌─ Tensor Loading Summary " + "─" * 25,
        "│",
        f"│ ✓ Successfully applied: {len(result.applied)} tensors",
        f"│ ⊘ Skipped (filtered):  {len(result.skipped)} tensors",
        f"│ ✗ Missing in source:    {len(result.missing)} tensors",
        f"│ ? Unused in target:     {len(result.unused)} tensors",
        f"│ ! Errors:               {len(result.errors)} errors",
    ]


def _listing(title: str, body: list[str]) -> list[str]:
    """A section heading: a blank bar line, the title, another blank bar line."""
    return ["│", f"├─ {title}", "│", *body]


def _bulleted(items: Sequence[str], template: str) -> list[str]:
    """The first `SHOWN_PER_SECTION` items through `template`, then how many more there are."""
    lines = [template.format(item) for item in items[:SHOWN_PER_SECTION]]
    return lines + _more(len(items))


def _more(count: int) -> list[str]:
    """The line that counts what a section did not list, if anything."""
    if count <= SHOWN_PER_SECTION:
        return []
    return [f"│    ... and {count - SHOWN_PER_SECTION} more"]


# Shown when missing paths sit under an enum: Burn's advice, with the Python calls that follow it.
_ENUM_ADVICE: Final = (
    "│      Burn includes enum variant names in paths, but PyTorch doesn't.",
    "│      Example: Burn has 'field.BaseConv.weight', PyTorch has 'field.weight'",
    "│",
    "│      💡 Solution 1: Enable skip_enum_variants flag (simplest):",
    "│",
    '│         store = PytorchStore.from_file("model.pth").skip_enum_variants(True)  # ← add this',
    "│",
    "│      💡 Solution 2: Remap enum keys in source (most precise):",
    "│",
    '│         store = SafetensorsStore.from_file("model.safetensors").with_key_remapping(',
    '│             r"field\\.(\\w+)", r"field.BaseConv.\\1"',
    "│         )",
    "│",
)


def _missing_lines(result: ApplyResult) -> list[str]:
    """The missing section: the enum advice when it applies, then paths with suggestions."""
    title = "Missing Tensors (requested by model but not found in source)"
    in_enums = sum(ENUM_CONTAINER_PREFIX in container for _, container in result.missing)
    advice = []
    if in_enums:
        advice = [
            f"│  ⚠️  {in_enums} paths contain enum variants (detected from container stack)",
            *_ENUM_ADVICE,
        ]
    lines = _listing(title, [*advice, f"│  First {SHOWN_PER_SECTION} missing tensors:"])
    for path, _ in result.missing[:SHOWN_PER_SECTION]:
        lines.append(f"│    • {path}")
        lines += [f"│        Did you mean: '{s}'?" for s in result.suggestions(path)]
    return lines + _more(len(result.missing))
