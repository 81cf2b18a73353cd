"""Which tensors a rank slices, and which slice it takes: the plan and torch's `Shard` rule.

A `ShardPlan` maps name patterns to dimensions (``{r"\\.q_proj\\.weight$": 0}``): a tensor
whose name one of its patterns is found in (the first in order, unanchored, as the stores'
``with_regex``) is split along that dimension across the ranks; every other tensor is
replicated, read whole by every rank.

The split is torch's, so a slice loaded here is exactly the local shard of a
``DTensor`` with ``Shard(dim)`` placement: ``torch.chunk`` cuts a dimension of size n into
chunks of ceil(n / world); rank r takes chunk r. The last ranks may get a shorter chunk or
none: 10 rows over 4 ranks are 3, 3, 3 and 1; 5 rows are 2, 2, 1 and 0.

A fused tensor (``qkv_proj``: q, k and v stacked along dim 0) is split part by part instead, as
vLLM's ``QKVParallelLinear`` and ``MergedColumnParallelLinear`` hold it: `FusedSplit` gives the
parts' sizes, each part is chunked by the rule above, and a rank holds its chunks of the parts
joined. Chunking the fused whole would hand rank 0 all of q and rank 1 k and v.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from weightstore.base._record import ValueRecord, field
from weightstore.errors import InvalidOptionError
from weightstore.paths import compile_pattern

__all__ = ["FusedSplit", "PlanInput", "ShardPlan", "chunk_bounds", "fused_ranges", "local_shape"]

MAX_RULES: Final = 10_000  # patterns in one plan; a model has far fewer kinds of tensor


class FusedSplit(ValueRecord):
    """A plan's split of a fused tensor part by part (see the module docstring).

    Attributes:
        dim: the dim the parts are stacked along and split on.
        sizes: each part's size along `dim`, in order (``(q, k, v)`` rows); they add up to the
            tensor's size there.

    Example:
        >>> plan = ShardPlan({r"\\.qkv_proj\\.weight$": FusedSplit(0, (64, 16, 16))})
        >>> fused_ranges(FusedSplit(0, (64, 16, 16)), rank=1, world_size=2)
        [(32, 64), (72, 80), (88, 96)]
    """

    dim: int
    sizes: tuple[int, ...]

    def __init__(self, dim: int, sizes: tuple[int, ...] | list[int]) -> None:
        """Raises `InvalidOptionError` for a dim or size that is no int, or a negative size."""
        sizes = tuple(sizes)
        for what, value in (("dim", dim), *(("size", size) for size in sizes)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidOptionError(f"a FusedSplit's {what} is an int, not {value!r}")
        if not sizes or min(sizes) < 0:
            raise InvalidOptionError(f"a FusedSplit takes one or more sizes >= 0, not {sizes}")
        super().__init__(dim, sizes)


Split = int | FusedSplit
"""What a plan's pattern maps to: a dim to chunk the tensor on, or a fused tensor's parts."""


class ShardPlan(ValueRecord):
    """Name patterns and the dimension each splits; immutable, compiled when built.

    Attributes:
        rules: ``(pattern, dim)`` pairs in the order given; a negative dim counts from the
            last dimension, as torch's do. In place of a dim, a `FusedSplit` splits a fused
            tensor part by part.

    Example:
        >>> plan = ShardPlan({r"\\.(q|k|v)_proj\\.weight$": 0, r"\\.o_proj\\.weight$": 1})
        >>> plan.dim_for("layers.0.q_proj.weight"), plan.dim_for("layers.0.norm.weight")
        (0, None)
    """

    rules: tuple[tuple[str, Split], ...]
    _compiled: tuple[tuple[re.Pattern[str], Split], ...] = field(init=False)

    def __init__(self, rules: Mapping[str, Split] | tuple[tuple[str, Split], ...] = ()) -> None:
        """Raises `InvalidOptionError` for a pattern that does not compile or a dim that is
        no int, here rather than at load time."""
        pairs = tuple(rules.items()) if isinstance(rules, Mapping) else tuple(rules)
        if len(pairs) > MAX_RULES:
            raise InvalidOptionError(f"a plan has {len(pairs):,} rules, over {MAX_RULES:,}")
        for pattern, dim in pairs:
            if not isinstance(pattern, str):
                raise InvalidOptionError(f"a plan's pattern is a str, not {type(pattern).__name__}")
            if isinstance(dim, bool) or not isinstance(dim, int | FusedSplit):
                raise InvalidOptionError(
                    f"plan pattern {pattern!r} maps to {dim!r}; a dimension is an int "
                    "(or a FusedSplit for a fused tensor)"
                )
        super().__init__(pairs)
        self._set("_compiled", tuple((compile_pattern(p), dim) for p, dim in pairs))

    @classmethod
    def of(cls, plan: PlanInput) -> ShardPlan:
        """`plan` as a `ShardPlan`: itself, a mapping's rules, or no rules for None."""
        if plan is None:
            return cls()
        return plan if isinstance(plan, ShardPlan) else cls(plan)

    def dim_for(self, name: str) -> Split | None:
        """The dimension (or the `FusedSplit`) the first matching rule splits `name` by, or
        None (replicated)."""
        for pattern, dim in self._compiled:
            if pattern.search(name):
                return dim
        return None

    def __bool__(self) -> bool:
        return bool(self.rules)


PlanInput = ShardPlan | Mapping[str, Split] | None
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


def fused_ranges(split: FusedSplit, rank: int, world_size: int) -> list[tuple[int, int]]:
    """Start and stop, along the fused dim, of rank `rank`'s chunk of each part of `split`."""
    ranges, offset = [], 0
    for size in split.sizes:
        start, stop = chunk_bounds(size, rank, world_size)
        ranges.append((offset + start, offset + stop))
        offset += size
    return ranges


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
