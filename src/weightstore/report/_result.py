"""The load report's data: what happened to every tensor of one load.

A load sorts each tensor into one bucket, as Burn's applier does:

    applied   found in the source and written into the model, in model order
    skipped   found in the source but excluded by the load filter; sorted
    missing   the model asked for it and the source has no such path; (path, container path),
              sorted by path. A filtered-out parameter absent from the source is missing, not
              skipped, as in Burn
    unused    in the source and never asked for by the model; sorted
    errors    found but not loadable: wrong shape, a dtype the model cannot hold exactly, or
              data that failed to read

A strict load (`weightstore.transfer.LoadRules`) is judged before anything is written, and one
that would fail for certain is *refused*: `refused` names the rule it breaks, nothing is
written, and the tensors that passed every check are listed in `held_back` instead of `applied`.

`is_success()` departs from Burn, for whom it means "no errors": a refused load, and a load that
wrote nothing although the model has tensors (every name wrong: Burn calls that a success), are
failures too.

The data asks the diagnosis (`_diagnosis.py`: fixes, prefix changes, suggestions) and renders
itself through the summary (`_summary.py`: ``str(result)``, docs/paths.md shows it); both take
plain values, so neither imports this module back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal, TypeAlias

from weightstore.base._record import ValueRecord
from weightstore.report._diagnosis import (
    LayoutChange,
    PrefixChange,
    advice,
    find_layout_change,
    find_prefix_change,
    fixing_adapter,
    partial_load_advisable,
    suggestions,
)
from weightstore.report._summary import render

__all__ = ["ApplyError", "ApplyErrorKind", "ApplyResult", "LoadFailure"]

ApplyErrorKind: TypeAlias = Literal["shape_mismatch", "dtype_mismatch", "load_error"]
"""Which failure an `ApplyError` records; Burn's variant names in snake case."""

LoadFailure: TypeAlias = Literal["errors", "nothing_loaded", "missing", "unused"]
"""Which rule a failed load broke, in the order `transfer.LoadRules.failure` checks them; a
refused report names one in `ApplyResult.refused`."""

_MISMATCH_WHAT: Final[dict[str, str]] = {"shape_mismatch": "shape", "dtype_mismatch": "dtype"}


class ApplyError(ValueRecord):
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

    kind: ApplyErrorKind
    path: str
    expected: str = ""
    found: str = ""
    message: str = ""

    def __post_init__(self) -> None:
        if not self.message:  # left empty, the message is filled once, here, from the others
            self._set("message", advice(self.kind, self.expected, self.found))

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
        return fixing_adapter(self.kind, self.expected, self.found)

    def __str__(self) -> str:
        if self.kind == "load_error":
            return f"tensor {self.path!r}: data failed to load: {self.message}"
        what = _MISMATCH_WHAT[self.kind]
        text = f"tensor {self.path!r}: {what} is {self.found}, expected {self.expected}"
        return f"{text}; {self.message}"


def _shape_text(shape: Sequence[int]) -> str:
    """A shape as Python prints a tuple: ``(2, 3)``, ``(3,)``, ``()``."""
    return str(tuple(int(dim) for dim in shape))


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
        refused: the rule (`transfer.LoadRules.failure`) that refused the load before anything was
            written, so the model is unchanged; None when the load ran.
        source: the file the tensors came from, when they came from one.
        top_level_key: set by a store that can read a checkpoint under a top-level key and
            checked that the file has the key `prefix_change` points at; the summary then
            suggests ``.with_top_level_key(key)`` instead of a key remapping.
        quantized: for each applied path whose source tensor is stored quantized (a GGUF
            file's Q4_K...), the source's encoding; its values were decoded on the way.
        layout_problems: what a layout adapter's rules could not make, each naming its rule,
            sources and targets (docs/layouts.md); empty without layout rules.
        tied: each applied path the source lacked and a tie filled (a head left out of the
            file, tied to the input embedding), and the source tensor it was filled from.
        io: how the source file was read and why (``"pread (on a fuse.sshfs file system,
            ...)"``, `weightstore.io._engine.choose_io`); None for memory and URLs. Not
            compared by ``==``: two loads that did the same are equal however they read.
    """

    # Written out by hand, not a dataclass, for the same reason as `ApplyError`.
    __slots__ = (
        "applied", "errors", "held_back", "io", "layout_problems", "missing", "quantized",
        "refused", "skipped", "source", "tied", "top_level_key", "unused",
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
        quantized: dict[str, str] | None = None,
        layout_problems: list[str] | None = None,
        tied: dict[str, str] | None = None,
        io: str | None = None,
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
        self.quantized: dict[str, str] = {} if quantized is None else quantized
        self.layout_problems: list[str] = [] if layout_problems is None else layout_problems
        self.tied: dict[str, str] = {} if tied is None else tied
        self.io: str | None = io

    def _fields(self) -> tuple[object, ...]:
        return (
            self.applied, self.skipped, self.missing, self.unused, self.errors, self.held_back,
            self.refused, self.source, self.top_level_key, self.quantized, self.layout_problems,
            self.tied,
        )  # fmt: skip

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass it replaced

    def __repr__(self) -> str:
        names = ("applied", "skipped", "missing", "unused", "errors", "held_back", "refused",
                 "source", "top_level_key", "quantized", "layout_problems", "tied")  # fmt: skip
        values = self._fields()
        pairs = ", ".join(f"{name}={value!r}" for name, value in zip(names, values, strict=True))
        if self.io is not None:
            pairs += f", io={self.io!r}"
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

    def layout_change(self) -> LayoutChange | None:
        """The other framework's layout the source's names are in, when it explains most
        missing paths better than a prefix change alone (`find_layout_change`): a torch file
        loaded into a Flax model without ``PyTorchToFlaxAdapter()``."""
        missing = [path for path, _ in self.missing]
        layout = find_layout_change(missing, self.unused, self.applied)
        if layout is None:
            return None
        prefix = self.prefix_change()
        return layout if prefix is None or layout.explained > prefix.explained else None

    def partial_load_advisable(self) -> bool:
        """Whether ``allow_partial`` is a fix worth naming for the missing tensors: half the
        model's tensors (applied, held back, skipped, missing or failed) or fewer are missing,
        and no other framework's layout explains them (`layout_change`)."""
        tensors = len(self.applied) + len(self.held_back) + len(self.skipped) + len(self.errors)
        advisable = partial_load_advisable(len(self.missing), tensors + len(self.missing))
        return advisable and self.layout_change() is None

    def suggestions(self, path: str, *, limit: int = 1) -> list[str]:
        """Unused source paths that `path` (usually a missing one) was probably meant to be.

        First, if dropping the first segment that looks like an enum variant gives an unused
        path, that path alone is the answer. Otherwise the unused paths with a Jaro similarity
        of at least `SUGGESTION_THRESHOLD`, most similar first (ties keep `unused` order), at
        most `limit` of them. The summary shows one.
        """
        return suggestions(path, self.unused, limit=limit)

    def __str__(self) -> str:
        return render(self)
