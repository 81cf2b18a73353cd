"""Tensor-parallel loads of fused parameters in one process, rank by rank: a fused QKV and
gate_up split part by part (vLLM's QKVParallelLinear), from a file with separate q/k/v through
a layout rule and from a file with the fused tensors by a `FusedSplit`; the bytes each rank
reads; and the plans refused. Real process groups: test_fused_gloo.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.distributed import _fused as f
from tests.distributed._counting import counting_reads
from weightstore import SafetensorsStore, save_into
from weightstore.adapters import (
    Concat,
    Layout,
    LayoutRule,
    Permute,
    Pipeline,
    Split,
    Stack,
    layout_preset,
)
from weightstore.distributed import FusedSplit, ShardPlan, load
from weightstore.errors import InvalidOptionError


def _write(tmp_path: Path, arrays: f.Arrays, name: str) -> Path:
    path = tmp_path / name
    save_into(arrays, SafetensorsStore.from_file(path))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fused")
    return {
        "separate": _write(root, f.separate(), "llama.safetensors"),
        "fused": _write(root, f.fused(), "phi3.safetensors"),
    }


def _header(path: Path) -> int:
    with counting_reads() as counter:
        SafetensorsStore.from_file(path).keys()
    return counter.total


def _check(model: f.Arrays, want: f.Arrays) -> None:
    assert sorted(model) == sorted(want)
    for name, array in want.items():
        assert np.array_equal(model[name], array), name


def _load_rank(
    store: SafetensorsStore, plan: Any, rank: int, world_size: int
) -> tuple[f.Arrays, int]:
    """A rank's fused model loaded by `plan`, and the bytes the load read."""
    want = f.expected_fused_local(rank, world_size)
    model = f.zeros_like(want)
    with counting_reads() as counter:
        result = load(store, model, plan, rank=rank, world_size=world_size)
    assert result.is_success(), result
    _check(model, want)
    return model, counter.total


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_separate_qkv_load_part_by_part_into_a_fused_rank(
    files: dict[str, Path], world_size: int
) -> None:
    path = files["separate"]
    header = _header(path)
    for rank in range(world_size):  # 3 ranks: q is 22, 22, 20 rows; k and v 6, 6, 4
        store = SafetensorsStore.from_file(path).with_from_adapter(
            layout_preset("fuse-qkv-gate-up")
        )
        model, read = _load_rank(store, f.COLUMN_PARALLEL, rank, world_size)
        share = sum(array.nbytes for array in model.values())
        assert read == header + share, (rank, read, header, share)  # only its own bytes
        print(
            f"world {world_size} rank {rank}: read {read:,} = header {header:,} + share {share:,}"
        )


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_a_fused_file_loads_part_by_part_by_a_fused_split(
    files: dict[str, Path], world_size: int
) -> None:
    path = files["fused"]
    header = _header(path)
    for rank in range(world_size):
        model, read = _load_rank(
            SafetensorsStore.from_file(path), f.FUSED_FILE_PLAN, rank, world_size
        )
        assert read == header + sum(array.nbytes for array in model.values()), rank


def test_chunking_the_fused_whole_is_not_what_a_fused_split_loads(files: dict[str, Path]) -> None:
    want = f.expected_fused_local(0, 2)
    whole = load(
        SafetensorsStore.from_file(files["fused"]).allow_partial(),
        f.zeros_like(want), f.COLUMN_PARALLEL, rank=0, world_size=2,
    )  # fmt: skip
    name = "layers.0.self_attn.qkv_proj.weight"
    assert whole.is_success()  # the shapes agree: 48 rows either way...
    model = f.zeros_like(want)
    load(SafetensorsStore.from_file(files["fused"]), model, f.COLUMN_PARALLEL, rank=0,
         world_size=2)  # fmt: skip
    assert not np.array_equal(model[name], want[name])  # ...but rank 0 got q's first 48 rows
    assert np.array_equal(model[name], f.fused()[name][:48])


def test_a_fused_file_splits_into_a_separate_rank_through_the_split_preset(
    files: dict[str, Path],
) -> None:
    plan = {r"\.qkv_proj\.weight$": FusedSplit(0, f.QKV_SIZES),
            r"\.gate_up_proj\.weight$": FusedSplit(0, f.GATE_UP_SIZES)}  # fmt: skip
    parts = f.separate()
    for rank in range(2):
        want = {n: f.chunk(a, 0, rank, 2) if n.endswith(("q_proj.weight", "k_proj.weight",
                "v_proj.weight", "gate_proj.weight", "up_proj.weight")) else a
                for n, a in parts.items()}  # fmt: skip
        model = f.zeros_like(want)
        store = SafetensorsStore.from_file(files["fused"]).with_from_adapter(
            layout_preset("split-qkv-gate-up")
        )
        assert load(store, model, plan, rank=rank, world_size=2).is_success()
        _check(model, want)


def test_a_permuted_source_is_split_on_the_dim_the_permutation_maps_to(tmp_path: Path) -> None:
    conv = np.arange(6 * 10, dtype=np.float32).reshape(6, 10)  # Conv1D: [in, out]
    path = _write(tmp_path, {"fc.c_fc.weight": conv}, "conv.safetensors")
    rule = LayoutRule([r"(.*)\.c_fc\.weight"], ["$1.linear.weight"], [Permute((1, 0))])
    for rank in range(2):  # column-parallel Linear [out, in]: its rows are the file's columns
        model = {"fc.linear.weight": np.zeros((5, 6), np.float32)}
        store = SafetensorsStore.from_file(path).with_from_adapter(Layout([rule]))
        with counting_reads() as counter:
            load(store, model, {r"linear\.weight$": 0}, rank=rank, world_size=2)
        assert np.array_equal(model["fc.linear.weight"], conv[:, rank * 5 : rank * 5 + 5].T)
        assert counter.total == _header(path) + 6 * 5 * 4  # six runs of five columns


def test_split_dims_follow_the_operations() -> None:
    shapes = [(64, 8), (16, 8), (16, 8)]
    assert Concat(0).input_split_dims([0], shapes) == [0, 0, 0]
    assert Concat(0).input_split_dims([1], shapes) == [1, 1, 1]
    assert Permute((1, 0)).input_split_dims([0], [(8, 64)]) == [1]
    assert Pipeline((Permute((1, 0)), Concat(1))).input_split_dims([0], [(8, 3), (8, 5)]) == [
        1, 1,
    ]  # fmt: skip
    assert Split(0, (4, 4)).input_split_dims([1, 1], [(8, 6)]) == [1]
    assert Split(0, (4, 4)).input_split_dims([0, 0], [(8, 6)]) is None  # its own dim
    assert Stack(0).input_split_dims([1], [(4, 4), (4, 4)]) is None
    assert Pipeline(()).input_split_dims([0], [(4,)]) == [0]


def test_a_plan_on_a_rule_target_that_cannot_be_split_is_refused(tmp_path: Path) -> None:
    experts = {f"moe.experts.{e}.w.weight": np.ones((4, 3), np.float32) for e in range(2)}
    path = _write(tmp_path, experts, "moe.safetensors")
    rule = LayoutRule([r"moe\.experts\.(\d+)\.w\.weight"], ["moe.w"], [Stack(0)], name="stack")
    store = SafetensorsStore.from_file(path).with_from_adapter(Layout([rule]))
    with pytest.raises(InvalidOptionError, match=r"'moe\.w' on dims \[0\].*'stack'.*sources"):
        load(store, {"moe": {"w": np.zeros((1, 4, 3), np.float32)}}, {r"^moe\.w$": 0},
             rank=0, world_size=2)  # fmt: skip


def test_a_rule_target_split_by_a_fused_split_is_refused(files: dict[str, Path]) -> None:
    store = SafetensorsStore.from_file(files["separate"]).with_from_adapter(
        layout_preset("fuse-qkv-gate-up")
    )
    plan = {r"\.qkv_proj\.weight$": FusedSplit(0, f.QKV_SIZES)}
    with pytest.raises(InvalidOptionError, match=r"qkv_proj.*'fused qkv'.*part by part"):
        load(store, f.zeros_like(f.expected_fused_local(0, 2)), plan, rank=0, world_size=2)


def test_a_source_split_two_ways_is_refused(files: dict[str, Path]) -> None:
    store = SafetensorsStore.from_file(files["separate"]).with_from_adapter(
        layout_preset("fuse-qkv-gate-up")
    )
    plan = {r"\.q_proj\.weight$": 1, **f.COLUMN_PARALLEL}
    with pytest.raises(InvalidOptionError, match=r"q_proj.*dim 1.*'fused qkv'.*dim 0"):
        load(store, f.zeros_like(f.expected_fused_local(0, 2)), plan, rank=0, world_size=2)


def test_a_rule_that_cannot_plan_before_the_load_is_named(files: dict[str, Path]) -> None:
    store = SafetensorsStore.from_file(files["fused"]).with_from_adapter(
        layout_preset("split-qkv-gate-up")
    )  # its sizes come from the model's targets, which a rank holds cut
    with pytest.raises(InvalidOptionError, match=r"q_proj.*'split qkv'.*sources in the plan"):
        load(store, {}, {r"\.q_proj\.weight$": 0}, rank=0, world_size=2)


@pytest.mark.parametrize(
    ("split", "message"),
    [
        (FusedSplit(0, (64, 16, 15)), r"qkv_proj.*\[64, 16, 15\].*add up to 95, not 96"),
        (FusedSplit(2, f.QKV_SIZES), r"qkv_proj.*no dimension 2"),
    ],
)
def test_fused_sizes_that_do_not_fit_the_tensor_are_refused(
    files: dict[str, Path], split: FusedSplit, message: str
) -> None:
    plan = {**f.FUSED_FILE_PLAN, r"\.qkv_proj\.weight$": split}
    with pytest.raises(InvalidOptionError, match=message):
        load(SafetensorsStore.from_file(files["fused"]), {}, plan, rank=0, world_size=2)


@pytest.mark.parametrize(
    ("args", "message"),
    [((0, ()), "one or more sizes"), ((0, (4, -1)), "sizes >= 0"), ((0.5, (4,)), "dim is an int"),
     ((0, (True,)), "size is an int")],
)  # fmt: skip
def test_a_fused_split_checks_its_values(args: tuple[Any, Any], message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        FusedSplit(*args)


def test_a_plan_holds_fused_splits_as_values() -> None:
    plan = ShardPlan(f.FUSED_FILE_PLAN)
    assert plan.dim_for("layers.0.self_attn.qkv_proj.weight") == FusedSplit(0, f.QKV_SIZES)
    assert plan == ShardPlan(dict(f.FUSED_FILE_PLAN))
    with pytest.raises(InvalidOptionError, match=r"a dimension is an int \(or a FusedSplit"):
        ShardPlan({"x": "0"})  # type: ignore[dict-item]
