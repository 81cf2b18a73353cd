"""Why a load went wrong and what fixes it, found from the report's plain values.

Three diagnoses, each a pure function of names, shapes and dtypes:

- `fixing_adapter` and `advice`: the built-in adapter that makes a failed tensor load (half
  precision for F32 into F16, a float cast, the PyTorch <-> Burn transpose) and the sentence an
  error says when its maker gave none.
- `find_prefix_change`: the source's names are the model's with one leading prefix changed
  (``module.``, ``model.``, ``state_dict.``), the usual reason a load matches almost nothing;
  `PrefixChange.fix` is the builder call that undoes it.
- `suggestions`: "did you mean" names for a missing path, by the Jaro similarity exactly as
  Rust's `textdistance` 1.1.1 computes it (`jaro_similarity`), so that they are Burn's.

It takes plain values, never the report itself: the report (`_result.py`) asks these questions
of its own fields, and this module never imports it back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from typing import Final

from weightstore.base._record import ValueRecord
from weightstore.dtypes import from_name
from weightstore.errors import DTypeError
from weightstore.report._summary import count, shown

__all__ = [
    "SUGGESTION_THRESHOLD",
    "PrefixChange",
    "advice",
    "find_prefix_change",
    "fixing_adapter",
    "jaro_similarity",
    "suggestions",
]

SUGGESTION_THRESHOLD: Final = 0.7
"""Lowest Jaro similarity a "did you mean" suggestion may have; Burn's cut-off, below which
suggestions are mostly noise."""

_MAX_PREFIX_LEN: Final = 100  # characters; a longer "prefix" is no wrapper's, so no fix for it
_MAX_HEADS_PER_REST: Final = 16  # first segments sharing one tail; more is a generic leaf name
_REGEX_SPECIAL: Final = frozenset("\\.^$|?*+()[]{}")


def fixing_adapter(kind: str, expected: str, found: str) -> str | None:
    """The built-in adapter that makes a tensor with this failure load, as Python to pass to
    ``.with_from_adapter(...)`` (``HalfPrecisionAdapter()``); None when none does."""
    if kind == "dtype_mismatch":
        return _dtype_adapter(expected, found)
    if kind == "shape_mismatch" and _is_transposed(expected, found):
        return "BurnToPyTorchAdapter()"
    return None


def _parse_shape(text: str) -> tuple[int, ...] | None:
    """A shape as `ApplyError` writes it (``(2, 3)``, Python's tuple form) read back; None for
    text it did not write."""
    try:
        return tuple(int(part) for part in text.strip("()").split(",") if part.strip())
    except ValueError:
        return None


def _is_transposed(expected: str, found: str) -> bool:
    """Whether `found` is the 2-D transpose of `expected` (and not the same shape)."""
    model, source = _parse_shape(expected), _parse_shape(found)
    return model is not None and len(model) == 2 and source == model[::-1] and model != source


def _dtype_adapter(expected: str, found: str) -> str | None:
    """The adapter that casts `found` to `expected`: half precision for F32 into F16 (it gives
    each tensor the model's dtype, so a model mixing F16 and F32 loads right), a float cast for
    other float pairs; None for anything else (no built-in adapter casts floats to ints)."""
    try:
        model, source = from_name(expected), from_name(found)
    except DTypeError:
        return None
    if model.kind != "f" or source.kind != "f" or model.numpy is None:
        return None
    if (source.name, model.name) == ("F32", "F16"):
        return "HalfPrecisionAdapter()"
    return f'FloatCastAdapter.to("{model.name}")'


def advice(kind: str, expected: str, found: str) -> str:
    """What an `ApplyError` of `kind` says when its maker gave no message: what to do about it,
    built from what the model holds (`expected`) and what the source holds (`found`)."""
    if kind == "load_error":
        return "no cause was given"
    adapter = fixing_adapter(kind, expected, found)
    if kind == "dtype_mismatch":
        if adapter is None:
            return (
                f"no built-in adapter converts {found} to {expected}; convert the "
                "source, or give the model the source's dtype"
            )
        return f"converting would lose information; load with .with_from_adapter({adapter})"
    if adapter is not None:
        return f"transposed, as Burn stores Linear weights; load with .with_from_adapter({adapter})"
    return (
        "the model and the source were built with different sizes; build the model as the "
        "source's was, or leave this tensor out with a filter"
    )


class PrefixChange(ValueRecord):
    """The source's names are the model's with one leading prefix changed: the usual reason a
    load matches almost nothing (``module.`` from DataParallel, ``model.`` from a training
    wrapper, ``state_dict.`` from a checkpoint's top-level dict). Found by `find_prefix_change`.

    Attributes:
        source_prefix: what the source's names start with instead (``"module."``); ``""`` when
            the source's names lack the model's prefix.
        model_prefix: what the model's names start with instead; ``""`` when the source added
            a prefix.
        explained: how many missing paths the source holds under the changed name.
        missing: how many paths are missing in all.
    """

    source_prefix: str
    model_prefix: str
    explained: int
    missing: int

    @property
    def top_level_key(self) -> str | None:
        """The key of a checkpoint's top-level dict the source's names may come from: the
        source prefix without its dot, when it is one segment the model's names lack."""
        if self.model_prefix or self.source_prefix.count(".") != 1:
            return None
        return self.source_prefix[:-1]

    def remapping(self) -> tuple[str, str]:
        """The pattern and replacement of the ``with_key_remapping`` that undoes the change."""
        replacement = self.model_prefix.replace("\\", "\\\\").replace("$", "$$")
        if not self.source_prefix:
            return r"^(.*)$", f"{replacement}$1"
        escaped = "".join(f"\\{c}" if c in _REGEX_SPECIAL else c for c in self.source_prefix)
        return f"^{escaped}", replacement

    def source_name(self, path: str) -> str | None:
        """The name model path `path` has in the source under this change; None when `path`
        lacks the model prefix."""
        if not path.startswith(self.model_prefix):
            return None
        return self.source_prefix + path[len(self.model_prefix) :]

    def fix(self, *, top_level_key: bool = False) -> str:
        """The store builder call that undoes the change, as Python.

        Args:
            top_level_key: the store can read under a top-level key and the file has
                `top_level_key` (the store checked): ``.with_top_level_key("state_dict")``
                instead of a key remapping.
        """
        if top_level_key and self.top_level_key is not None:
            return f".with_top_level_key({_python_string(self.top_level_key)})"
        pattern, replacement = self.remapping()
        return f".with_key_remapping({_python_string(pattern)}, {_python_string(replacement)})"

    def __str__(self) -> str:
        verb, their = ("is", "its") if self.explained == 1 else ("are", "their")
        source, model = shown(self.source_prefix), shown(self.model_prefix)
        if not self.model_prefix:
            how = f"in the source as {source!r} + {their} name"
        elif not self.source_prefix:
            how = f"in the source without {their} {model!r} prefix"
        else:
            how = f"in the source with {source!r} in place of {model!r}"
        return f"{self.explained:,} of {count(self.missing, 'missing tensor')} {verb} {how}"


def find_prefix_change(
    missing: Collection[str], unused: Collection[str], applied: Collection[str] = ()
) -> PrefixChange | None:
    """The prefix change that explains the most `missing` paths, if it explains more than half.

    Three shapes are tried: the source's names carry a prefix the model's lack (any number of
    segments: ``module.``, ``_orig_mod.module.``), lack one the model's have, or have another
    first segment (``module.`` for ``model.``; only when it explains two paths or more, since a
    single pair differing in its first segment is as likely two different layers). A change
    whose fix would rename a source tensor that already loaded (one of `applied`) is no answer.
    Ties go to an added or removed prefix over a replaced one, then to the shortest prefixes.
    The work is bounded by the names times their segments.

    Args:
        missing: model paths the source lacks.
        unused: source names the model never asked for.
        applied: paths that loaded (source and model names agree for them).
    """
    wanted, offered = set(missing), set(unused)
    if not wanted or not offered:
        return None
    found: Counter[tuple[str, str]] = Counter()
    for name in offered:  # the source added a prefix: its name minus a head is a model path
        found.update((head, "") for head, rest in _splits(name) if rest in wanted)
    for path in wanted:  # the source lacks the model's prefix
        found.update(("", head) for head, rest in _splits(path) if rest in offered)
    found.update(_replaced_first_segments(wanted, offered))
    candidates = [
        (count, source, model)
        for (source, model), count in found.items()
        if max(len(source), len(model)) <= _MAX_PREFIX_LEN
        and (count >= 2 or not (source and model))
        and _fix_is_safe(source, applied)
    ]
    if not candidates:
        return None
    count, source, model = max(  # the names last, so that equal candidates never depend on
        candidates,  # the order of a set
        key=lambda c: (c[0], not (c[1] and c[2]), -len(c[1]) - len(c[2]), c[1], c[2]),
    )
    if 2 * count <= len(wanted):
        return None
    return PrefixChange(source, model, count, len(wanted))


def _splits(name: str) -> Iterator[tuple[str, str]]:
    """Each ``(head, rest)`` split of `name` after a dot, both parts non-empty."""
    for position, char in enumerate(name[:-1]):
        if char == ".":
            yield name[: position + 1], name[position + 1 :]


def _replaced_first_segments(wanted: set[str], offered: set[str]) -> Counter[tuple[str, str]]:
    """``(source head, model head)`` pairs of names equal after their first segment, counted
    by model path. A tail many heads share (``weight``) says nothing and is skipped, which
    also bounds the work by missing paths times `_MAX_HEADS_PER_REST`."""
    heads: dict[str, set[str]] = {}
    for name in offered:
        head, dot, rest = name.partition(".")
        if dot and head and rest:
            heads.setdefault(rest, set()).add(f"{head}.")
    pairs: Counter[tuple[str, str]] = Counter()
    for path in wanted:
        head, dot, rest = path.partition(".")
        sources = heads.get(rest, set()) if dot and head and rest else set()
        if len(sources) <= _MAX_HEADS_PER_REST:
            pairs.update((source, f"{head}.") for source in sources if source != f"{head}.")
    return pairs


def _fix_is_safe(source_prefix: str, applied: Collection[str]) -> bool:
    """Whether the change's remapping leaves every loaded tensor's name alone: adding a prefix
    to every name (no source prefix) renames them all; removing one renames those under it."""
    if not source_prefix:
        return not applied
    return not any(path.startswith(source_prefix) for path in applied)


def _python_string(text: str) -> str:
    """`text` as a Python string literal to paste: raw when it holds a backslash."""
    if '"' in text or text.endswith("\\") or not text.isprintable():
        return repr(text)
    return f'r"{text}"' if "\\" in text else f'"{text}"'


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


def suggestions(path: str, unused: Sequence[str], *, limit: int = 1) -> list[str]:
    """Unused source names that `path` (usually a missing one) was probably meant to be.

    First, if dropping the first segment that looks like an enum variant gives an unused
    name, that name alone is the answer. Otherwise the unused names with a Jaro similarity
    of at least `SUGGESTION_THRESHOLD`, most similar first (ties keep `unused` order), at
    most `limit` of them.
    """
    from weightstore.paths import strip_enum_variants  # reports only: not on a load's path

    stripped = strip_enum_variants(path, first_only=True)
    if stripped != path and stripped in unused:
        return [stripped]
    scored = [(jaro_similarity(path, name), name) for name in unused]
    close = [pair for pair in scored if pair[0] >= SUGGESTION_THRESHOLD]
    close.sort(key=lambda pair: pair[0], reverse=True)  # stable: ties keep unused order
    return [name for _, name in close[:limit]]
