"""The fix a store load's `LoadFailedError` names, as the builder calls that do it.

The error itself, and the words of its first line (what failed, whether the model changed),
are in `weightstore.errors` with the rest of the family; records phrase their fixes in
`record.py`. ``allow_partial`` is named only when half the model's tensors or fewer are
missing and no other framework's layout explains them (`ApplyResult.partial_load_advisable`):
a load that leaves most of a model at its initial values is a wrong load, not a partial one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from weightstore.stores._ties import HEAD_WEIGHT, INPUT_EMBEDDING

if TYPE_CHECKING:
    from weightstore.report import ApplyResult, LoadFailure

__all__ = ["store_fix"]


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
    renamed = _renamed(result)
    compare = (
        "compare the source's names with the model's (store.keys() lists the source's; the "
        "summary suggests close ones)"
    )
    if failure == "nothing_loaded":
        fixes = [
            (renamed or compare) if result.missing else "",
            f"check the filter (it excludes {len(result.skipped):,})" if result.skipped else "",
            errors_fix if result.errors else "",
        ]
        fixes = [fix for fix in fixes if fix]
        return "; ".join([*fixes, "no option accepts a load that loads nothing"])
    if not result.partial_load_advisable():  # most of the model would stay unloaded
        return renamed or f"{compare}: {_too_many(result)}"
    leave = "use .allow_partial(True) to load the rest and leave them as they are"
    renamed = renamed or _tie_fix(result)
    return f"{renamed}, or {leave}" if renamed else leave


def _tie_fix(result: ApplyResult) -> str:
    """For a missing head beside an input embedding the source holds: the tie that fills it
    (a file saved with its tied head left out, and no config.json saying so); else ""."""
    if HEAD_WEIGHT not in {path for path, _ in result.missing}:
        return ""
    held = (*result.applied, *result.held_back, *result.unused)
    embeddings = [p for p in held if INPUT_EMBEDDING.fullmatch(p)]
    if len(embeddings) != 1:
        return ""
    return (
        f"if the head is tied to the input embedding (a file saved without it), load with "
        f".with_tied_weights({{{HEAD_WEIGHT!r}: {embeddings[0]!r}}})"
    )


def _renamed(result: ApplyResult) -> str:
    """The change of names that explains the missing tensors and the builder calls that undo
    it (an adapter for another framework's layout, a remapping or top-level key for a
    prefix); "" when none does."""
    layout = result.layout_change()
    if layout is not None:
        return f"{layout}: load with {layout.fix()}"
    change = result.prefix_change()
    if change is None:
        return ""
    by_key = result.top_level_key is not None and result.top_level_key == change.top_level_key
    return f"{change}: load with {change.fix(top_level_key=by_key)}"


def _too_many(result: ApplyResult) -> str:
    """Why leaving the missing tensors unloaded is no fix: how much of the model they are."""
    from weightstore.report._summary import count  # failures only: not on a load's path

    tensors = len(result.applied) + len(result.held_back) + len(result.skipped)
    tensors += len(result.errors) + len(result.missing)
    return (
        f"{len(result.missing):,} of the model's {count(tensors, 'tensor')} are missing, too "
        "many to leave unloaded"
    )
