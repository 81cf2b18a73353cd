"""The fix a store load's `LoadFailedError` names, as the builder calls that do it.

The error itself, and the words of its first line (what failed, whether the model changed),
are in `weightstore.errors` with the rest of the family; records phrase their fixes in
`record.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
