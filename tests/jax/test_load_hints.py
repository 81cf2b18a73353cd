"""A torch checkpoint loaded into a Flax model without the adapter (issue 23).

Only the biases match by name, and the hint used to be ``.allow_partial(True)``, which loads
them and leaves every kernel at its initial values. The hint names the adapter (and the key
remapping Linen's collections need too), and following it loads the whole model.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("torch")

from tests.jax import _models
from weightstore import LoadFailedError, SafetensorsStore, load_from, save_into
from weightstore.adapters import PyTorchToFlaxAdapter
from weightstore.bridge import load_tree

ADAPTER = ".with_from_adapter(PyTorchToFlaxAdapter())"


def _torch_file(kind: str, tmp_path: Path) -> SafetensorsStore:
    path = tmp_path / f"{kind}.safetensors"
    save_into(_models.torch_model(kind), SafetensorsStore.from_file(path))
    return SafetensorsStore.from_file(path)


@pytest.mark.parametrize("kind", ["mlp", "cnn"])  # Dense, LayerNorm, Embed; Conv, BatchNorm
def test_a_torch_file_for_an_nnx_model_names_the_adapter(kind: str, tmp_path: Path) -> None:
    store = _torch_file(kind, tmp_path)
    with pytest.raises(LoadFailedError) as caught:
        load_from(_models.nnx_model(kind), store)
    error = caught.value
    assert error.failure == "missing" and error.result.held_back  # the biases matched
    assert error.fix.endswith(f"load with {ADAPTER}")
    assert "in the source under PyTorch's names" in error.fix
    assert "allow_partial" not in str(error)  # the message and the summary
    assert f"💡 Fix: add {ADAPTER} to the store" in str(error.result)
    result = load_from(_models.nnx_model(kind), store.with_from_adapter(PyTorchToFlaxAdapter()))
    assert result.is_success() and not result.missing and not result.errors


def test_a_torch_file_for_a_linen_model_names_the_adapter_and_the_collection(
    tmp_path: Path,
) -> None:
    store = _torch_file("mlp", tmp_path)
    with pytest.raises(LoadFailedError) as caught:
        load_tree(_models.linen_variables("mlp", seed=None), store)
    remapping = '.with_key_remapping("^(.*)$", "params.$1")'
    assert f"load with {ADAPTER}{remapping}" in caught.value.fix
    assert "allow_partial" not in str(caught.value)
    fixed = store.with_from_adapter(PyTorchToFlaxAdapter()).with_key_remapping(
        "^(.*)$", "params.$1"
    )
    _, result = load_tree(_models.linen_variables("mlp", seed=None), fixed)
    assert result.is_success() and not result.missing and not result.unused
