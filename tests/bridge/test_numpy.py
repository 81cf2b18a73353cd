"""The NumPy-dict bridge: the same load pipeline as torch's, without hooks."""

from __future__ import annotations

from typing import Any

import numpy as np

from weightstore import TensorSnapshot, apply, collect
from weightstore.bridge import bridge_for
from weightstore.dtypes import from_numpy
from weightstore.transfer._plan import LoadPlan, PendingTensor


def test_aliases_are_keys_holding_the_same_array() -> None:
    shared = np.zeros((2, 2), np.float32)
    model = {"embed": shared, "block": {"w": np.ones(3, np.float32)}, "head": shared}
    assert bridge_for(model).aliases() == {"head": "embed"}
    assert [s.full_path for s in collect(model, dedupe_tied=True)] == ["embed", "block.w"]
    assert len(collect(model)) == 3


def test_equal_scalars_are_not_ties() -> None:
    one = np.float32(1.0)
    assert bridge_for({"a": one, "b": one}).aliases() == {}


def test_load_writes_the_plan_and_reports_read_failures() -> None:
    model: dict[str, Any] = {"a": np.zeros(2, np.float32), "b": np.zeros(2, np.float32)}
    kept = model["a"]

    def broken() -> np.ndarray[Any, Any]:
        raise ValueError("truncated")

    f32 = from_numpy(np.dtype(np.float32))
    plan = LoadPlan(
        {"a": PendingTensor(lambda: np.ones(2, np.float32), f32), "b": PendingTensor(broken, f32)},
        spare={"c": lambda: np.ones(1, np.float32)},
    )
    outcome = bridge_for(model).load(plan)
    assert outcome.loaded == {"a"} and outcome.errors == {"b": "truncated"}
    assert not outcome.taken
    assert model["a"] is kept and kept.tolist() == [1.0, 1.0]  # written in place


def test_apply_reports_unused_and_missing_for_dicts() -> None:
    model = {"a": np.zeros(2, np.float32), "b": np.zeros(2, np.float32)}
    snapshots = [
        TensorSnapshot.from_array("a", np.ones(2, np.float32)),
        TensorSnapshot.from_array("old_b", np.ones(2, np.float32)),
    ]
    result = apply(model, snapshots)
    assert result.applied == ["a"] and result.unused == ["old_b"]
    assert result.missing == [("b", "dict")]
