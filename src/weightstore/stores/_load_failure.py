"""Why a load failed, in words: `LoadFailedError`, and the fix a store load names.

The error's first line is enough to act on: what failed (`_FAILURE_TEXT`, one entry per rule of
`LoadRules`), whether the model changed (refused before writing, or partly loaded), and what to
do, as the builder call that does it (`store_fix`; records phrase theirs in `record.py`). The
load report follows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Final

from weightstore.errors import WeightstoreError
from weightstore.report import ApplyResult, LoadFailure

__all__ = ["LoadFailedError", "store_fix"]


class LoadFailedError(WeightstoreError, ValueError):
    """A load broke one of its rules (`LoadRules`); `result` has every detail.

    When ``result.refused`` is set, the load was refused before anything was written and the
    model is unchanged: every failure names, shapes and dtypes show is found so. Otherwise the
    failure showed only while the model loaded (its own load code decided, or data failed to
    read), and the tensors in ``result.applied`` were written. The message's first line says
    what failed, whether the model changed, and what to do; the summary follows.

    Attributes:
        result: the load report.
        failure: the rule broken: ``"errors"``, ``"nothing_loaded"``, ``"missing"`` or
            ``"unused"``.
        fix: what to do, as the builder calls that do it.
    """

    def __init__(
        self, result: ApplyResult, failure: LoadFailure, fix: str, *, path: str | None = None
    ) -> None:
        self.result, self.failure, self.fix = result, failure, fix
        what = _FAILURE_TEXT[failure](result)
        super().__init__(f"{what}; {_written_text(result)}; {fix}\n\n{result}", path=path)


def _count(count: int, noun: str) -> str:
    """``"1 tensor"``, ``"2 tensors"``, ``"2 shape mismatches"``."""
    if count == 1:
        return f"1 {noun}"
    return f"{count:,} {noun}{'es' if noun.endswith(('s', 'sh', 'ch', 'x')) else 's'}"


def _are(count: int, noun: str) -> str:
    """``"1 tensor is"``, ``"2 tensors are"``."""
    return f"{_count(count, noun)} {'is' if count == 1 else 'are'}"


def _errors_text(result: ApplyResult) -> str:
    """``"3 tensors cannot load (2 shape mismatches, 1 dtype mismatch)"``."""
    kinds = Counter(error.kind.replace("_", " ") for error in result.errors)
    listed = ", ".join(_count(number, kind) for kind, number in kinds.items())
    return f"{_count(len(result.errors), 'tensor')} cannot load ({listed})"


def _nothing_text(result: ApplyResult) -> str:
    """``"no tensor would load into the model (9 missing from the source)"``."""
    parts = [
        f"{len(result.missing):,} missing from the source" if result.missing else "",
        f"{len(result.skipped):,} filtered out" if result.skipped else "",
        f"{len(result.errors):,} failing the checks" if result.errors else "",
    ]
    verb = "would load" if result.refused else "loaded"
    return f"no tensor {verb} into the model ({', '.join(p for p in parts if p)})"


# What failed, per rule of LoadRules: the start of the error's first line.
_FAILURE_TEXT: Final[dict[str, Callable[[ApplyResult], str]]] = {
    "errors": _errors_text,
    "nothing_loaded": _nothing_text,
    "missing": lambda r: f"{_are(len(r.missing), 'model tensor')} missing from the source",
    "unused": lambda r: f"{_are(len(r.unused), 'source tensor')} not in the model",
}


def _written_text(result: ApplyResult) -> str:
    """Whether the failed load changed the model."""
    if result.refused is not None:
        return "nothing was written, the model is unchanged"
    if not result.applied:
        return "no tensor was written"
    count = len(result.applied)
    written = f"{_count(count, 'tensor')} {'was' if count == 1 else 'were'}"
    return (
        f"{written} written before this showed (the model's own load code decided it, or data "
        "failed to read): the model is partly loaded"
    )


def store_fix(result: ApplyResult, failure: LoadFailure) -> str:
    """What to do about `failure` of a store load, as the store builder calls that do it."""
    adapter = result.fix_adapter()
    errors_fix = (
        f"load with .with_from_adapter({adapter})"
        if adapter is not None
        else "fix the model or the source (each error says how)"
    )
    if failure == "errors":
        these = "this tensor" if len(result.errors) == 1 else f"these {len(result.errors):,}"
        return f"{errors_fix}, or use .validate(False) to load the rest and leave {these} unloaded"
    change = result.prefix_change()
    renamed = ""
    if change is not None:
        by_key = result.top_level_key is not None and result.top_level_key == change.top_level_key
        renamed = f"{change}: load with {change.fix(top_level_key=by_key)}"
    if failure == "nothing_loaded":
        compare = (
            "compare the source's names with the model's (store.keys() lists the source's; the "
            "summary suggests close ones)"
        )
        fixes = [
            (renamed or compare) if result.missing else "",
            f"check the filter (it excludes {len(result.skipped):,})" if result.skipped else "",
            errors_fix if result.errors else "",
        ]
        fixes = [fix for fix in fixes if fix]
        return "; ".join([*fixes, "no option accepts a load that loads nothing"])
    leave = "use .allow_partial(True) to load the rest and leave them as they are"
    return f"{renamed}, or {leave}" if renamed else leave
