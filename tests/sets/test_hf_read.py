"""Sets written by Hugging Face tools load through weightstore, tensor-identical: huggingface_hub's
``save_torch_state_dict`` (SafeTensors and ``.bin`` shards, variants) and, in a slow test,
transformers' ``save_pretrained``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from weightstore import PytorchStore, SafetensorsStore, Store, load_from
from weightstore.sets import open_set

torch = pytest.importorskip("torch")
hub = pytest.importorskip("huggingface_hub")


def _net() -> Any:
    """A small model whose state dict spans several 2 KB shards."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16), torch.nn.LayerNorm(16)
    )


def _save(directory: Path, **options: Any) -> dict[str, Any]:
    """`_net()`'s state dict saved by huggingface_hub into `directory`; returns the dict."""
    state = {k: v.clone() for k, v in _net().state_dict().items()}
    directory.mkdir(parents=True, exist_ok=True)
    hub.save_torch_state_dict(state, directory, max_shard_size="2KB", **options)
    return state


def _assert_same(model: Any, state: dict[str, Any]) -> None:
    loaded = model.state_dict()
    assert loaded.keys() == state.keys()
    for name, tensor in state.items():
        assert torch.equal(loaded[name], tensor), name


def _fresh() -> Any:
    model = _net()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
    return model


def test_a_safetensors_set_loads_into_torch_and_numpy(tmp_path: Path) -> None:
    state = _save(tmp_path)
    assert (tmp_path / "model.safetensors.index.json").exists()
    assert len(list(tmp_path.glob("model-*-of-*.safetensors"))) > 1
    model = _fresh()
    result = load_from(model, SafetensorsStore.from_file(tmp_path))
    assert not result.missing and not result.unused
    _assert_same(model, state)
    arrays = {name: np.zeros(tuple(t.shape), np.float32) for name, t in state.items()}
    nested: dict[str, Any] = {}
    for name, array in arrays.items():
        head, leaf = name.split(".")
        nested.setdefault(head, {})[leaf] = array
    load_from(nested, Store.from_file(tmp_path / "model.safetensors.index.json"))
    for name, tensor in state.items():
        head, leaf = name.split(".")
        np.testing.assert_array_equal(nested[head][leaf], tensor.numpy())


def test_the_index_metadata_is_the_stores(tmp_path: Path) -> None:
    _save(tmp_path, metadata={"origin": "hub"})
    metadata = SafetensorsStore.from_file(tmp_path).read_metadata()
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert metadata["total_size"] == str(index["metadata"]["total_size"])


def test_a_bin_set_loads_without_torch_load(tmp_path: Path) -> None:
    state = _save(tmp_path, safe_serialization=False)
    assert (tmp_path / "pytorch_model.bin.index.json").exists()
    for store in (PytorchStore.from_file(tmp_path), Store.from_file(tmp_path)):
        assert type(store) is PytorchStore
        model = _fresh()
        load_from(model, store)
        _assert_same(model, state)


def test_a_variant_written_with_a_filename_pattern_loads(tmp_path: Path) -> None:
    state = _save(tmp_path, filename_pattern="model.fp16{suffix}.safetensors")
    assert (tmp_path / "model.fp16.safetensors.index.json").exists()
    model = _fresh()
    load_from(model, SafetensorsStore.from_file(tmp_path))  # the only set there
    _assert_same(model, state)


def test_a_hand_written_variant_index_is_chosen_only_when_asked(tmp_path: Path) -> None:
    plain = _save(tmp_path)
    half = {k: (v * 2).to(torch.float16) for k, v in plain.items()}
    hub.save_torch_state_dict(
        half, tmp_path, max_shard_size="2KB", filename_pattern="model.fp16{suffix}.safetensors"
    )
    # transformers' spelling of the variant's index
    os.rename(
        tmp_path / "model.fp16.safetensors.index.json",
        tmp_path / "model.safetensors.index.fp16.json",
    )
    model = _fresh()
    load_from(model, SafetensorsStore.from_file(tmp_path))
    _assert_same(model, plain)
    with open_set(tmp_path, variant="fp16") as reader:
        for name, tensor in half.items():
            assert torch.equal(torch.from_numpy(reader.get(name).copy()), tensor)
    store = SafetensorsStore.from_file(tmp_path).with_variant("fp16")
    assert store.keys() == sorted(half)
    snapshot = store.get_tensor("0.weight")
    assert snapshot is not None and snapshot.dtype.name == "F16"


def test_a_hub_cache_snapshot_loads(tmp_path: Path) -> None:
    """The layout `hf_hub_download` leaves: every file a symlink into the repo's blobs."""
    state = _save(tmp_path / "made")
    repo = tmp_path / "hub" / "models--org--tiny"
    snapshot = repo / "snapshots" / "abc123"
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for number, file in enumerate(sorted((tmp_path / "made").iterdir())):
        blob = repo / "blobs" / f"{number:040x}"
        file.rename(blob)
        (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))
    model = _fresh()
    load_from(model, SafetensorsStore.from_file(snapshot))
    _assert_same(model, state)


@pytest.mark.slow
def test_a_transformers_save_pretrained_set_loads(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=16)
    torch.manual_seed(0)
    saved = transformers.GPT2LMHeadModel(config)
    saved.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    model = transformers.GPT2LMHeadModel(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
    result = SafetensorsStore.from_file(tmp_path).allow_partial().apply_to(model)
    assert not result.errors
    expected = saved.state_dict()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, expected[name]), name
