"""The load report: what one load did to every tensor, why it went wrong, and how to read it.

Three modules, each with one job, layered so that none imports another back: the data
(`ApplyResult`, `ApplyError`: `_result.py`) asks the diagnosis (`_diagnosis.py`: the adapter
that fixes an error, a changed name prefix or layout, "did you mean" names) and renders itself
through the text (`_summary.py`: Burn's summary box). The text is the bottom: it reads a report
through a protocol of its own, and the diagnosis words its findings with it; the data, on top,
is the only module that knows all three.
"""

from __future__ import annotations

from weightstore.report._diagnosis import (
    SUGGESTION_THRESHOLD,
    LayoutChange,
    PrefixChange,
    find_layout_change,
    find_prefix_change,
    jaro_similarity,
)
from weightstore.report._result import ApplyError, ApplyErrorKind, ApplyResult, LoadFailure
from weightstore.report._summary import MAX_NAME_LEN, SHOWN_PER_SECTION

__all__ = [
    "MAX_NAME_LEN",
    "SHOWN_PER_SECTION",
    "SUGGESTION_THRESHOLD",
    "ApplyError",
    "ApplyErrorKind",
    "ApplyResult",
    "LayoutChange",
    "LoadFailure",
    "PrefixChange",
    "find_layout_change",
    "find_prefix_change",
    "jaro_similarity",
]
