"""The torch load path's shortcuts give what the general path gives: grouped child views,
tensors straight from `torch.from_numpy`, and loads into built and meta models."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ml_dtypes = pytest.importorskip("ml_dtypes")

from weightstore import SafetensorsStore, load_from  # noqa: E402
from weightstore.bridge._state_view import LazyStateDict, Ledger, Unread  # noqa: E402
from weightstore.bridge._torch import _tensor_of, array_to_torch  # noqa: E402
from weightstore.dtypes import from_numpy  # noqa: E402


def _view(keys: list[str]) -> LazyStateDict:
    return LazyStateDict({key: Unread(lambda: np.zeros(1)) for key in keys}, Ledger(), id)


def test_children_grouped_in_one_pass_match_a_filter_per_child() -> None:
    keys = ["enc.w", "enc.0.w", "enc.0.b", "enc.1.w", "enc.10.w", "enc.norm.b", "dec.w"]
    parent = _view(keys).prefixed("enc.", id)
    parent["elsewhere.0.w"] = 1  # a hook may store a key outside the module's prefix
    groups = parent.by_child("enc.")
    assert sorted(groups) == ["0", "1", "10", "norm"]
    for child, view in groups.items():
        assert list(view) == list(parent.prefixed(f"enc.{child}.", id))
    assert list(parent.empty()) == []


ARRAYS = [
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.arange(6, dtype=np.float16),
    np.arange(5, dtype=np.int64),
    np.array([True, False]),
    np.array(3.5, dtype=np.float64),  # a scalar
    np.arange(4, dtype=np.float32).astype(ml_dtypes.bfloat16),
    np.arange(6, dtype=np.uint16),
    np.arange(12, dtype=np.float32).reshape(3, 4).T,  # not C-contiguous
]


@pytest.mark.parametrize("array", ARRAYS, ids=lambda a: f"{a.dtype}{list(a.shape)}")
@pytest.mark.parametrize("writeable", [True, False])
def test_tensors_from_arrays_keep_dtype_shape_and_bytes(array: Any, writeable: bool) -> None:
    array = array.copy(order="K") if array.flags.c_contiguous else array
    array.flags.writeable = writeable
    dtype = from_numpy(array.dtype)
    for tensor in (array_to_torch(array, dtype), _tensor_of(array)):
        assert tensor.dtype == getattr(torch, str(dtype.torch))
        assert tuple(tensor.shape) == array.shape
        assert tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() == (
            np.ascontiguousarray(array).tobytes()
        )


def _model() -> Any:
    return torch.nn.Sequential(
        torch.nn.Embedding(10, 4),
        torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.LayerNorm(6)),
        torch.nn.Linear(6, 2),
    )


def test_loads_into_built_and_meta_models_match_the_saved_state(tmp_path: Any) -> None:
    from safetensors.torch import save_file

    torch.manual_seed(0)
    source = _model()
    path = tmp_path / "m.safetensors"
    save_file(source.state_dict(), str(path))
    built = _model()
    with torch.device("meta"):
        meta = _model()
    for model in (built, meta):
        result = load_from(model, SafetensorsStore.from_file(path))
        assert result.is_success() and not result.missing
        for key, value in source.state_dict().items():
            loaded = model.state_dict()[key]
            assert not loaded.is_meta
            assert torch.equal(loaded, value), key


def test_remapped_store_renames_and_unchanged_names_keep_their_snapshots(tmp_path: Any) -> None:
    from safetensors.numpy import save_file

    path = tmp_path / "m.safetensors"
    save_file({"enc.w": np.ones(2, np.float32), "head": np.zeros(1, np.float32)}, str(path))
    store = SafetensorsStore.from_file(path)
    plain = store.get_all_snapshots()
    assert list(plain) == ["enc.w", "head"]
    renamed = store.with_key_remapping(r"^enc\.", "encoder.").get_all_snapshots()
    assert list(renamed) == ["encoder.w", "head"]
    assert renamed["encoder.w"].path == ("encoder", "w")
    np.testing.assert_array_equal(renamed["encoder.w"].to_numpy(), np.ones(2, np.float32))
