"""Loading onto and saving from a GPU; skipped where torch sees no CUDA device."""

from __future__ import annotations

import pytest

from weightstore import BurnpackStore, SafetensorsStore, load_from, save_into

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 4))


def _saved() -> tuple[nn.Module, bytes]:
    torch.manual_seed(0)
    source = _model()
    store = BurnpackStore.from_bytes()
    save_into(source, store)
    return source, store.get_bytes()


def test_load_into_a_cuda_model_keeps_its_tensors_on_the_gpu() -> None:
    source, data = _saved()
    target = _model().cuda()
    pointers = [p.data_ptr() for p in target.parameters()]
    assert load_from(target, BurnpackStore.from_bytes(data)).is_success()
    assert all(p.is_cuda for p in target.parameters())
    assert [p.data_ptr() for p in target.parameters()] == pointers  # copied in place
    for key, value in source.state_dict().items():
        assert torch.equal(target.state_dict()[key].cpu(), value), key


def test_meta_model_materialises_on_the_requested_device() -> None:
    source, data = _saved()
    with torch.device("meta"):
        target = _model()
    load_from(target, BurnpackStore.from_bytes(data), device="cuda")
    assert all(t.is_cuda for t in target.state_dict().values())
    x = torch.randn(3, 8)
    assert torch.allclose(target(x.cuda()).cpu(), source(x), atol=1e-6)


def test_cpu_model_moved_to_the_given_device() -> None:
    _, data = _saved()
    target = _model()
    load_from(target, BurnpackStore.from_bytes(data), device="cuda:0")
    assert all(p.is_cuda for p in target.parameters())


def test_save_from_a_cuda_model() -> None:
    torch.manual_seed(1)
    source = _model().cuda()
    store = SafetensorsStore.from_bytes()
    save_into(source, store)
    target = _model()
    assert load_from(target, SafetensorsStore.from_bytes(store.get_bytes())).is_success()
    for key, value in source.state_dict().items():
        assert torch.equal(target.state_dict()[key], value.cpu()), key
