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

A strict load (`LoadRules`) is judged before anything is written, and one that would fail for
certain is *refused*: `refused` names the rule it breaks, nothing is written, and the tensors that
passed every check are listed in `held_back` instead of `applied`.

`is_success()` departs from Burn, for whom it means "no errors": a refused load, and a load that
wrote nothing although the model has tensors (every name wrong: Burn calls that a success), are
failures too.

`str(result)` prints Burn's "Tensor Loading Summary" box line for line (so users of both read one
format), with Python instead of Rust in its hints, and "did you mean" suggestions for missing
paths computed with the Jaro similarity exactly as Rust's `textdistance` 1.1.1 computes it (see
`jaro_similarity`; docs/paths.md shows the summary). It departs where Burn misleads: counts are
singular or plural ("1 tensor"), the source file heads the box when known, a refused load says
the model is unchanged, and when the names differ from the model's by a prefix
(`find_prefix_change`: ``module.``, ``model.``, ``state_dict.``) a section names the builder call
that fixes them. Names taken from a file are cut to `MAX_NAME_LEN` characters.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from typing import Final, Literal, TypeAlias

from weightstore.dtypes import from_name
from weightstore.errors import DTypeError

__all__ = [
    "MAX_NAME_LEN",
    "SHOWN_PER_SECTION",
    "SUGGESTION_THRESHOLD",
    "ApplyError",
    "ApplyErrorKind",
    "ApplyResult",
    "LoadFailure",
    "LoadRules",
    "PrefixChange",
    "find_prefix_change",
    "jaro_similarity",
]

SUGGESTION_THRESHOLD: Final = 0.7
"""Lowest Jaro similarity a "did you mean" suggestion may have; Burn's cut-off, below which
suggestions are mostly noise."""

SHOWN_PER_SECTION: Final = 10
"""Entries the summary lists per section, as Burn; the rest are counted, not listed."""

MAX_NAME_LEN: Final = 200
"""Characters of one name (or error line) the summary shows; longer ones are cut with "…". A
file may hold megabyte names, and a message must stay readable."""

_MAX_PREFIX_LEN: Final = 100  # characters; a longer "prefix" is no wrapper's, so no fix for it
_MAX_HEADS_PER_REST: Final = 16  # first segments sharing one tail; more is a generic leaf name

ApplyErrorKind: TypeAlias = Literal["shape_mismatch", "dtype_mismatch", "load_error"]
"""Which failure an `ApplyError` records; Burn's variant names in snake case."""

LoadFailure: TypeAlias = Literal["errors", "nothing_loaded", "missing", "unused"]
"""Which rule a failed load broke, in the order `LoadRules.failure` checks them."""

_MISMATCH_WHAT: Final[dict[str, str]] = {"shape_mismatch": "shape", "dtype_mismatch": "dtype"}
_REGEX_SPECIAL: Final = frozenset("\\.^$|?*+()[]{}")


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
        message: the cause of a load error, or what to do about a mismatch. Never empty: left
            empty, it is filled from the other fields (`fix_adapter` names the adapter).
    """

    # A frozen record written out by hand, not a dataclass: generating one costs ~0.4 ms at
    # import, and this module's import is part of the first load's time.
    __slots__ = ("expected", "found", "kind", "message", "path")

    kind: ApplyErrorKind
    path: str
    expected: str
    found: str
    message: str

    def __init__(
        self,
        kind: ApplyErrorKind,
        path: str,
        expected: str = "",
        found: str = "",
        message: str = "",
    ) -> None:
        setter = object.__setattr__
        setter(self, "kind", kind)
        setter(self, "path", path)
        setter(self, "expected", expected)
        setter(self, "found", found)
        # Left empty, the message is filled once, here, from the other fields.
        setter(self, "message", message or _default_message(self))

    def __setattr__(self, name: str, value: object) -> None:
        from dataclasses import FrozenInstanceError  # what the frozen dataclass raised

        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def _fields(self) -> tuple[str, str, str, str, str]:
        return (self.kind, self.path, self.expected, self.found, self.message)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"ApplyError(kind={self.kind!r}, path={self.path!r}, expected={self.expected!r}, "
            f"found={self.found!r}, message={self.message!r})"
        )

    @classmethod
    def shape_mismatch(
        cls, path: str, expected: Sequence[int], found: Sequence[int], message: str = ""
    ) -> ApplyError:
        """The source tensor's shape differs from the model parameter's; `message` defaults
        to advice for the case (a transposed Linear weight names `BurnToPyTorchAdapter`)."""
        return cls("shape_mismatch", path, _shape_text(expected), _shape_text(found), message)

    @classmethod
    def dtype_mismatch(cls, path: str, expected: str, found: str, message: str = "") -> ApplyError:
        """The model cannot hold the source dtype without loss (f32 into f16, float into int);
        `message` defaults to advice naming the adapter that converts it, if one does."""
        return cls("dtype_mismatch", path, expected, found, message)

    @classmethod
    def load_error(cls, path: str, message: str) -> ApplyError:
        """Reading or adapting the tensor's data failed; `message` says why."""
        return cls("load_error", path, message=message)

    @property
    def fix_adapter(self) -> str | None:
        """The built-in adapter that makes this tensor load, as Python to pass to
        ``.with_from_adapter(...)`` (``HalfPrecisionAdapter()``); None when none does."""
        if self.kind == "dtype_mismatch":
            return _dtype_adapter(self.expected, self.found)
        if self.kind == "shape_mismatch" and _is_transposed(self.expected, self.found):
            return "BurnToPyTorchAdapter()"
        return None

    def __str__(self) -> str:
        if self.kind == "load_error":
            return f"tensor {self.path!r}: data failed to load: {self.message}"
        what = _MISMATCH_WHAT[self.kind]
        text = f"tensor {self.path!r}: {what} is {self.found}, expected {self.expected}"
        return f"{text}; {self.message}"


def _shape_text(shape: Sequence[int]) -> str:
    """A shape as Python prints a tuple: ``(2, 3)``, ``(3,)``, ``()``."""
    return str(tuple(int(dim) for dim in shape))


def _parse_shape(text: str) -> tuple[int, ...] | None:
    """The inverse of `_shape_text`; None for text it did not write."""
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


def _default_message(error: ApplyError) -> str:
    """What an error says when its maker gave no message: what to do, built from the fields."""
    if error.kind == "load_error":
        return "no cause was given"
    adapter = error.fix_adapter
    if error.kind == "dtype_mismatch":
        if adapter is None:
            return (
                f"no built-in adapter converts {error.found} to {error.expected}; convert the "
                "source, or give the model the source's dtype"
            )
        return f"converting would lose information; load with .with_from_adapter({adapter})"
    if adapter is not None:
        return f"transposed, as Burn stores Linear weights; load with .with_from_adapter({adapter})"
    return (
        "the model and the source were built with different sizes; build the model as the "
        "source's was, or leave this tensor out with a filter"
    )


class PrefixChange:
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

    # A plain class, not a dataclass: this module is on `import weightstore.stores`'s path, and
    # generating a dataclass costs more than the whole record.
    __slots__ = ("explained", "missing", "model_prefix", "source_prefix")

    def __init__(self, source_prefix: str, model_prefix: str, explained: int, missing: int) -> None:
        self.source_prefix: Final = source_prefix
        self.model_prefix: Final = model_prefix
        self.explained: Final = explained
        self.missing: Final = missing

    def _fields(self) -> tuple[str, str, int, int]:
        return (self.source_prefix, self.model_prefix, self.explained, self.missing)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PrefixChange):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return "PrefixChange({!r}, {!r}, {!r}, {!r})".format(*self._fields())

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
        source, model = _shown(self.source_prefix), _shown(self.model_prefix)
        if not self.model_prefix:
            how = f"in the source as {source!r} + {their} name"
        elif not self.source_prefix:
            how = f"in the source without {their} {model!r} prefix"
        else:
            how = f"in the source with {source!r} in place of {model!r}"
        return f"{self.explained:,} of {_count(self.missing, 'missing tensor')} {verb} {how}"


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


def _shown(text: str, limit: int = MAX_NAME_LEN) -> str:
    """`text` cut to `limit` characters, the cut marked with "…"."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _count(number: int, noun: str) -> str:
    """``"1 tensor"``, ``"2 tensors"``, ``"1,000 tensors"``."""
    return f"{number:,} {noun}" if number == 1 else f"{number:,} {noun}s"


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


class ApplyResult:
    """What a load did; filled in by the applier, then read by stores and users.

    Attributes:
        applied: paths written into the model, in the model's order.
        skipped: paths in the source that the load filter excluded; sorted.
        missing: ``(path, container_path)`` for each path the model asked for and the source
            lacks, sorted by path; the container path joins the module types with ``.``.
        unused: paths in the source that the model never asked for; sorted.
        errors: tensors found but not loaded.
        held_back: when the load was refused, the paths that passed every check and would
            have loaded, in the model's order; empty otherwise.
        refused: the rule (`LoadRules.failure`) that refused the load before anything was
            written, so the model is unchanged; None when the load ran.
        source: the file the tensors came from, when they came from one.
        top_level_key: set by a store that can read a checkpoint under a top-level key and
            checked that the file has the key `prefix_change` points at; the summary then
            suggests ``.with_top_level_key(key)`` instead of a key remapping.
    """

    # Written out by hand, not a dataclass, for the same reason as `ApplyError`.
    __slots__ = (
        "applied", "errors", "held_back", "missing", "refused", "skipped", "source",
        "top_level_key", "unused",
    )  # fmt: skip

    def __init__(
        self,
        applied: list[str] | None = None,
        skipped: list[str] | None = None,
        missing: list[tuple[str, str]] | None = None,
        unused: list[str] | None = None,
        errors: list[ApplyError] | None = None,
        held_back: list[str] | None = None,
        refused: LoadFailure | None = None,
        source: str | None = None,
        top_level_key: str | None = None,
    ) -> None:
        # Each result gets lists of its own, as the dataclass's default factories gave it.
        self.applied: list[str] = [] if applied is None else applied
        self.skipped: list[str] = [] if skipped is None else skipped
        self.missing: list[tuple[str, str]] = [] if missing is None else missing
        self.unused: list[str] = [] if unused is None else unused
        self.errors: list[ApplyError] = [] if errors is None else errors
        self.held_back: list[str] = [] if held_back is None else held_back
        self.refused: LoadFailure | None = refused
        self.source: str | None = source
        self.top_level_key: str | None = top_level_key

    def _fields(self) -> tuple[object, ...]:
        return (
            self.applied, self.skipped, self.missing, self.unused, self.errors, self.held_back,
            self.refused, self.source, self.top_level_key,
        )  # fmt: skip

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass it replaced

    def __repr__(self) -> str:
        names = ("applied", "skipped", "missing", "unused", "errors", "held_back", "refused",
                 "source", "top_level_key")  # fmt: skip
        values = self._fields()
        pairs = ", ".join(f"{name}={value!r}" for name, value in zip(names, values, strict=True))
        return f"ApplyResult({pairs})"

    def is_success(self) -> bool:
        """True when no tensor failed, the load ran, and it wrote something if the model has
        anything to write. Missing and unused tensors do not count, as in Burn; unlike Burn, a
        load that wrote nothing (every name wrong) is no success."""
        return not self.errors and self.refused is None and not self.loaded_nothing()

    def loaded_nothing(self) -> bool:
        """True when the model has tensors (any path is applied, skipped, missing, held back
        or failed) and none was written."""
        has_tensors = self.skipped or self.missing or self.errors or self.held_back
        return not self.applied and bool(has_tensors)

    def fix_adapter(self) -> str | None:
        """The one built-in adapter that fixes every error (`ApplyError.fix_adapter`), as
        Python; None when there are no errors or no single adapter fixes them all."""
        adapters = {error.fix_adapter for error in self.errors}
        return adapters.pop() if len(adapters) == 1 else None

    def prefix_change(self) -> PrefixChange | None:
        """The prefix change between the source's names and the model's that explains most
        missing paths, if any does (`find_prefix_change`)."""
        return find_prefix_change([path for path, _ in self.missing], self.unused, self.applied)

    def suggestions(self, path: str, *, limit: int = 1) -> list[str]:
        """Unused source paths that `path` (usually a missing one) was probably meant to be.

        First, if dropping the first segment that looks like an enum variant gives an unused
        path, that path alone is the answer. Otherwise the unused paths with a Jaro similarity
        of at least `SUGGESTION_THRESHOLD`, most similar first (ties keep `unused` order), at
        most `limit` of them. The summary shows one.
        """
        from weightstore.paths import strip_enum_variants  # reports only: not on a load's path

        stripped = strip_enum_variants(path, first_only=True)
        if stripped != path and stripped in self.unused:
            return [stripped]
        scored = [(jaro_similarity(path, name), name) for name in self.unused]
        close = [pair for pair in scored if pair[0] >= SUGGESTION_THRESHOLD]
        close.sort(key=lambda pair: pair[0], reverse=True)  # stable: ties keep unused order
        return [name for _, name in close[:limit]]

    def __str__(self) -> str:
        lines = _counts_lines(self)
        change = self.prefix_change()
        if change is not None:
            lines += _prefix_lines(change, self.top_level_key)
        if self.missing:
            lines += _missing_lines(self, change)
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
            lines += _listing("Errors", _bulleted(errors, "│  ⚠️  {}", limit=4 * MAX_NAME_LEN))
        lines += ["│", "└" + "─" * 51]
        return "\n".join(lines)


class LoadRules:
    """What fails a load, as a store's or a record's options say; `failure` applies them.

    A load that would write nothing although the model has tensors fails whatever the rules
    say: no option accepts it (a caller who wants one calls `weightstore.apply`, which never
    raises).

    Attributes:
        validate: errors fail the load (a store's ``validate``, a record's ``strict_shapes``).
        allow_partial: missing tensors do not fail it.
        allow_unused: unused source tensors do not fail it (stores: always).
    """

    __slots__ = ("allow_partial", "allow_unused", "validate")  # plain class: see PrefixChange

    def __init__(
        self, validate: bool = True, allow_partial: bool = False, allow_unused: bool = True
    ) -> None:
        self.validate: Final = validate
        self.allow_partial: Final = allow_partial
        self.allow_unused: Final = allow_unused

    def __repr__(self) -> str:
        return (
            f"LoadRules(validate={self.validate}, allow_partial={self.allow_partial}, "
            f"allow_unused={self.allow_unused})"
        )

    def failure(self, result: ApplyResult) -> LoadFailure | None:
        """The first rule `result` breaks, or None; checked in this order: errors (with
        `validate`), nothing loaded, missing (without `allow_partial`), unused (without
        `allow_unused`). Tensors in `held_back` count as loaded: the rules judge what the load
        does, whether or not it was refused."""
        if self.validate and result.errors:
            return "errors"
        if not result.held_back and result.loaded_nothing():
            return "nothing_loaded"
        if result.missing and not self.allow_partial:
            return "missing"
        if result.unused and not self.allow_unused:
            return "unused"
        return None


def _counts_lines(result: ApplyResult) -> list[str]:
    """The box top, the source, the five counts and, for a refused load, what was held back.
    The odd spacing after "Skipped" is Burn's, kept."""
    lines = ["┌─ Tensor Loading Summary " + "─" * 25, "│"]
    if result.source is not None:
        lines.append(f"│ Source: {_shown(result.source)}")
    lines += [
        f"│ ✓ Successfully applied: {_count(len(result.applied), 'tensor')}",
        f"│ ⊘ Skipped (filtered):  {_count(len(result.skipped), 'tensor')}",
        f"│ ✗ Missing in source:    {_count(len(result.missing), 'tensor')}",
        f"│ ? Unused in target:     {_count(len(result.unused), 'tensor')}",
        f"│ ! Errors:               {_count(len(result.errors), 'error')}",
    ]
    if result.refused is not None:
        lines.append(
            f"│ ⏸ Held back:            {_count(len(result.held_back), 'tensor')} (the load was "
            "refused before writing; the model is unchanged)"
        )
    return lines


def _listing(title: str, body: list[str]) -> list[str]:
    """A section heading: a blank bar line, the title, another blank bar line."""
    return ["│", f"├─ {title}", "│", *body]


def _bulleted(items: Sequence[str], template: str, limit: int = MAX_NAME_LEN) -> list[str]:
    """The first `SHOWN_PER_SECTION` items through `template`, then how many more there are."""
    lines = [template.format(_shown(item, limit)) for item in items[:SHOWN_PER_SECTION]]
    return lines + _more(len(items))


def _more(count: int) -> list[str]:
    """The line that counts what a section did not list, if anything."""
    if count <= SHOWN_PER_SECTION:
        return []
    return [f"│    ... and {count - SHOWN_PER_SECTION:,} more"]


def _prefix_lines(change: PrefixChange, top_level_key: str | None) -> list[str]:
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


def _missing_lines(result: ApplyResult, change: PrefixChange | None) -> list[str]:
    """The missing section: the enum advice when it applies, then paths with suggestions (the
    name under the prefix `change`, when the source has it: exact, and no Jaro scan of every
    unused name)."""
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
        lines.append(f"│    • {_shown(path)}")
        renamed = None if change is None else change.source_name(path)
        found = [renamed] if renamed in unused else result.suggestions(path)
        lines += [f"│        Did you mean: '{_shown(s)}'?" for s in found if s is not None]
    return lines + _more(len(result.missing))
