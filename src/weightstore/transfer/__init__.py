"""Moving tensors between models and snapshots: the load plan and the pipeline that runs it.

Two modules, layered around the bridges: `_plan.py` holds what a load decides before a model's
own code runs (`Target`, `PendingTensor`, `LoadPlan`, `LoadOutcome`, `LoadReach`) and the rules
that judge it (`LoadRules`); the bridges, below the pipeline, import it to receive a plan.
`_apply.py` holds `collect` and `apply`, which walk a model through its bridge, so it imports
the bridges and sits above them.

The package itself imports neither eagerly: a bridge's import of `_plan` runs this file first,
and importing `_apply` here would import the bridges back. The names resolve on first use from
`_EXPORTS`; code inside weightstore imports the module that defines a name, so the layer test
sees the real dependency.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from weightstore.transfer._apply import DTypePolicy, IndexMapper, apply, collect
    from weightstore.transfer._plan import (
        LoadOutcome,
        LoadPlan,
        LoadReach,
        LoadRules,
        PendingTensor,
        Target,
    )

_EXPORTS: dict[str, str] = {
    "DTypePolicy": "weightstore.transfer._apply",
    "IndexMapper": "weightstore.transfer._apply",
    "apply": "weightstore.transfer._apply",
    "collect": "weightstore.transfer._apply",
    "LoadOutcome": "weightstore.transfer._plan",
    "LoadPlan": "weightstore.transfer._plan",
    "LoadReach": "weightstore.transfer._plan",
    "LoadRules": "weightstore.transfer._plan",
    "PendingTensor": "weightstore.transfer._plan",
    "Target": "weightstore.transfer._plan",
}

__all__ = [
    "DTypePolicy",
    "IndexMapper",
    "LoadOutcome",
    "LoadPlan",
    "LoadReach",
    "LoadRules",
    "PendingTensor",
    "Target",
    "apply",
    "collect",
]


def __getattr__(name: str) -> Any:
    """A name of `_EXPORTS`, imported from its module on first use and kept."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
