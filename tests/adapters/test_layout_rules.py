"""Layout rules over snapshots: groups by captures, numbered lists, derived inverses, the JSON
form, laziness (a split reads its source once), and every failure naming its rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from weightstore.adapters import (
    LAYOUT_PRESETS,
    Concat,
    Interleave,
    Layout,
    LayoutRule,
    Permute,
    Split,
    Stack,
    layout_preset,
)
from weightstore.adapters._layout_rewrite import rewrite_layout
from weightstore.errors import InvalidOptionError, LayoutError, LoadFailedError
from weightstore.snapshot import TensorSnapshot
from weightstore.stores import SafetensorsStore

QKV = LayoutRule(
    [r"(.*)\.q\.weight", r"(.*)\.k\.weight", r"(.*)\.v\.weight"], ["$1.qkv.weight"], [Concat(0)],
    name="qkv",
)  # fmt: skip
EXPERTS = LayoutRule(
    [r"(.*)\.experts\.(\d+)\.w1", r"(.*)\.experts\.(\d+)\.w3"],
    ["$1.experts.gate_up"],
    [Stack(0)],
    name="experts",
)


def _array(shape: tuple[int, ...], seed: int) -> np.ndarray[Any, Any]:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _snapshots(arrays: dict[str, np.ndarray[Any, Any]]) -> list[TensorSnapshot]:
    return [TensorSnapshot.from_array(name, array) for name, array in arrays.items()]


def _separate() -> dict[str, np.ndarray[Any, Any]]:
    return {
        "a.0.q.weight": _array((8, 4), 0),
        "a.0.k.weight": _array((2, 4), 1),
        "a.0.v.weight": _array((2, 4), 2),
        "a.1.q.weight": _array((8, 4), 3),
        "a.1.k.weight": _array((2, 4), 4),
        "a.1.v.weight": _array((2, 4), 5),
        "norm": _array((4,), 6),
    }


def test_a_rule_groups_by_the_captures_its_targets_use() -> None:
    arrays = _separate()
    out, plan = rewrite_layout(Layout([QKV]), _snapshots(arrays))
    names = [s.full_path for s in out]
    assert names == ["a.0.qkv.weight", "a.1.qkv.weight", "norm"]
    for layer in "01":
        fused = np.concatenate([arrays[f"a.{layer}.{p}.weight"] for p in "qkv"])
        assert np.array_equal(out[int(layer)].to_numpy(), fused)
    assert plan.groups[0].sources == ("a.0.q.weight", "a.0.k.weight", "a.0.v.weight")
    assert plan.groups[0].shapes == ((12, 4),) and plan.problems == []


def test_a_numbered_list_stacks_in_number_order_and_unstacks_back() -> None:
    arrays = {f"m.experts.{e}.{w}": _array((3, 2), 10 * e + i)
              for e in (1, 0, 2) for i, w in enumerate(("w1", "w3"))}  # fmt: skip
    [stacked], _ = rewrite_layout(Layout([EXPERTS]), _snapshots(arrays))
    assert stacked.full_path == "m.experts.gate_up" and stacked.shape == (6, 3, 2)
    expected = [arrays[f"m.experts.{e}.w1"] for e in range(3)]
    expected += [arrays[f"m.experts.{e}.w3"] for e in range(3)]
    assert np.array_equal(stacked.to_numpy(), np.stack(expected))
    back, _ = rewrite_layout(Layout([EXPERTS]).inverse(), [stacked])
    assert sorted(s.full_path for s in back) == sorted(arrays)
    for snapshot in back:
        assert np.array_equal(snapshot.to_numpy(), arrays[snapshot.full_path])


def test_an_inverse_that_needs_sizes_takes_them_from_its_targets() -> None:
    arrays = _separate()
    fused, _ = rewrite_layout(Layout([QKV]), _snapshots(arrays))
    inverse = Layout([QKV]).inverse()
    assert inverse.rules[0].inverse_of  # Concat's inverse needs the parts' sizes
    _, plan = rewrite_layout(inverse, fused)
    assert len(plan.problems) == 2 and plan.groups == []
    assert "needs the shapes of its targets" in str(plan.problems[0])
    assert plan.problems[0].sources == ("a.0.qkv.weight",)
    shapes = {name: array.shape for name, array in arrays.items()}
    back, plan = rewrite_layout(inverse, fused, shapes)
    assert plan.problems == []
    assert {s.full_path: s.to_numpy().tobytes() for s in back} == {
        n: a.tobytes() for n, a in arrays.items()
    }


def test_blind_inverses_need_no_shapes() -> None:
    rule = LayoutRule([r"(.*)\.c_attn"], ["$1.q", "$1.k", "$1.v"],
                      [Permute((1, 0)), Split(0, (2, 2, 2))])  # fmt: skip
    inverse = rule.inverse()
    assert not inverse.inverse_of
    assert inverse.ops == (Concat(0), Permute((1, 0)))
    assert inverse.sources == (r"(?P<g1>.*)\.q", r"(?P<g1>.*)\.k", r"(?P<g1>.*)\.v")
    assert inverse.targets == ("${g1}.c_attn",)
    assert inverse.inverse().inverse() == inverse


def test_an_inverse_keeps_each_capture_s_own_pattern() -> None:
    rule = LayoutRule([r"(.*)\.(c_fc|c_proj)\.weight"], ["$1.$2.w"], [Permute((1, 0))])
    inverse = rule.inverse()
    assert inverse.sources == (r"(?P<g1>.*)\.(?P<g2>c_fc|c_proj)\.w",)
    assert inverse.regexes[0].fullmatch("h.0.c_fc.w")
    assert not inverse.regexes[0].fullmatch("h.0.q_proj.w")  # the alternation survives


def test_a_split_reads_its_source_once_for_all_its_parts() -> None:
    reads: list[str] = []
    fused = _array((12, 4), 0)

    def load() -> np.ndarray[Any, Any]:
        reads.append("qkv")
        return fused

    source = TensorSnapshot(("x", "qkv", "weight"), QKV_DTYPE, (12, 4), load)
    parts, _ = rewrite_layout(
        Layout([QKV]).inverse(),
        [source],
        {"x.q.weight": (8, 4), "x.k.weight": (2, 4), "x.v.weight": (2, 4)},
    )
    assert reads == []  # planning reads nothing
    joined = np.concatenate([part.to_numpy() for part in parts])
    assert reads == ["qkv"] and np.array_equal(joined, fused)
    parts[0].to_numpy()  # asked again after the group was let go: read again, still right
    assert reads == ["qkv", "qkv"]


QKV_DTYPE = TensorSnapshot.from_array("x", np.zeros(1, np.float32)).dtype


def test_a_missing_member_is_a_problem_naming_rule_sources_and_targets() -> None:
    arrays = _separate()
    del arrays["a.1.k.weight"]
    out, plan = rewrite_layout(Layout([QKV]), _snapshots(arrays))
    [problem] = plan.problems
    assert problem.rule == "qkv" and problem.targets == ("a.1.qkv.weight",)
    assert problem.sources == ("a.1.q.weight", "a.1.v.weight")
    assert "no member for" in str(problem) and "k\\\\.weight" in str(problem)
    assert "a.1.q.weight" in [s.full_path for s in out]  # passes on, to be reported unused


def test_members_of_a_list_must_run_from_zero() -> None:
    arrays = {f"m.experts.{e}.{w}": _array((3, 2), e) for e in (0, 2) for w in ("w1", "w3")}
    _, plan = rewrite_layout(Layout([EXPERTS]), _snapshots(arrays))
    assert "[0, 2]; expected [0, 1]" in str(plan.problems[0])


def test_a_dtype_mismatch_is_a_problem_not_a_cast() -> None:
    arrays = _separate()
    arrays["a.0.k.weight"] = arrays["a.0.k.weight"].astype(np.float16)
    _, plan = rewrite_layout(Layout([QKV]), _snapshots(arrays))
    assert "one dtype" in str(plan.problems[0]) and "casts nothing" in str(plan.problems[0])


def test_two_rules_claiming_one_tensor_raise() -> None:
    other = LayoutRule([r"(.*)\.q\.weight"], ["$1.query"], [Permute((1, 0))], name="other")
    with pytest.raises(LayoutError, match=r"claims 'a\.0\.q\.weight', which 'qkv' claims too"):
        rewrite_layout(Layout([QKV, other]), _snapshots(_separate()))


def test_an_output_taking_an_existing_name_raises() -> None:
    arrays = {**_separate(), "a.0.qkv.weight": _array((12, 4), 9)}
    with pytest.raises(LayoutError, match="which the source holds already"):
        rewrite_layout(Layout([QKV]), _snapshots(arrays))


@pytest.mark.parametrize(
    ("sources", "targets", "match"),
    [
        ([r"(.*)\.q", r"(.*)\.(\d)\.k"], ["$1.x"], "same captures"),
        ([r"(.*)\.(\d+)\.(\d+)"], ["$1.x"], "one list"),
        ([r"(.*)\.q"], [], "at least one source and one target"),
    ],
)
def test_malformed_rules_are_refused_when_made(
    sources: list[str], targets: list[str], match: str
) -> None:
    with pytest.raises(LayoutError, match=match):
        LayoutRule(sources, targets, [Concat(0)])


def test_an_inverse_of_a_pattern_beyond_literals_and_captures_is_refused() -> None:
    rule = LayoutRule([r"(.*)\.q(uery)?"], ["$1.x"], [Permute((1, 0))])
    with pytest.raises(LayoutError, match="cannot name the tensors it matched"):
        rule.inverse()


def test_the_json_form_round_trips_and_prints_rules_a_user_can_copy() -> None:
    layout = Layout([QKV, EXPERTS, LayoutRule([r"(.*)\.w"], ["$1.i"],
                     [Interleave(0, 2)])], name="mine")  # fmt: skip
    assert Layout.from_json(layout.to_json()) == layout
    assert "Concat(dim=0)" in repr(layout) and "experts" in repr(layout)
    for preset in LAYOUT_PRESETS.values():
        assert Layout.from_json(preset.to_json()) == preset


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{", "is JSON"),
        ('{"rules": [{"sources": ["a"]}]}', "sources, targets and ops"),
        ('{"rules": [{"sources": ["a"], "targets": ["b"], "ops": [{"op": "Eval"}]}]}',
         "an operation is one of"),
    ],
)  # fmt: skip
def test_a_bad_layout_file_names_what_is_wrong(text: str, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        Layout.from_json(text)


def test_an_unknown_preset_lists_the_presets() -> None:
    with pytest.raises(InvalidOptionError, match="fuse-qkv-gate-up"):
        layout_preset("nope")


def _model(qkv_rows: int = 12) -> dict[str, Any]:
    return {
        "a": {str(i): {"qkv": {"weight": np.zeros((qkv_rows, 4), np.float32)}} for i in (0, 1)},
        "norm": np.zeros(4, np.float32),
    }


def test_a_numpy_model_loads_through_a_layout_and_saves_back_bit_exactly(tmp_path: Path) -> None:
    SafetensorsStore.from_file(tmp_path / "a.safetensors").collect_from(_separate())
    store = SafetensorsStore.from_file(tmp_path / "a.safetensors")
    model = _model()
    plan = store.plan(model, Layout([QKV]))
    assert [g.targets for g in plan.groups] == [("a.0.qkv.weight",), ("a.1.qkv.weight",)]
    assert plan.missing == [] and "a.0.q.weight, a.0.k.weight, a.0.v.weight" in str(plan)
    result = store.with_from_adapter(Layout([QKV])).apply_to(model)
    assert sorted(result.applied) == ["a.0.qkv.weight", "a.1.qkv.weight", "norm"]
    back = SafetensorsStore.from_file(tmp_path / "b.safetensors")
    back.with_to_adapter(plan.inverse()).collect_from(model)
    assert (tmp_path / "b.safetensors").read_bytes() == (tmp_path / "a.safetensors").read_bytes()


def test_a_rule_that_matched_nothing_is_named_and_its_targets_stay_missing(
    tmp_path: Path,
) -> None:
    arrays = {k: v for k, v in _separate().items() if ".q." not in k and ".k." not in k}
    arrays = {k.replace(".v.", ".value."): v for k, v in arrays.items()}
    SafetensorsStore.from_file(tmp_path / "a.safetensors").collect_from(arrays)
    store = SafetensorsStore.from_file(tmp_path / "a.safetensors").with_from_adapter(Layout([QKV]))
    result = store.allow_partial().apply_to(_model())  # partial: still reported missing
    assert [p for p, _ in result.missing] == ["a.0.qkv.weight", "a.1.qkv.weight"]
    assert "layout rule 'qkv': matches no source tensor" in result.layout_problems[0]
    with pytest.raises(LoadFailedError, match="Layout Problems"):
        SafetensorsStore.from_file(tmp_path / "a.safetensors").with_from_adapter(
            Layout([QKV])
        ).apply_to(_model())


def test_a_strict_load_with_a_bad_group_writes_nothing(tmp_path: Path) -> None:
    SafetensorsStore.from_file(tmp_path / "a.safetensors").collect_from(_separate())
    model = _model(qkv_rows=13)
    model["norm"][:] = 7.0
    store = SafetensorsStore.from_file(tmp_path / "a.safetensors").with_from_adapter(Layout([QKV]))
    with pytest.raises(LoadFailedError, match=r"makes 'a\.0\.qkv\.weight' of shape"):
        store.apply_to(model)
    assert (model["norm"] == 7.0).all()  # refused before writing: not even the plain tensor


def test_a_save_that_cannot_make_a_group_writes_no_file(tmp_path: Path) -> None:
    model = {"x": {"qkv": {"weight": _array((12, 4), 0)}}}
    store = SafetensorsStore.from_file(tmp_path / "out.safetensors")
    with pytest.raises(LayoutError, match="needs the shapes of its targets"):
        store.with_to_adapter(Layout([QKV]).inverse()).collect_from(model)
    assert list(tmp_path.iterdir()) == []


def test_the_stack_experts_preset_builds_transformers_stacked_layout_and_back() -> None:
    arrays = {
        f"m.experts.{e}.{part}.weight": _array((2, 3) if part == "down_proj" else (3, 2), e * 3 + i)
        for e in range(4)
        for i, part in enumerate(("gate_proj", "up_proj", "down_proj"))
    }
    layout = layout_preset("stack-experts")
    out, plan = rewrite_layout(layout, _snapshots(arrays))
    made = {s.full_path: s.to_numpy() for s in out}
    gate_up = np.stack([
        np.concatenate([arrays[f"m.experts.{e}.gate_proj.weight"],
                        arrays[f"m.experts.{e}.up_proj.weight"]])
        for e in range(4)
    ])  # fmt: skip
    assert np.array_equal(made["m.experts.gate_up_proj"], gate_up)  # [E, 2I, H]
    down = np.stack([arrays[f"m.experts.{e}.down_proj.weight"] for e in range(4)])
    assert np.array_equal(made["m.experts.down_proj"], down)
    back, _ = rewrite_layout(plan.inverse(), out)
    assert {s.full_path: s.to_numpy().tobytes() for s in back} == {
        n: a.tobytes() for n, a in arrays.items()
    }


def test_a_sharded_set_loads_through_a_layout_with_groups_across_shards(tmp_path: Path) -> None:
    arrays = _separate()
    shards = SafetensorsStore.from_file(tmp_path / "set").with_max_shard_size(200)
    shards.collect_from(arrays)
    assert len(list((tmp_path / "set").glob("*.safetensors"))) > 1  # a group spans shards
    model = _model()
    result = (
        SafetensorsStore.from_file(tmp_path / "set")
        .with_from_adapter(Layout([QKV]))
        .apply_to(model)
    )
    assert sorted(result.applied) == ["a.0.qkv.weight", "a.1.qkv.weight", "norm"]
    for layer in "01":
        fused = np.concatenate([arrays[f"a.{layer}.{p}.weight"] for p in "qkv"])
        assert np.array_equal(model["a"][layer]["qkv"]["weight"], fused)
