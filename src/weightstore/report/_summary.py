"""The load report as a person reads it: Burn's "Tensor Loading Summary" box, line for line.

Users of both libraries read one format, so the box, its section titles and its code points are
Burn's; the hints show Python instead of Rust. It departs where Burn misleads: counts are
singular or plural ("1 tensor"), the source file heads the box when known, Burn's "Unused in
target" reads "In source, unused by model" (what it counts), a refused load says the model is
unchanged, and a section names the builder call that fixes names which differ from the model's
by a prefix or are another framework's (the adapter). Names taken from a file are cut to
`MAX_NAME_LEN` characters, since a file may hold megabyte names and a message must stay
readable.

This module is the bottom of the report package: it reads a report through the small
`Summarized` protocol and knows neither the report's class nor how its diagnosis is found, so
the data module can render itself here and the diagnosis can word its findings with `shown`
and `count`, without either importing the other back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Final, Protocol

__all__ = [
    "MAX_NAME_LEN",
    "SHOWN_PER_SECTION",
    "Summarized",
    "SummarizedChange",
    "SummarizedRenaming",
    "count",
    "render",
    "shown",
]

SHOWN_PER_SECTION: Final = 10
"""Entries the summary lists per section, as Burn; the rest are counted, not listed."""

MAX_NAME_LEN: Final = 200
"""Characters of one name (or error line) the summary shows; longer ones are cut with "…". A
file may hold megabyte names, and a message must stay readable."""


class SummarizedRenaming(Protocol):
    """What the summary asks of a change of names (`PrefixChange`, `LayoutChange`): its
    sentence (``str``), its fix, and the name a missing path has in the source under it."""

    def fix(self, *, top_level_key: bool = False) -> str:
        """The store builder call that undoes the change, as Python."""
        ...

    def source_name(self, path: str) -> str | None:
        """The name model path `path` has in the source under the change, if any."""
        ...


class SummarizedChange(SummarizedRenaming, Protocol):
    """What the summary asks of a prefix change (`PrefixChange`): a renaming that may come
    from a checkpoint's top-level key."""

    @property
    def top_level_key(self) -> str | None:
        """The top-level key of a checkpoint the source's names may come from, if any."""
        ...


class Summarized(Protocol):
    """What the summary reads of a load report (`ApplyResult`); read-only, so the report's
    own lists satisfy it."""

    @property
    def applied(self) -> Sequence[str]:
        """Paths written into the model, in the model's order."""
        ...

    @property
    def skipped(self) -> Sequence[str]:
        """Paths the load filter excluded."""
        ...

    @property
    def missing(self) -> Sequence[tuple[str, str]]:
        """``(path, container path)`` of each path the source lacks."""
        ...

    @property
    def layout_problems(self) -> Sequence[str]:
        """What a layout's rules could not make, each naming its rule."""
        ...

    @property
    def unused(self) -> Sequence[str]:
        """Source names the model never asked for."""
        ...

    @property
    def errors(self) -> Sequence[object]:
        """Tensors found but not loaded; each prints as one line."""
        ...

    @property
    def held_back(self) -> Sequence[str]:
        """Paths that would have loaded, when the load was refused."""
        ...

    @property
    def refused(self) -> str | None:
        """The rule that refused the load, or None when it ran."""
        ...

    @property
    def source(self) -> str | None:
        """The file the tensors came from, when known."""
        ...

    @property
    def top_level_key(self) -> str | None:
        """The top-level key the store checked the file has, so that the prefix fix may read
        under it; None otherwise."""
        ...

    @property
    def quantized(self) -> Mapping[str, str]:
        """Applied paths decoded from quantized source blocks, and each one's encoding."""
        ...

    @property
    def tied(self) -> Mapping[str, str]:
        """Applied paths a tie filled, and the source tensor each came from."""
        ...

    @property
    def io(self) -> str | None:
        """How the source file was read and why, when it was a local file."""
        ...

    def prefix_change(self) -> SummarizedChange | None:
        """The prefix change that explains most missing paths, if one does."""
        ...

    def layout_change(self) -> SummarizedRenaming | None:
        """The other framework's layout that explains most missing paths, if one does."""
        ...

    def suggestions(self, path: str) -> list[str]:
        """The "did you mean" names for the missing path `path`."""
        ...


def shown(text: str, limit: int = MAX_NAME_LEN) -> str:
    """`text` cut to `limit` characters, the cut marked with "…"."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def count(number: int, noun: str) -> str:
    """``"1 tensor"``, ``"2 tensors"``, ``"1,000 tensors"``."""
    return f"{number:,} {noun}" if number == 1 else f"{number:,} {noun}s"


def render(result: Summarized) -> str:
    """The whole box for `result`: counts, then the prefix, missing, unused and error sections
    that have something to say."""
    lines = _counts_lines(result)
    layout = result.layout_change()
    change = result.prefix_change() if layout is None else None
    if layout is not None:
        fix = f"│      💡 Fix: add {layout.fix()} to the store"
        lines += _listing("Names in Another Framework's Layout", [f"│  ⚠️  {layout}", fix])
    if change is not None:
        lines += _prefix_lines(change, result.top_level_key)
    if result.missing:
        lines += _missing_lines(result, layout or change)
    if result.unused:
        lines += _listing(
            "Unused Tensors (in source but not used by model)",
            [
                f"│  First {SHOWN_PER_SECTION} unused tensors:",
                *_bulleted(result.unused, "│    • {}"),
            ],
        )
    if result.layout_problems:
        shown = _bulleted(result.layout_problems, "│  ⚠️  {}", limit=4 * MAX_NAME_LEN)
        lines += _listing("Layout Problems", shown)
    if result.errors:
        errors = [str(error) for error in result.errors]
        lines += _listing("Errors", _bulleted(errors, "│  ⚠️  {}", limit=4 * MAX_NAME_LEN))
    lines += ["│", "└" + "─" * 51]
    return "\n".join(lines)


def _counts_lines(result: Summarized) -> list[str]:
    """The box top, the source, the five counts and, for a refused load, what was held back.
    Burn's "Unused in target" counts what is in the source and unused by the model, and says
    so here; the counts line up after the longest label."""
    lines = ["┌─ Tensor Loading Summary " + "─" * 25, "│"]
    if result.source is not None:
        lines.append(f"│ Source: {shown(result.source)}")
    if result.io is not None and not result.io.startswith("mmap"):  # the usual path: untold
        lines.append(f"│ Read by: {result.io}")
    lines += [
        f"│ ✓ Successfully applied:       {count(len(result.applied), 'tensor')}",
        f"│ ⊘ Skipped (filtered):         {count(len(result.skipped), 'tensor')}",
        f"│ ✗ Missing in source:          {count(len(result.missing), 'tensor')}",
        f"│ ? In source, unused by model: {count(len(result.unused), 'tensor')}",
        f"│ ! Errors:                     {count(len(result.errors), 'error')}",
    ]
    if result.quantized:
        kinds = Counter(result.quantized.values())
        by_kind = ", ".join(f"{kind} x{number:,}" for kind, number in sorted(kinds.items()))
        lines.append(f"│ ≈ Decoded from quantized:     {count(len(result.quantized), 'tensor')}"
                     f" ({by_kind})")  # fmt: skip
    if result.tied:
        pairs = ", ".join(f"{path} <- {source}" for path, source in sorted(result.tied.items()))
        lines.append(f"│ = Filled from a tied tensor:  {count(len(result.tied), 'tensor')}"
                     f" ({pairs})")  # fmt: skip
    if result.refused is not None:
        lines.append(
            f"│ ⏸ Held back:                  {count(len(result.held_back), 'tensor')} (the load "
            "was refused before writing; the model is unchanged)"
        )
    return lines


def _listing(title: str, body: list[str]) -> list[str]:
    """A section heading: a blank bar line, the title, another blank bar line."""
    return ["│", f"├─ {title}", "│", *body]


def _bulleted(items: Sequence[str], template: str, limit: int = MAX_NAME_LEN) -> list[str]:
    """The first `SHOWN_PER_SECTION` items through `template`, then how many more there are."""
    lines = [template.format(shown(item, limit)) for item in items[:SHOWN_PER_SECTION]]
    return lines + _more(len(items))


def _more(number: int) -> list[str]:
    """The line that counts what a section did not list, if anything."""
    if number <= SHOWN_PER_SECTION:
        return []
    return [f"│    ... and {number - SHOWN_PER_SECTION:,} more"]


def _prefix_lines(change: SummarizedChange, top_level_key: str | None) -> list[str]:
    """The prefix section: which names differ how, and the builder call that fixes them."""
    by_key = top_level_key is not None and top_level_key == change.top_level_key
    return _listing(
        "Names Differ by a Prefix",
        [f"│  ⚠️  {change}", f"│      💡 Fix: add {change.fix(top_level_key=by_key)} to the store"],
    )


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


def _missing_lines(result: Summarized, change: SummarizedRenaming | None) -> list[str]:
    """The missing section: the enum advice when it applies, then paths with suggestions (the
    name under the prefix or layout `change`, when the source has it: exact, and no Jaro scan
    of every unused name)."""
    unused = set(result.unused) if change is not None else set()
    from weightstore.paths import ENUM_CONTAINER_PREFIX  # summaries only: not on a load's path

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
        lines.append(f"│    • {shown(path)}")
        renamed = None if change is None else change.source_name(path)
        found = [renamed] if renamed in unused else result.suggestions(path)
        lines += [f"│        Did you mean: '{shown(s)}'?" for s in found if s is not None]
    return lines + _more(len(result.missing))
