"""Burn enum-variant paths against torch models, and the ModuleSnapshot mixin."""

from __future__ import annotations

import numpy as np
import pytest

from weightstore import BurnpackStore, ModuleSnapshot, PathFilter, RemapCollisionError, burnpack
from weightstore.adapters import BurnToPyTorchAdapter
from weightstore.entry import TensorEntry

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402


class EnumTwin(ModuleSnapshot, nn.Module):
    """torch twin of Burn's ModelWithEnum: `feature` is a Linear inside an enum variant."""

    def __init__(self) -> None:
        super().__init__()
        self.feature = nn.Linear(3, 64)
        self.classifier = nn.Linear(64, 10)


def _burn_file_with_variant() -> bytes:
    rng = np.random.default_rng(0)
    arrays = {  # Burn layout: Linear weights [d_in, d_out], the variant name in the path
        "feature.BaseConv.weight": rng.standard_normal((3, 64)).astype(np.float32),
        "feature.BaseConv.bias": rng.standard_normal(64).astype(np.float32),
        "classifier.weight": rng.standard_normal((64, 10)).astype(np.float32),
        "classifier.bias": rng.standard_normal(10).astype(np.float32),
    }
    return burnpack.write_bytes([TensorEntry.from_array(n, a) for n, a in arrays.items()])


def test_enum_variant_paths_load_with_skip_enum_variants() -> None:
    data = _burn_file_with_variant()
    store = BurnpackStore.from_bytes(data).with_from_adapter(BurnToPyTorchAdapter())
    model = EnumTwin()
    result = model.load_from(store.allow_partial())
    assert sorted(p for p, _ in result.missing) == ["feature.bias", "feature.weight"]
    assert result.unused == ["feature.BaseConv.bias", "feature.BaseConv.weight"]
    result = model.load_from(store.skip_enum_variants())
    assert result.is_success() and not result.missing and not result.unused


def test_two_variants_that_strip_to_one_name_are_refused_naming_both() -> None:
    # enc.Foo.w and enc.Bar.w both become enc.w: one would be dropped silently otherwise.
    entries = [
        TensorEntry.from_array(name, np.full((3, 64), value, np.float32))
        for name, value in (("feature.Foo.weight", 1.0), ("feature.Bar.weight", 2.0))
    ]
    store = BurnpackStore.from_bytes(burnpack.write_bytes(entries)).skip_enum_variants()
    with pytest.raises(RemapCollisionError) as caught:
        store.allow_partial().apply_to(EnumTwin())
    error = caught.value
    assert (error.new, {error.first, error.second}) == (
        "feature.weight",
        {"feature.Foo.weight", "feature.Bar.weight"},
    )
    assert error.cause == "skipping enum variants"


def test_module_snapshot_mixin_collects_and_applies() -> None:
    torch.manual_seed(0)
    donor, target = EnumTwin(), EnumTwin()
    snapshots = donor.collect(PathFilter().with_regex("^classifier"))
    assert [s.full_path for s in snapshots] == ["classifier.weight", "classifier.bias"]
    assert snapshots[0].container == ("EnumTwin", "Linear")
    result = target.apply(snapshots)
    assert result.applied == ["classifier.weight", "classifier.bias"]
    assert torch.equal(target.classifier.weight, donor.classifier.weight)
    store = BurnpackStore.from_bytes()
    donor.save_into(store)
    assert EnumTwin().load_from(BurnpackStore.from_bytes(store.get_bytes())).is_success()


def test_mixin_keeps_torch_module_apply_for_functions() -> None:
    model = EnumTwin()
    visited: list[str] = []
    returned = model.apply(lambda module: visited.append(type(module).__name__))
    assert returned is model
    assert visited == ["Linear", "Linear", "EnumTwin"]
