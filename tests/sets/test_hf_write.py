"""Sets weightstore writes load with the Hugging Face tools, tensor for tensor: huggingface_hub's
`load_torch_model` (and its own planner gives the same shards), and, in a slow test,
transformers' `from_pretrained`, with and without a variant."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from weightstore import SafetensorsStore, save_into

torch = pytest.importorskip("torch")
pytest.importorskip("huggingface_hub")


def _model(seed: int) -> Any:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.LayerNorm(64), torch.nn.Linear(64, 8)
    )


def _assert_same_state(loaded: Any, saved: Any) -> None:
    theirs, ours = loaded.state_dict(), saved.state_dict()
    assert theirs.keys() == ours.keys()
    for name, value in ours.items():
        assert torch.equal(theirs[name], value), name


@pytest.mark.parametrize("max_shard_size", ["3KB", "1MB"], ids=["sharded", "single-file"])
def test_our_set_loads_with_huggingface_hub(tmp_path: Path, max_shard_size: str) -> None:
    from huggingface_hub import load_torch_model

    saved = _model(0)
    save_into(saved, SafetensorsStore.from_file(tmp_path).with_max_shard_size(max_shard_size))
    sharded = (tmp_path / "model.safetensors.index.json").exists()
    assert sharded == (max_shard_size == "3KB")
    loaded = _model(1)
    load_torch_model(loaded, tmp_path, strict=True)
    _assert_same_state(loaded, saved)


def test_a_resaved_set_loads_with_huggingface_hub(tmp_path: Path) -> None:
    from huggingface_hub import load_torch_model

    store = SafetensorsStore.from_file(tmp_path).with_max_shard_size("3KB").overwrite()
    save_into(_model(0), store)
    saved = _model(2)
    save_into(saved, store)  # tagged shard names: the plain ones were the committed set's
    loaded = _model(1)
    load_torch_model(loaded, tmp_path, strict=True)
    _assert_same_state(loaded, saved)


def test_our_weight_map_is_the_one_huggingface_hub_writes(tmp_path: Path) -> None:
    from huggingface_hub import save_torch_state_dict

    model = _model(0)
    (tmp_path / "theirs").mkdir()
    save_torch_state_dict(model.state_dict(), tmp_path / "theirs", max_shard_size="3KB")
    save_into(model, SafetensorsStore.from_file(tmp_path / "ours").with_max_shard_size("3KB"))
    theirs = json.loads((tmp_path / "theirs" / "model.safetensors.index.json").read_text())
    ours = json.loads((tmp_path / "ours" / "model.safetensors.index.json").read_text())
    assert ours["weight_map"] == theirs["weight_map"]
    assert ours["metadata"]["total_size"] == theirs["metadata"]["total_size"]


@pytest.mark.slow  # imports transformers and builds two small models: a few seconds
@pytest.mark.parametrize("variant", [None, "fp16"])
@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_our_set_loads_with_transformers_from_pretrained(
    tmp_path: Path, family: str, variant: str | None
) -> None:
    transformers = pytest.importorskip("transformers")
    if family == "bert":
        config = transformers.BertConfig(
            vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=37, max_position_embeddings=64,
        )  # fmt: skip
        model_type = transformers.BertModel
    else:  # tied input and output embeddings
        config = transformers.GPT2Config(
            vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=0,
            eos_token_id=0,
        )  # fmt: skip
        model_type = transformers.GPT2LMHeadModel
    torch.manual_seed(0)
    saved = model_type(config).eval()
    config.save_pretrained(tmp_path)
    store = SafetensorsStore.from_file(tmp_path).with_max_shard_size("20KB")
    if variant is not None:
        store = store.with_variant(variant)
    save_into(saved, store)
    index = (
        "model.safetensors.index.json" if variant is None else "model.safetensors.index.fp16.json"
    )
    assert (tmp_path / index).exists()
    loaded = model_type.from_pretrained(tmp_path, variant=variant).eval()
    _assert_same_state(loaded, saved)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.equal(_output(loaded(ids)), _output(saved(ids)))


def _output(result: Any) -> Any:
    return result.logits if hasattr(result, "logits") else result.last_hidden_state
