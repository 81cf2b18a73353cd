"""Names in another framework's layout name the adapter, never a partial load (issue 23).

A torch checkpoint loaded into a Flax model without ``PyTorchToFlaxAdapter`` matches only the
biases by name; the old hint, ``.allow_partial(True)``, loaded those and left every kernel at
its initial values. Names alone decide here, so these run without jax or torch.
"""

from __future__ import annotations

import pytest

from weightstore.report import ApplyResult, LayoutChange, find_layout_change
from weightstore.report._diagnosis import partial_load_advisable
from weightstore.stores._load_failure import store_fix

# An NNX model with Dense, LayerNorm, BatchNorm and Embed, and a torch file for it.
NNX_MISSING = [
    "bn.mean", "bn.scale", "bn.var", "emb.embedding", "fc.kernel", "norm.scale",
]  # fmt: skip
NNX_APPLIED = ["bn.bias", "fc.bias", "norm.bias"]
TORCH_UNUSED = [
    "bn.num_batches_tracked", "bn.running_mean", "bn.running_var", "bn.weight", "emb.weight",
    "fc.weight", "norm.weight",
]  # fmt: skip


def _result(
    missing: list[str], unused: list[str], applied: list[str] = (), **fields: object
) -> ApplyResult:
    return ApplyResult(
        applied=list(applied),
        missing=[(path, "Model") for path in missing],
        unused=list(unused),
        **fields,  # type: ignore[arg-type]
    )


def test_a_torch_file_for_a_flax_model_names_the_adapter() -> None:
    change = find_layout_change(NNX_MISSING, TORCH_UNUSED, NNX_APPLIED)
    assert change is not None
    assert (change.adapter, change.framework, change.explained, change.missing) == (
        "PyTorchToFlaxAdapter()", "PyTorch", 6, 6,
    )  # fmt: skip
    assert change.prefix is None
    assert change.fix() == ".with_from_adapter(PyTorchToFlaxAdapter())"
    assert change.source_name("bn.mean") == "bn.running_mean"
    assert change.source_name("fc.bias") is None
    assert str(change) == (
        "6 of 6 missing tensors are in the source under PyTorch's names (such as 'fc.weight' "
        "for 'fc.kernel')"
    )


def test_the_failed_load_names_the_adapter_and_not_a_partial_load() -> None:
    # 6 of 9 tensors missing, refused: the biases held back
    result = _result(NNX_MISSING, TORCH_UNUSED, held_back=NNX_APPLIED, refused="missing")
    fix = store_fix(result, "missing")
    assert fix == (
        "6 of 6 missing tensors are in the source under PyTorch's names (such as 'fc.weight' for "
        "'fc.kernel'): load with .with_from_adapter(PyTorchToFlaxAdapter())"
    )
    assert "allow_partial" not in fix
    assert not result.partial_load_advisable()
    summary = str(result)
    assert "├─ Names in Another Framework's Layout" in summary
    assert "💡 Fix: add .with_from_adapter(PyTorchToFlaxAdapter()) to the store" in summary
    assert "│    • bn.mean\n│        Did you mean: 'bn.running_mean'?" in summary
    assert "Names Differ by a Prefix" not in summary


def test_a_layout_explains_missing_tensors_even_when_most_of_the_model_loaded() -> None:
    # Only the embedding is missing, 1 of 9: a partial load would be allowed by size alone,
    # but the layout explains it, so the adapter is the fix
    applied = [p for p in NNX_MISSING if p != "emb.embedding"] + NNX_APPLIED
    result = _result(["emb.embedding"], ["emb.weight"], applied)
    assert result.layout_change() is not None
    assert store_fix(result, "missing").endswith(
        "load with .with_from_adapter(PyTorchToFlaxAdapter())"
    )
    assert "allow_partial" not in store_fix(result, "missing")


def test_a_burn_file_for_a_flax_model_is_told_by_its_norm_names() -> None:
    missing = ["fc.kernel", "norm.bias", "norm.scale"]
    change = find_layout_change(missing, ["fc.weight", "norm.beta", "norm.gamma"], ["fc.bias"])
    assert change is not None and change.adapter == "BurnToFlaxAdapter()"
    assert change.explained == 3 and change.source_name("norm.bias") == "norm.beta"


def test_a_flax_file_for_a_torch_model_names_the_adapter_back() -> None:
    missing = ["bn.running_mean", "bn.running_var", "bn.weight", "fc.weight"]
    unused = ["bn.mean", "bn.scale", "bn.var", "fc.kernel"]
    change = find_layout_change(missing, unused, ["bn.bias", "fc.bias"])
    assert change is not None and change.adapter == "FlaxToPyTorchAdapter()"
    assert change.explained == 4 and change.source_name("fc.weight") == "fc.kernel"


def test_linen_collections_need_the_adapter_and_a_prefix() -> None:
    missing = ["params.fc.bias", "params.fc.kernel", "params.norm.bias", "params.norm.scale"]
    unused = ["fc.bias", "fc.weight", "norm.bias", "norm.weight"]
    result = _result(missing, unused)
    assert result.prefix_change() is None  # the prefix alone explains only the biases
    change = result.layout_change()
    assert change is not None and change.prefix is not None
    assert change.explained == 4
    assert change.fix() == (
        '.with_from_adapter(PyTorchToFlaxAdapter()).with_key_remapping("^(.*)$", "params.$1")'
    )
    assert str(change).endswith("and without their 'params.' prefix")
    assert change.source_name("params.fc.kernel") == "fc.weight"


def test_a_data_parallel_torch_file_for_a_flax_model() -> None:
    unused = [f"module.{name}" for name in TORCH_UNUSED + NNX_APPLIED]
    missing = sorted(NNX_MISSING + NNX_APPLIED)
    change = find_layout_change(missing, unused)
    assert change is not None and change.explained == 9
    assert change.fix().endswith('.with_key_remapping(r"^module\\.", "")')


@pytest.mark.parametrize(
    ("missing", "unused"),
    [
        (["fc.weight", "fc.bias"], ["module.fc.weight", "module.fc.bias"]),  # a prefix only
        (["fc.kernel"], ["head.weight"]),  # another layer
        (["a.kernel", "b.kernel", "c.kernel"], ["a.weight"]),  # a third: not most
        # many names, one of them renamed: a prefix change, not a layout
        ([f"l{i}.bias" for i in range(9)] + ["x.kernel"],
         [f"m.l{i}.bias" for i in range(9)] + ["m.x.weight"]),
    ],
)  # fmt: skip
def test_no_layout_change_without_renamed_leaves_explaining_most(
    missing: list[str], unused: list[str]
) -> None:
    assert find_layout_change(missing, unused) is None


def test_a_pure_prefix_change_keeps_its_own_hint() -> None:
    result = _result(["fc.bias", "fc.weight"], ["module.fc.bias", "module.fc.weight"])
    assert result.layout_change() is None and result.prefix_change() is not None
    assert "Names Differ by a Prefix" in str(result)


def test_layout_change_is_a_value() -> None:
    change = find_layout_change(NNX_MISSING, TORCH_UNUSED)
    assert isinstance(change, LayoutChange)
    assert change == find_layout_change(list(reversed(NNX_MISSING)), TORCH_UNUSED)


# -- when a partial load is a fix worth naming ---------------------------------------------------


def test_partial_load_is_advised_for_half_the_model_missing_or_fewer() -> None:
    assert partial_load_advisable(2, 4) and partial_load_advisable(0, 1)
    assert not partial_load_advisable(3, 5) and not partial_load_advisable(1, 1)


def test_a_load_missing_half_the_model_names_allow_partial() -> None:
    result = _result(["dec.bias", "dec.weight"], [], ["enc.bias", "enc.weight"])
    assert store_fix(result, "missing") == (
        "use .allow_partial(True) to load the rest and leave them as they are"
    )


def test_a_load_missing_most_of_the_model_does_not_name_allow_partial() -> None:
    result = _result(["a.x", "b.y", "c.z"], ["other"], ["d.w", "e.v"])
    fix = store_fix(result, "missing")
    assert "allow_partial" not in fix
    assert fix.endswith("3 of the model's 5 tensors are missing, too many to leave unloaded")


def test_the_count_label_says_what_it_counts() -> None:
    summary = str(_result([], ["extra"], ["w"]))
    assert "│ ? In source, unused by model: 1 tensor" in summary
    assert "Unused in target" not in summary
