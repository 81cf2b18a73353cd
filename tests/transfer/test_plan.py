"""The load plan's rules: which rule a report breaks first, and the plan types' values."""

from __future__ import annotations

import pytest

from weightstore.dtypes import from_name
from weightstore.report import ApplyError, ApplyResult
from weightstore.transfer._plan import LoadOutcome, LoadReach, LoadRules, Target


@pytest.mark.parametrize(
    ("rules", "result", "failure"),
    [
        (LoadRules(), ApplyResult(applied=["a"]), None),
        (LoadRules(), ApplyResult(applied=["a"], errors=[ApplyError.load_error("b", "x")]),
         "errors"),
        (LoadRules(validate=False),
         ApplyResult(applied=["a"], errors=[ApplyError.load_error("b", "x")]), None),
        (LoadRules(validate=False), ApplyResult(errors=[ApplyError.load_error("b", "x")]),
         "nothing_loaded"),
        (LoadRules(), ApplyResult(missing=[("a", "")]), "nothing_loaded"),  # before "missing"
        (LoadRules(allow_partial=True), ApplyResult(missing=[("a", "")]), "nothing_loaded"),
        (LoadRules(), ApplyResult(applied=["a"], missing=[("b", "")]), "missing"),
        (LoadRules(allow_partial=True), ApplyResult(applied=["a"], missing=[("b", "")]), None),
        (LoadRules(), ApplyResult(held_back=["a"], missing=[("b", "")]), "missing"),
        (LoadRules(), ApplyResult(applied=["a"], unused=["b"]), None),
        (LoadRules(allow_unused=False), ApplyResult(applied=["a"], unused=["b"]), "unused"),
    ],
)  # fmt: skip
def test_load_rules_are_checked_in_order(
    rules: LoadRules, result: ApplyResult, failure: str | None
) -> None:
    assert rules.failure(result) == failure


def test_a_load_reach_supplies_under_its_prefixes_and_fills_its_defaults() -> None:
    reach = LoadReach(
        ("enc.",), frozenset({"bn.num_batches_tracked"}), frozenset({"in.running_mean"})
    )
    assert reach.may_supply("enc.w") and not reach.may_supply("dec.w")
    assert reach.may_fill("bn.num_batches_tracked") and not reach.may_supply(
        "bn.num_batches_tracked"
    )
    assert reach.may_consume("in.running_mean") and reach.may_consume("enc.x")
    assert not reach.may_consume("dec.x")


def test_outcomes_compare_by_fields_and_targets_name_their_module() -> None:
    assert LoadOutcome({"a"}, {"b": "bad"}) == LoadOutcome({"a"}, {"b": "bad"}, set())
    assert LoadOutcome({"a"}) != LoadOutcome({"a"}, taken={"x"})
    target = Target("enc.fc.weight", ("Model", "Linear"), from_name("F32"), (2, 3))
    assert (target.container_path, target.module_type) == ("Model.Linear", "Linear")
    assert Target("w", (), from_name("F32"), ()).module_type is None
