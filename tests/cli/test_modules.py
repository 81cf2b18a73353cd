"""Inferring which module owns each tensor of a file, and when an ambiguous owner matters."""

from __future__ import annotations

import numpy as np
import pytest

from weightstore.adapters import HalfPrecisionAdapter, PyTorchToBurnAdapter
from weightstore.cli._modules import Owner, TypeRule, assign_owners, infer_owners
from weightstore.errors import InvalidOptionError
from weightstore.paths import PathFilter
from weightstore.snapshot import TensorSnapshot

SHAPES = {
    "bn.weight": (4,), "bn.bias": (4,), "bn.running_mean": (4,), "bn.running_var": (4,),
    "bn.num_batches_tracked": (),
    "burn_norm.gamma": (4,), "burn_norm.beta": (4,),
    "conv1.weight": (4, 3, 3), "conv2.weight": (4, 3, 3, 3), "conv2.bias": (4,),
    "conv3.weight": (1, 1, 1, 1, 1),
    "fc.weight": (5, 7), "fc.bias": (5,),
    "square.weight": (5, 5), "square.bias": (5,),
    "emb.weight": (9, 5),
    "ln.weight": (5,), "ln.bias": (5,),
    "rms.weight": (5,),
    "custom.weight": (5, 7), "custom.scale": (5,),
    "cls_token": (1, 5),
}  # fmt: skip


def test_torch_layout_rules() -> None:
    owners = {name: owner.candidates for name, owner in infer_owners(SHAPES, "torch").items()}
    assert owners == {
        "bn.weight": ("BatchNorm",), "bn.bias": ("BatchNorm",),
        "bn.running_mean": ("BatchNorm",), "bn.running_var": ("BatchNorm",),
        "bn.num_batches_tracked": ("BatchNorm",),
        "burn_norm.gamma": ("LayerNorm",), "burn_norm.beta": ("LayerNorm",),
        "conv1.weight": ("Conv1d",), "conv2.weight": ("Conv2d",), "conv2.bias": ("Conv2d",),
        "conv3.weight": ("Conv3d",),
        "fc.weight": ("Linear",), "fc.bias": ("Linear",),
        "square.weight": ("Linear",), "square.bias": ("Linear",),
        "emb.weight": ("Linear", "Embedding"),
        "ln.weight": ("LayerNorm",), "ln.bias": ("LayerNorm",),
        "rms.weight": ("RmsNorm", "PRelu"),
        "custom.weight": (), "custom.scale": (),  # other tensors beside: a module of its own
        "cls_token": (),
    }  # fmt: skip


def test_a_linear_laid_out_the_other_way_is_a_misfit() -> None:
    shapes = {"fc.weight": (7, 5), "fc.bias": (5,)}  # Burn's [in, out]
    assert infer_owners(shapes, "torch")["fc.weight"].misfit == "weight [7, 5] with bias [5]"
    assert infer_owners(shapes, "burn")["fc.weight"] == Owner(("Linear",))
    assert infer_owners(shapes, None)["fc.weight"] == Owner(("Linear",))


def _snapshot(name: str, shape: tuple[int, ...]) -> TensorSnapshot:
    array = np.zeros(shape, np.float32)
    return TensorSnapshot.from_array(name, array)


def test_an_ambiguity_half_precision_does_not_care_about_passes() -> None:
    snapshots = [_snapshot("emb.weight", (9, 5)), _snapshot("rms.weight", (5,))]
    owners = infer_owners({s.full_path: s.shape for s in snapshots}, None)
    owned = assign_owners(snapshots, owners, [], HalfPrecisionAdapter(), "--half")
    assert [s.container for s in owned] == [("Linear",), ("RmsNorm",)]


def test_an_ambiguity_the_layout_cares_about_is_refused_unless_named() -> None:
    snapshots = [_snapshot("emb.weight", (9, 5)), _snapshot("head.weight", (2, 5))]
    owners = infer_owners({s.full_path: s.shape for s in snapshots}, "torch")
    with pytest.raises(InvalidOptionError) as refused:
        assign_owners(snapshots, owners, [], PyTorchToBurnAdapter(), "--to-burn")
    assert "'emb.weight' (a 2-D weight with no bias: Linear or Embedding)" in str(refused.value)
    assert "(1 more: 'head.weight')" in str(refused.value)
    rules = [
        TypeRule(PathFilter().with_regex("emb"), "Embedding"),
        TypeRule(PathFilter().with_regex("head"), "Linear"),
    ]
    owned = assign_owners(snapshots, owners, rules, PyTorchToBurnAdapter(), "--to-burn")
    assert [s.container for s in owned] == [("Embedding",), ("Linear",)]
