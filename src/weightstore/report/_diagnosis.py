"""Why a load went wrong and what fixes it, found from the report's plain values.

Three diagnoses, each a pure function of names, shapes and dtypes:

- `fixing_adapter` and `advice`: the built-in adapter that makes a failed tensor load (half
  precision for F32 into F16, a float cast, the PyTorch <-> Burn transpose) and the sentence an
  error says when its maker gave none.
- `find_prefix_change`: the source's names are the model's with one leading prefix changed
  (``module.``, ``model.``, ``state_dict.``), the usual reason a load matches almost nothing;
  `PrefixChange.fix` is the builder call that undoes it.
- `find_layout_change`: the source's names are the model's as another framework lays the
  layer out (torch's ``weight`` for Flax's ``kernel``, ``running_mean`` for ``mean``), perhaps
  under a changed prefix too; `LayoutChange.fix` names the adapter that loads them. A load
  that matches only the biases is a wrong load, not a partial one, and
  `partial_load_advisable` says when leaving tensors unloaded is a fix worth naming.
- `suggestions`: "did you mean" names for a missing path, by the Jaro similarity exactly as
  Rust's `textdistance` 1.1.1 computes it (`jaro_similarity`), so that they are Burn's.

It takes plain values, never the report itself: the report (`_result.py`) asks these questions
of its own fields, and this module never imports it back.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from typing import Final, Literal

from weightstore.base._record import ValueRecord
from weightstore.dtypes import from_name
from weightstore.errors import DTypeError
from weightstore.report._summary import count, shown

__all__ = [
    "SUGGESTION_THRESHOLD",
    "LayoutChange",
    "PrefixChange",
    "advice",
    "find_layout_change",
    "find_prefix_change",
    "fixing_adapter",
    "jaro_similarity",
    "partial_load_advisable",
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

    def how(self, *, plural: bool = True) -> str:
        """How the source names a missing tensor under this change, in words (``in the source
        as 'module.' + their name``)."""
        their = "their" if plural else "its"
        source, model = shown(self.source_prefix), shown(self.model_prefix)
        if not self.model_prefix:
            return f"in the source as {source!r} + {their} name"
        if not self.source_prefix:
            return f"in the source without {their} {model!r} prefix"
        return f"in the source with {source!r} in place of {model!r}"

    def __str__(self) -> str:
        verb = "is" if self.explained == 1 else "are"
        how = self.how(plural=self.explained != 1)
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


class LayoutChange(ValueRecord):
    """The source's names are the model's in another framework's layout: a torch checkpoint
    for a Flax model (``fc.weight`` for ``fc.kernel``, ``bn.running_mean`` for ``bn.mean``), a
    Flax file for a torch model, a Burn file for a Flax model; perhaps under a changed prefix
    too (Linen's ``params.`` collection, DataParallel's ``module.``). Only the biases match by
    name, so a partial load would leave every kernel at its initial values; the fix is the
    adapter. Found by `find_layout_change`.

    Attributes:
        adapter: the adapter that loads the source, as Python (``PyTorchToFlaxAdapter()``).
        framework: whose layout the source's names are in (``PyTorch``, ``Burn``, ``Flax``).
        explained: how many missing paths the source holds under the other layout's names.
        missing: how many paths are missing in all.
        prefix: the prefix change the names also need, if any.
        renames: ``(model path, source name)`` of each explained path, sorted.
    """

    adapter: str
    framework: str
    explained: int
    missing: int
    prefix: PrefixChange | None
    renames: tuple[tuple[str, str], ...]

    def source_name(self, path: str) -> str | None:
        """The name model path `path` has in the source under this change; None when the
        change does not explain it."""
        at = bisect.bisect_left(self.renames, (path, ""))
        found = self.renames[at] if at < len(self.renames) else None
        return found[1] if found is not None and found[0] == path else None

    def fix(self, *, top_level_key: bool = False) -> str:
        """The store builder calls that load the source: the adapter, then the prefix fix
        (`PrefixChange.fix`) when the names need one too."""
        adapter = f".with_from_adapter({self.adapter})"
        if self.prefix is None:
            return adapter
        return adapter + self.prefix.fix(top_level_key=top_level_key)

    def __str__(self) -> str:
        verb = "is" if self.explained == 1 else "are"
        renamed = [pair for pair in self.renames if _leaf(pair[0]) != _leaf(pair[1])]
        kernels = [pair for pair in renamed if _leaf(pair[0]) == "kernel" or "kernel" in pair[1]]
        model, source = (kernels or renamed or self.renames)[0]  # a kernel reads best
        text = (
            f"{self.explained:,} of {count(self.missing, 'missing tensor')} {verb} in the "
            f"source under {self.framework}'s names (such as {shown(source)!r} for "
            f"{shown(model)!r})"
        )
        if self.prefix is None:
            return text
        how = self.prefix.how(plural=self.explained != 1).removeprefix("in the source ")
        return f"{text} and {how}"


class _Layout(ValueRecord):
    """A framework's layout the built-in adapters load: which side's names are Flax's
    (``model``: a Flax model reading another framework's file), each Flax leaf's name on the
    other side, and a norm's bias there."""

    adapter: str
    framework: str
    flax_side: Literal["model", "source"]
    leaves: tuple[tuple[str, str], ...]
    norm_bias: str = "bias"

    def other_name(self, name: str, normed: Collection[str]) -> str:
        """`name` of the Flax side as the other side names it; `normed` holds the parents of
        the names with a ``scale`` leaf (norm layers, whose bias may be named differently)."""
        head, dot, leaf = name.rpartition(".")
        other = dict(self.leaves).get(leaf, leaf)
        if leaf == "bias" and head in normed:
            other = self.norm_bias
        return f"{head}{dot}{other}"


_FLAX_AS_TORCH: Final = (
    ("kernel", "weight"), ("scale", "weight"), ("embedding", "weight"),
    ("mean", "running_mean"), ("var", "running_var"),
)  # fmt: skip
_FLAX_AS_BURN: Final = (
    ("kernel", "weight"), ("scale", "gamma"), ("embedding", "weight"),
    ("mean", "running_mean"), ("var", "running_var"),
)  # fmt: skip

_LAYOUTS: Final = (  # in order of preference on a tie: torch files are the common case
    _Layout("PyTorchToFlaxAdapter()", "PyTorch", "model", _FLAX_AS_TORCH),
    _Layout("BurnToFlaxAdapter()", "Burn", "model", _FLAX_AS_BURN, norm_bias="beta"),
    _Layout("FlaxToPyTorchAdapter()", "Flax", "source", _FLAX_AS_TORCH),
)
"""The layouts of `adapters/_pytorch_flax.py`'s table that a load can meet: a torch or Burn
file into a Flax model, a Flax file into a torch model."""

_MIN_RENAMED_SHARE: Final = 3  # at least one explained path in this many has another leaf name


def find_layout_change(
    missing: Collection[str], unused: Collection[str], applied: Collection[str] = ()
) -> LayoutChange | None:
    """The other framework's layout that explains the most `missing` paths, if it explains
    more than half and a third of them or more differ in their leaf name (``kernel`` for
    ``weight``: a layer's kernel or scale, not only its bias). Names alone decide, so a Burn
    file without norms reads as torch's (the adapters agree for the rest). The names may also
    differ by a prefix change (`find_prefix_change` on the translated names).

    Args:
        missing: model paths the source lacks.
        unused: source names the model never asked for.
        applied: paths that loaded (a prefix fix may rename none of them).
    """
    if not missing or not unused:
        return None
    found = (_layout_explains(layout, missing, unused, applied) for layout in _LAYOUTS)
    changes = [change for change in found if change is not None]
    return max(changes, key=lambda change: change.explained, default=None)  # first on a tie


def _layout_explains(
    layout: _Layout, missing: Collection[str], unused: Collection[str], applied: Collection[str]
) -> LayoutChange | None:
    """`find_layout_change` for one layout."""
    model, source = {path: path for path in missing}, {name: name for name in unused}
    flax_names = model if layout.flax_side == "model" else source
    normed = {name.rpartition(".")[0] for name in flax_names if _leaf(name) == "scale"}
    translated = {layout.other_name(name, normed): name for name in flax_names}
    if layout.flax_side == "model":
        model = translated
    else:
        source = translated
    renames = [(model[name], source[name]) for name in model if name in source]
    prefix = None
    if 2 * len(renames) <= len(missing):
        prefix = find_prefix_change(model, source, applied)
        if prefix is None:
            return None
        named = ((model[name], prefix.source_name(name)) for name in model)
        renames = [(path, source[name]) for path, name in named if name in source]
        if 2 * len(renames) <= len(missing):
            return None
    renamed = sum(_leaf(path) != _leaf(name) for path, name in renames)
    if renamed == 0 or _MIN_RENAMED_SHARE * renamed < len(renames):
        return None
    return LayoutChange(
        layout.adapter, layout.framework, len(renames), len(missing), prefix, tuple(sorted(renames))
    )


def _leaf(name: str) -> str:
    """The last segment of a dotted name."""
    return name.rpartition(".")[2]


def partial_load_advisable(missing: int, tensors: int) -> bool:
    """Whether to name ``allow_partial`` as the fix for `missing` of the model's `tensors`
    missing: only when half of them or fewer are. A load that leaves most of a model at its
    initial values is a wrong load (names in another layout, another model), and loading the
    rest hides it."""
    return 2 * missing <= tensors


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
