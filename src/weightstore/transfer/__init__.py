"""Moving tensors between models and snapshots: the load plan and the pipeline that runs it.

Two modules, layered around the bridges: `_plan.py` holds what a load decides before a model's
own code runs (`Target`, `PendingTensor`, `LoadPlan`, `LoadOutcome`, `LoadReach`) and the rules
that judge it (`LoadRules`); the bridges, below the pipeline, import it to receive a plan.
`_apply.py` holds `collect` and `apply`, which walk a model through its bridge, so it imports
the bridges and sits above them.

The package itself imports neither eagerly: a bridge's import of `_plan` runs this file first,
and importing `_apply` here would import the bridges back. The names resolve on first use from
the `lazy_exports` table; code inside weightstore imports the module that defines a name, so
the layer test sees the real dependency.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from weightstore.base._lazy import lazy_exports

if TYPE_CHECKING:
    from weightstore.transfer._apply import DTypePolicy as DTypePolicy
    from weightstore.transfer._apply import IndexMapper as IndexMapper
    from weightstore.transfer._apply import apply as apply
    from weightstore.transfer._apply import collect as collect
    from weightstore.transfer._plan import LoadOutcome as LoadOutcome
    from weightstore.transfer._plan import LoadPlan as LoadPlan
    from weightstore.transfer._plan import LoadReach as LoadReach
    from weightstore.transfer._plan import LoadRules as LoadRules
    from weightstore.transfer._plan import PendingTensor as PendingTensor
    from weightstore.transfer._plan import Target as Target

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(
            ("DTypePolicy", "IndexMapper", "apply", "collect"), "weightstore.transfer._apply"
        ),
        **dict.fromkeys(
            ("LoadOutcome", "LoadPlan", "LoadReach", "LoadRules", "PendingTensor", "Target"),
            "weightstore.transfer._plan",
        ),
    },
)  # fmt: skip
