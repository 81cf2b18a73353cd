"""Burn's own files through torch twins of Burn's models, and back, byte for byte."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from tests.burnpack.test_reader import MNIST_SHA256, MNIST_TENSORS  # noqa: E402
from tests.conftest import burn_fixture  # noqa: E402
from weightstore import (  # noqa: E402
    BurnpackReader,
    BurnpackStore,
    PathFilter,
    SafetensorsStore,
    load_from,
    save_into,
)
from weightstore.adapters import (  # noqa: E402
    BurnToPyTorchAdapter,
    HalfPrecisionAdapter,
    PyTorchToBurnAdapter,
)
from weightstore.record import ModuleRecord, into_record  # noqa: E402

NO_BATCH_COUNT = PathFilter().with_predicate(lambda p, c: not p.endswith("num_batches_tracked"))


class ConvBlock(nn.Module):
    """Burn's mnist-inference-web block: valid 3x3 conv, batch norm, ReLU, 2x2 max pool."""

    def __init__(self, channels_in: int, channels_out: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels_in, channels_out, 3)
        self.norm = nn.BatchNorm2d(channels_out)
        self.pool = nn.MaxPool2d(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.norm(self.conv(x))))


class BurnWebMnist(nn.Module):
    """The torch twin of Burn's examples/mnist-inference-web model: two conv blocks (conv, batch
    norm, pool) and three Linear layers, 18 tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = ConvBlock(1, 64)  # 28 -> 26 -> 13
        self.conv2 = ConvBlock(64, 64)  # 13 -> 11 -> 5
        self.dropout = nn.Dropout(0.25)
        self.fc1 = nn.Linear(64 * 5 * 5, 128)
        self.fc2 = nn.Linear(128, 128)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv2(self.conv1(x)).flatten(1)
        x = self.dropout(nn.functional.gelu(self.fc1(x)))
        x = self.dropout(nn.functional.gelu(self.fc2(x)))
        return torch.log_softmax(self.fc3(x), dim=1)


def _loaded_web_mnist() -> tuple[nn.Module, object]:
    path = burn_fixture("mnist-inference-web/model.bpk")
    model = BurnWebMnist().eval()
    store = BurnpackStore.from_file(path).with_from_adapter(BurnToPyTorchAdapter())
    result = load_from(model, store.filter(NO_BATCH_COUNT))
    return model, result


def test_burn_file_loads_into_its_torch_twin() -> None:
    model, result = _loaded_web_mnist()
    assert len(result.applied) == 18 and not result.missing and not result.unused  # type: ignore[attr-defined]
    assert not result.errors  # type: ignore[attr-defined]
    state = model.state_dict()
    burn_to_torch = {"gamma": "weight", "beta": "bias"}
    for name, shape, _, _, total in MNIST_TENSORS:
        head, _, last = name.rpartition(".")
        tensor = state[f"{head}.{burn_to_torch.get(last, last)}"]
        expected_shape = shape[::-1] if name.startswith("fc") and len(shape) == 2 else shape
        assert tuple(tensor.shape) == expected_shape, name
        assert float(tensor.double().sum()) == pytest.approx(total, abs=1e-5), name
    with torch.no_grad():
        log_probs = model(torch.randn(1, 1, 28, 28, generator=torch.Generator().manual_seed(0)))
    assert log_probs.shape == (1, 10) and torch.isfinite(log_probs).all()
    assert float(log_probs.exp().sum()) == pytest.approx(1.0, abs=1e-5)


def test_torch_twin_saves_back_byte_identical(tmp_path: Path) -> None:
    model, _ = _loaded_web_mnist()
    original = burn_fixture("mnist-inference-web/model.bpk")
    record = into_record(model, NO_BATCH_COUNT, PyTorchToBurnAdapter())
    again = ModuleRecord.from_bytes(record.into_bytes())
    with BurnpackReader.from_file(original) as pack:
        for snapshot in again.snapshots:
            descriptor = pack.descriptor(snapshot.full_path)
            assert snapshot.param_id == descriptor.param_id
            assert snapshot.to_numpy().tobytes() == bytes(pack.get_bytes(snapshot.full_path))
        assert len(again) == len(pack)
    assert hashlib.sha256(record.into_bytes()).hexdigest() == MNIST_SHA256
    store = (
        BurnpackStore.from_file(tmp_path / "again")
        .clear_metadata()
        .filter(NO_BATCH_COUNT)
        .with_to_adapter(PyTorchToBurnAdapter())
    )
    save_into(model, store)
    assert hashlib.sha256((tmp_path / "again.bpk").read_bytes()).hexdigest() == MNIST_SHA256


class ImportMnist(nn.Module):
    """The torch twin of the model in Burn's examples/import-model-weights (three convs, a batch
    norm, two Linear layers and a batch norm over the logits)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3)
        self.conv2 = nn.Conv2d(8, 16, 3)
        self.conv3 = nn.Conv2d(16, 24, 3)
        self.norm1 = nn.BatchNorm2d(24)
        self.dropout = nn.Dropout(0.3)
        self.fc1 = nn.Linear(11616, 32)
        self.fc2 = nn.Linear(32, 10)
        self.norm2 = nn.BatchNorm1d(10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        x = self.norm1(torch.relu(self.conv3(x)))
        x = self.fc2(torch.relu(self.fc1(self.dropout(x.flatten(1)))))
        return torch.log_softmax(self.norm2(x), dim=1)


@pytest.mark.parametrize("source", ["mnist.safetensors", "mnist.pt"])
def test_import_model_weights_convert_to_burn_layout(source: str, tmp_path: Path) -> None:
    path = burn_fixture(f"import-model-weights/{source}")
    model = ImportMnist().eval()
    if source.endswith(".pt"):
        from weightstore import PytorchStore

        result = load_from(model, PytorchStore.from_file(path))
    else:
        result = load_from(model, SafetensorsStore.from_file(path))
    assert not result.missing and not result.unused and not result.errors
    x = torch.randn(2, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.isfinite(model(x)).all()
    save_into(
        model, BurnpackStore.from_file(tmp_path / "mnist").with_to_adapter(PyTorchToBurnAdapter())
    )
    with BurnpackReader.from_file(tmp_path / "mnist.bpk") as pack:
        assert pack.descriptor("fc1.weight").shape == (11616, 32)  # [d_in, d_out]
        assert pack.descriptor("fc2.weight").shape == (32, 10)
        assert {"norm1.gamma", "norm1.beta", "norm2.gamma", "norm2.beta"} <= set(pack.names())
        assert "norm1.weight" not in pack.names()
        np.testing.assert_array_equal(pack.get("fc2.weight"), model.fc2.weight.detach().numpy().T)


class HalfModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3)
        self.norm = nn.BatchNorm2d(16)
        self.fc = nn.Linear(256, 128)


def test_half_precision_halves_the_file_and_keeps_batch_norm(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = HalfModel()
    save_into(model, BurnpackStore.from_file(tmp_path / "full"))
    half_store = BurnpackStore.from_file(tmp_path / "half").with_to_adapter(HalfPrecisionAdapter())
    save_into(model, half_store)
    full_size = (tmp_path / "full.bpk").stat().st_size
    half_size = (tmp_path / "half.bpk").stat().st_size
    assert 0.45 < half_size / full_size < 0.55
    with BurnpackReader.from_file(tmp_path / "half.bpk") as pack:
        assert pack.descriptor("fc.weight").dtype.name == "F16"
        assert pack.descriptor("norm.running_var").dtype.name == "F32"
    target = HalfModel()
    store = BurnpackStore.from_file(tmp_path / "half").with_from_adapter(HalfPrecisionAdapter())
    assert load_from(target, store).is_success()
    for name, tensor in model.state_dict().items():
        loaded = target.state_dict()[name]
        if name.startswith("norm"):
            assert torch.equal(loaded, tensor)
        else:
            assert torch.equal(loaded, tensor.half().float()), name
