"""The slice rule (torch's ``Shard(dim)``: ``torch.chunk``) and `ShardPlan`."""

from __future__ import annotations

import pytest

from weightstore.distributed import ShardPlan, chunk_bounds
from weightstore.distributed._plan import local_shape, normalize_dim
from weightstore.errors import InvalidOptionError


def test_chunks_follow_torch_chunk_for_every_size_and_world() -> None:
    torch = pytest.importorskip("torch")
    for world_size in (1, 2, 3, 4, 7, 8):
        for size in range(0, 20):
            pieces = torch.chunk(torch.arange(size), world_size) if size else ()
            for rank in range(world_size):
                start, stop = chunk_bounds(size, rank, world_size)
                want = pieces[rank].tolist() if rank < len(pieces) else []
                assert list(range(start, stop)) == want, (size, rank, world_size)


def test_uneven_chunks_leave_the_last_ranks_less_or_nothing() -> None:
    assert [chunk_bounds(10, r, 4) for r in range(4)] == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert [chunk_bounds(5, r, 4) for r in range(4)] == [(0, 2), (2, 4), (4, 5), (5, 5)]
    assert [chunk_bounds(2, r, 4) for r in range(4)] == [(0, 1), (1, 2), (2, 2), (2, 2)]
    assert local_shape((10, 6), 1, 3, 4) == (10, 0)  # 6 columns: 2, 2, 2 and none


@pytest.mark.parametrize(("rank", "world_size"), [(2, 2), (-1, 2), (0, 0), (True, 2), (0, 2.0)])
def test_a_rank_outside_the_world_is_refused(rank: object, world_size: object) -> None:
    with pytest.raises(InvalidOptionError):
        chunk_bounds(10, rank, world_size)  # type: ignore[arg-type]


def test_the_first_matching_pattern_decides_and_patterns_search() -> None:
    plan = ShardPlan({r"\.q_proj\.": 0, r"proj\.weight$": 1})
    assert plan.dim_for("layers.0.q_proj.weight") == 0  # both match: the first wins
    assert plan.dim_for("layers.0.o_proj.weight") == 1
    assert plan.dim_for("layers.0.norm.weight") is None  # replicated
    assert ShardPlan.of({r"\.q_proj\.": 0, r"proj\.weight$": 1}) == plan
    assert ShardPlan.of(plan) is plan and not ShardPlan.of(None)


def test_rust_syntax_patterns_compile_as_for_store_filters() -> None:
    assert ShardPlan({r"(?<layer>\d+)\.up\z": 0}).dim_for("layers.3.up") == 0


@pytest.mark.parametrize(
    ("rules", "found"),
    [
        ({"(unclosed": 0}, "(unclosed"),
        ({"w": "0"}, "a dimension is an int"),
        ({"w": True}, "a dimension is an int"),
        ({"[a-z&&[^x]]": 0}, "[a-z&&[^x]]"),
    ],
)
def test_bad_rules_are_refused_when_the_plan_is_built(rules: object, found: str) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        ShardPlan(rules)  # type: ignore[arg-type]
    assert found in str(caught.value)


def test_negative_dims_count_from_the_end_and_missing_dims_name_the_tensor() -> None:
    assert normalize_dim(-1, (4, 6), "w") == 1
    with pytest.raises(InvalidOptionError, match=r"tensor 'b' of shape \[6\] has no dimension 1"):
        normalize_dim(1, (6,), "b")
