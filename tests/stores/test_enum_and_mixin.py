"""Burn enum-variant paths against torch models, and the ModuleSnapshot mixin."""

from __future__ import annotations

import numpy as np
import pytest

from weightstore import BurnpackStore, ModuleSnapshot, PathFilter, burnpack
from weightstore.adapters import BurnToPyTorchAdapter
from weightstore.entry import TensorEntry
from weightstore.transfer import strip_enum_variant_segments

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


@pytest.mark.parametrize(
    ("path", "stripped"),
    [("feature.BaseConv.weight", "feature.weight"), ("a.B.c", "a.B.c"),
     ("Top.x.weight", "Top.x.weight"), ("blocks.0.DwsConv.pconv.bias", "blocks.0.pconv.bias")],
)  # fmt: skip
def test_strip_enum_variant_segments(path: str, stripped: str) -> None:
    assert strip_enum_variant_segments(path) == stripped


def test_enum_variant_paths_load_with_skip_enum_variants() -> None:
    data = _burn_file_with_variant()
    store = BurnpackStore.from_bytes(data).with_from_adapter(BurnToPyTorchAdapter())
    model = EnumTwin()
    result = model.load_from(store.allow_partial())
    assert sorted(p for p, _ in result.missing) == ["feature.bias", "feature.weight"]
    assert result.unused == ["feature.BaseConv.bias", "feature.BaseConv.weight"]
    result = model.load_from(store.skip_enum_variants())
    assert result.is_success() and not result.missing and not result.unused


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
