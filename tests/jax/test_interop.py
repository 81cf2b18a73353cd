"""Weights saved with one framework load in another: torch <-> Flax NNX and Linen, Burn -> Flax.

Each direction is judged by what the model computes: the twins in `_models.py` are the same
network, so loaded weights must give the same outputs (within 1e-6).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")
torch = pytest.importorskip("torch")

from flax import nnx  # noqa: E402

from tests.jax import _models  # noqa: E402
from weightstore import (  # noqa: E402
    BurnpackReader,
    BurnpackStore,
    PathFilter,
    SafetensorsStore,
    Store,
    load_from,
    save_into,
)
from weightstore.adapters import (  # noqa: E402
    BurnToFlaxAdapter,
    FlaxToBurnAdapter,
    FlaxToPyTorchAdapter,
    PyTorchToFlaxAdapter,
)
from weightstore.bridge import load_tree  # noqa: E402

KINDS = ["mlp", "cnn"]
STORES: dict[str, type[Store]] = {"bpk": BurnpackStore, "safetensors": SafetensorsStore}
NO_BATCH_COUNT = PathFilter().with_predicate(lambda p, c: not p.endswith("num_batches_tracked"))

# torch names -> Linen's collections, and back (docs/jax.md shows these rules).
INTO_LINEN = (
    (r"^(.*\.(?:running_mean|running_var|num_batches_tracked))$", "batch_stats.$1"),
    (r"^(?!batch_stats\.)", "params."),
)
OUT_OF_LINEN = ((r"^(?:params|batch_stats)\.", ""),)


def _store(format_name: str, path: Path, rules: tuple[tuple[str, str], ...] = ()) -> Any:
    store = STORES[format_name].from_file(path / f"model.{format_name}")
    for pattern, replacement in rules:
        store = store.with_key_remapping(pattern, replacement)
    return store


def _close(found: Any, expected: Any) -> None:
    np.testing.assert_allclose(np.asarray(found), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("format_name", sorted(STORES))
@pytest.mark.parametrize("kind", KINDS)
def test_torch_weights_load_into_the_nnx_twin(kind: str, format_name: str, tmp_path: Path) -> None:
    source = _models.torch_model(kind)
    save_into(source, _store(format_name, tmp_path))
    model = _models.nnx_model(kind)
    result = load_from(
        model, _store(format_name, tmp_path).with_from_adapter(PyTorchToFlaxAdapter())
    )
    assert not result.missing and not result.errors
    assert result.unused == (["bn1.num_batches_tracked"] if kind == "cnn" else [])
    _close(model(_models.flax_input(kind)), _models.torch_output(source, kind))


@pytest.mark.parametrize("format_name", sorted(STORES))
@pytest.mark.parametrize("kind", KINDS)
def test_torch_weights_load_into_the_linen_twin(
    kind: str, format_name: str, tmp_path: Path
) -> None:
    source = _models.torch_model(kind)
    save_into(source, _store(format_name, tmp_path))
    store = _store(format_name, tmp_path, INTO_LINEN).with_from_adapter(PyTorchToFlaxAdapter())
    variables, result = load_tree(_models.linen_variables(kind, seed=None), store)
    assert not result.missing and not result.errors
    if kind == "cnn":
        assert result.applied[:2] == ["batch_stats.bn1.mean", "batch_stats.bn1.var"]
    output = _models.linen_model(kind).apply(variables, _models.flax_input(kind))
    _close(output, _models.torch_output(source, kind))


@pytest.mark.parametrize("format_name", sorted(STORES))
@pytest.mark.parametrize("kind", KINDS)
def test_nnx_weights_load_into_the_torch_twin(kind: str, format_name: str, tmp_path: Path) -> None:
    source = _models.nnx_model(kind, seed=3)
    save_into(source, _store(format_name, tmp_path))
    model = _models.torch_model(kind)
    result = load_from(
        model, _store(format_name, tmp_path).with_from_adapter(FlaxToPyTorchAdapter())
    )
    assert not result.missing and not result.unused and not result.errors
    _close(source(_models.flax_input(kind)), _models.torch_output(model, kind))


@pytest.mark.parametrize("kind", KINDS)
def test_linen_weights_load_into_the_torch_twin(kind: str, tmp_path: Path) -> None:
    variables = _models.linen_variables(kind)
    save_into(variables, _store("safetensors", tmp_path))
    model = _models.torch_model(kind)
    store = _store("safetensors", tmp_path, OUT_OF_LINEN)
    result = load_from(model, store.with_from_adapter(FlaxToPyTorchAdapter()))
    assert not result.missing and not result.unused and not result.errors
    expected = _models.linen_model(kind).apply(variables, _models.flax_input(kind))
    _close(expected, _models.torch_output(model, kind))


def test_a_torch_model_saved_for_flax_loads_without_an_adapter(tmp_path: Path) -> None:
    source = _models.torch_model("cnn")
    store = _store("bpk", tmp_path).filter(NO_BATCH_COUNT)
    save_into(source, store.with_to_adapter(PyTorchToFlaxAdapter()))
    with BurnpackReader.from_file(tmp_path / "model.bpk") as pack:
        assert pack.descriptor("conv1.kernel").shape == (3, 3, 3, 8)  # [kh, kw, I, O]
        assert pack.descriptor("fc.kernel").shape == (64, 5)  # [in, out]
        assert {"bn1.scale", "bn1.mean", "bn1.var"} <= set(pack.names())
        assert "bn1.num_batches_tracked" not in pack.names()
    model = _models.nnx_model("cnn")
    result = load_from(model, _store("bpk", tmp_path))
    assert result.is_success() and not result.unused
    _close(model(_models.flax_input("cnn")), _models.torch_output(source, "cnn"))


def test_an_nnx_model_saved_for_torch_loads_without_an_adapter(tmp_path: Path) -> None:
    source = _models.nnx_model("mlp", seed=4)
    save_into(source, _store("safetensors", tmp_path).with_to_adapter(FlaxToPyTorchAdapter()))
    model = _models.torch_model("mlp")
    assert set(SafetensorsStore.from_file(tmp_path / "model.safetensors").keys()) == set(
        model.state_dict()
    )
    result = load_from(model, _store("safetensors", tmp_path))
    assert result.is_success() and not result.unused
    _close(source(_models.flax_input("mlp")), _models.torch_output(model, "mlp"))


# -- Burn's own MNIST file into a Flax twin --------------------------------------------------


class NnxBurnWebMnist(nnx.Module):
    """The Flax twin of Burn's examples/mnist-inference-web model (`BurnWebMnist` in
    tests/adapters/test_burn_interop.py is the torch one)."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.conv1 = _NnxConvBlock(1, 64, rngs)
        self.conv2 = _NnxConvBlock(64, 64, rngs)
        self.fc1 = nnx.Linear(64 * 5 * 5, 128, rngs=rngs)
        self.fc2 = nnx.Linear(128, 128, rngs=rngs)
        self.fc3 = nnx.Linear(128, 10, rngs=rngs)

    def __call__(self, images: Any) -> Any:  # NHWC
        x = _models.channels_first_flat(self.conv2(self.conv1(images)))
        x = nnx.gelu(self.fc2(nnx.gelu(self.fc1(x), approximate=False)), approximate=False)
        return nnx.log_softmax(self.fc3(x), axis=1)


class _NnxConvBlock(nnx.Module):
    def __init__(self, channels_in: int, channels_out: int, rngs: nnx.Rngs) -> None:
        self.conv = nnx.Conv(channels_in, channels_out, (3, 3), padding="VALID", rngs=rngs)
        self.norm = nnx.BatchNorm(channels_out, use_running_average=True, rngs=rngs)

    def __call__(self, x: Any) -> Any:
        x = nnx.relu(self.norm(self.conv(x)))
        return nnx.max_pool(x, (2, 2), strides=(2, 2))


def test_burns_mnist_file_loads_into_a_flax_twin_and_saves_back(tmp_path: Path) -> None:
    from tests.adapters.test_burn_interop import _loaded_web_mnist
    from tests.conftest import burn_fixture

    path = burn_fixture("mnist-inference-web/model.bpk")
    model = nnx.eval_shape(lambda: NnxBurnWebMnist(nnx.Rngs(0)))  # abstract: no init cost
    result = load_from(model, BurnpackStore.from_file(path).with_from_adapter(BurnToFlaxAdapter()))
    assert len(result.applied) == 18 and not result.missing and not result.unused
    assert not result.errors
    twin, _ = _loaded_web_mnist()  # the torch twin, loaded from the same file
    images = np.random.default_rng(0).standard_normal((2, 1, 28, 28)).astype(np.float32)
    with torch.no_grad():
        expected = twin(torch.from_numpy(images)).numpy()
    found = np.asarray(model(images.transpose(0, 2, 3, 1)))
    np.testing.assert_allclose(found, expected, rtol=1e-5, atol=1e-5)  # 1,600-wide sums

    save_into(
        model, BurnpackStore.from_file(tmp_path / "again").with_to_adapter(FlaxToBurnAdapter())
    )
    with (
        BurnpackReader.from_file(path) as burn,
        BurnpackReader.from_file(tmp_path / "again.bpk") as ours,
    ):
        assert sorted(ours.names()) == sorted(burn.names())
        for name in burn.names():  # Burn's own layout and names, tensor for tensor
            assert bytes(ours.get_bytes(name)) == bytes(burn.get_bytes(name)), name
