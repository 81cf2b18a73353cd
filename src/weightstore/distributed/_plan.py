"""Which tensors a rank slices, and which slice it takes: the plan and torch's `Shard` rule.

A `ShardPlan` maps name patterns to dimensions (``{r"\\.q_proj\\.weight$": 0}``): a tensor
whose name one of its patterns is found in (the first in order, unanchored, as the stores'
``with_regex``) is split along that dimension across the ranks; every other tensor is
replicated, read whole by every rank.

The split is torch's, so a slice loaded here is exactly the local shard of a
``DTensor`` with ``Shard(dim)`` placement: ``torch.chunk`` cuts a dimension of size n into
chunks of ceil(n / world); rank r takes chunk r. The last ranks may get a shorter chunk or
none: 10 rows over 4 ranks are 3, 3, 3 and 1; 5 rows are 2, 2, 1 and 0.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from weightstore.base._record import ValueRecord, field
from weightstore.errors import InvalidOptionError
from weightstore.paths import compile_pattern

__all__ = ["PlanInput", "ShardPlan", "chunk_bounds", "local_shape"]

MAX_RULES: Final = 10_000  # patterns in one plan; a model has far fewer kinds of tensor


class ShardPlan(ValueRecord):
    """Name patterns and the dimension each splits; immutable, compiled when built.

    Attributes:
        rules: ``(pattern, dim)`` pairs in the order given; a negative dim counts from the
            last dimension, as torch's do.

    Example:
        >>> plan = ShardPlan({r"\\.(q|k|v)_proj\\.weight$": 0, r"\\.o_proj\\.weight$": 1})
        >>> plan.dim_for("layers.0.q_proj.weight"), plan.dim_for("layers.0.norm.weight")
        (0, None)
    """

    rules: tuple[tuple[str, int], ...]
    _compiled: tuple[tuple[re.Pattern[str], int], ...] = field(init=False)

    def __init__(self, rules: Mapping[str, int] | tuple[tuple[str, int], ...] = ()) -> None:
        """Raises `InvalidOptionError` for a pattern that does not compile or a dim that is
        no int, here rather than at load time."""
        pairs = tuple(rules.items()) if isinstance(rules, Mapping) else tuple(rules)
        if len(pairs) > MAX_RULES:
            raise InvalidOptionError(f"a plan has {len(pairs):,} rules, over {MAX_RULES:,}")
        for pattern, dim in pairs:
            if not isinstance(pattern, str):
                raise InvalidOptionError(f"a plan's pattern is a str, not {type(pattern).__name__}")
            if isinstance(dim, bool) or not isinstance(dim, int):
                raise InvalidOptionError(
                    f"plan pattern {pattern!r} maps to {dim!r}; a dimension is an int"
                )
        super().__init__(pairs)
        self._set("_compiled", tuple((compile_pattern(p), dim) for p, dim in pairs))

    @classmethod
    def of(cls, plan: PlanInput) -> ShardPlan:
        """`plan` as a `ShardPlan`: itself, a mapping's rules, or no rules for None."""
        if plan is None:
            return cls()
        return plan if isinstance(plan, ShardPlan) else cls(plan)

    def dim_for(self, name: str) -> int | None:
        """The dimension the first matching rule splits `name` on, or None (replicated)."""
        for pattern, dim in self._compiled:
            if pattern.search(name):
                return dim
        return None

    def __bool__(self) -> bool:
        return bool(self.rules)


PlanInput = ShardPlan | Mapping[str, int] | None
"""What a caller may pass as a plan: a `ShardPlan`, a ``{pattern: dim}`` mapping, or None."""


def chunk_bounds(size: int, rank: int, world_size: int) -> tuple[int, int]:
    """Start and stop of rank `rank`'s chunk of a dimension of `size`, by torch's rule.

    Example:
        >>> [chunk_bounds(10, r, 4) for r in range(4)]
        [(0, 3), (3, 6), (6, 9), (9, 10)]
        >>> chunk_bounds(5, 3, 4)
        (5, 5)

    Raises:
        InvalidOptionError: `world_size` is below 1 or `rank` outside ``0 .. world_size - 1``.
    """
    validate_rank(rank, world_size)
    chunk = -(-size // world_size)
    start = min(rank * chunk, size)
    return start, min(start + chunk, size)


def local_shape(shape: tuple[int, ...], dim: int, rank: int, world_size: int) -> tuple[int, ...]:
    """`shape` with dimension `dim` cut to rank `rank`'s chunk (`dim` already normalized)."""
    start, stop = chunk_bounds(shape[dim], rank, world_size)
    return (*shape[:dim], stop - start, *shape[dim + 1 :])


def normalize_dim(dim: int, shape: tuple[int, ...], name: str) -> int:
    """`dim` counted from the front of `shape`.

    Raises:
        InvalidOptionError: the tensor `name` has no such dimension.
    """
    if not -len(shape) <= dim < len(shape):
        raise InvalidOptionError(
            f"tensor {name!r} of shape {list(shape)} has no dimension {dim} to split on; "
            "narrow the plan's pattern"
        )
    return dim % len(shape)


def validate_rank(rank: int, world_size: int) -> None:
    """Raise `InvalidOptionError` unless `rank` is one of `world_size` ranks."""
    for what, value in (("rank", rank), ("world_size", world_size)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidOptionError(f"{what} is an int, not {type(value).__name__}", option=what)
    if world_size < 1 or not 0 <= rank < world_size:
        raise InvalidOptionError(
            f"rank {rank} is not one of {world_size} ranks (0 .. world_size - 1)", option="rank"
        )
