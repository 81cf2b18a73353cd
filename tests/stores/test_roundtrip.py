"""Real torch models and NumPy dicts through every store: identical outputs after loading."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from tests.stores.models import Cnn, Mlp, TinyTransformer, inputs_for, sequential  # noqa: E402
from weightstore import BurnpackStore, PytorchStore, SafetensorsStore  # noqa: E402
from weightstore.module_snapshot import load_from, save_into  # noqa: E402

MODELS: dict[str, Callable[[], nn.Module]] = {
    "mlp": Mlp, "cnn": Cnn, "transformer": TinyTransformer, "sequential": sequential,
}  # fmt: skip


def _trained(factory: Callable[[], nn.Module]) -> nn.Module:
    torch.manual_seed(1)
    model = factory()
    if isinstance(model, Cnn):  # give batch norm non-default running stats
        model.train()
        model(inputs_for(model))
    return model.eval()


def _fresh(factory: Callable[[], nn.Module]) -> nn.Module:
    torch.manual_seed(99)
    return factory().eval()


def _outputs(model: nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(inputs_for(model))


def _assert_same_state(a: nn.Module, b: nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("kind", ["burnpack-file", "burnpack-bytes", "safetensors-file",
                                  "safetensors-bytes", "pytorch-file"])  # fmt: skip
def test_models_round_trip_through_every_store(name: str, kind: str, tmp_path: Path) -> None:
    source, target = _trained(MODELS[name]), _fresh(MODELS[name])
    assert not torch.equal(_outputs(source), _outputs(target))
    if kind == "burnpack-file":
        save_into(source, BurnpackStore.from_file(tmp_path / "m"))
        store = BurnpackStore.from_file(tmp_path / "m")
    elif kind == "burnpack-bytes":
        saved = BurnpackStore.from_bytes()
        save_into(source, saved)
        store = BurnpackStore.from_bytes(saved.get_bytes())
    elif kind == "safetensors-file":
        save_into(source, SafetensorsStore.from_file(tmp_path / "m.safetensors"))
        store = SafetensorsStore.from_file(tmp_path / "m.safetensors")
    elif kind == "safetensors-bytes":
        saved = SafetensorsStore.from_bytes()
        save_into(source, saved)
        store = SafetensorsStore.from_bytes(saved.get_bytes())
    else:
        torch.save(source.state_dict(), tmp_path / "m.pt")
        store = PytorchStore.from_file(tmp_path / "m.pt")
    result = load_from(target, store)
    assert result.is_success() and not result.missing and not result.unused
    assert result.applied == list(target.state_dict())
    assert torch.equal(_outputs(source), _outputs(target))
    _assert_same_state(source, target)


def test_loading_keeps_parameter_objects_and_requires_grad(tmp_path: Path) -> None:
    source, target = _trained(Mlp), _fresh(Mlp)
    target.fc1.weight.requires_grad_(False)
    before = {name: p.data_ptr() for name, p in target.named_parameters()}
    save_into(source, BurnpackStore.from_file(tmp_path / "m"))
    with torch.no_grad():
        load_from(target, BurnpackStore.from_file(tmp_path / "m"))
    assert {name: p.data_ptr() for name, p in target.named_parameters()} == before
    assert not target.fc1.weight.requires_grad and target.fc2.weight.requires_grad
    _assert_same_state(source, target)


def test_tied_weights_stay_tied_and_dedupe_saves_once(tmp_path: Path) -> None:
    source = _trained(TinyTransformer)
    store = BurnpackStore.from_file(tmp_path / "tied").dedupe_tied()
    save_into(source, store)
    keys = BurnpackStore.from_file(tmp_path / "tied").keys()
    assert "embed.weight" in keys and "head.weight" not in keys
    target = _fresh(TinyTransformer)
    result = load_from(target, BurnpackStore.from_file(tmp_path / "tied"))
    assert "head.weight" in result.applied and not result.missing
    assert target.head.weight is target.embed.weight
    assert torch.equal(_outputs(source), _outputs(target))


def test_meta_device_model_is_materialised_from_the_file(tmp_path: Path) -> None:
    source = _trained(Cnn)
    save_into(source, BurnpackStore.from_file(tmp_path / "cnn"))
    with torch.device("meta"):
        target = Cnn()
    assert target.fc.weight.is_meta
    result = load_from(target, BurnpackStore.from_file(tmp_path / "cnn"))
    assert result.is_success()
    assert not any(t.is_meta for t in target.state_dict().values())
    assert isinstance(target.fc.weight, nn.Parameter) and target.fc.weight.requires_grad
    target.eval()
    assert torch.equal(_outputs(source), _outputs(target))


def test_meta_tied_weights_materialise_once(tmp_path: Path) -> None:
    source = _trained(TinyTransformer)
    save_into(source, SafetensorsStore.from_file(tmp_path / "t.safetensors"))
    with torch.device("meta"):
        target = TinyTransformer()
    load_from(target, SafetensorsStore.from_file(tmp_path / "t.safetensors"))
    assert target.head.weight is target.embed.weight
    assert torch.equal(_outputs(source), _outputs(target.eval()))


def test_numpy_dict_model_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    source = {
        "encoder": {
            "weight": rng.standard_normal((4, 3)).astype(np.float32),
            "bias": rng.standard_normal(4).astype(np.float32),
        },
        "steps": np.array(12, np.int64),
        "mask": np.array([True, False]),
    }
    target = {
        "encoder": {"weight": np.zeros((4, 3), np.float32), "bias": np.zeros(4, np.float32)},
        "steps": np.array(0, np.int64),
        "mask": np.array([False, False]),
    }
    weight_ref = target["encoder"]["weight"]
    for store_type, path in ((BurnpackStore, "d.bpk"), (SafetensorsStore, "d.safetensors")):
        save_into(source, store_type.from_file(tmp_path / path))
        result = load_from(target, store_type.from_file(tmp_path / path))
        assert sorted(result.applied) == ["encoder.bias", "encoder.weight", "mask", "steps"]
        np.testing.assert_array_equal(weight_ref, source["encoder"]["weight"])  # in place
        assert int(target["steps"]) == 12 and target["mask"].tolist() == [True, False]
