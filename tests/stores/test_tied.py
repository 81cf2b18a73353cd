"""Tied weights: a head tied to the input embedding is saved once by default (as transformers'
``save_pretrained`` and huggingface_hub save it), and a checkpoint that left it out loads into
a model whose head is a tensor of its own, filled from the embedding, when the ``config.json``
beside it says ``tie_word_embeddings`` or the store names the tie. transformers is the oracle
for both sides: its files, and its model's logits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests._optional import need

torch = need("torch")
transformers = need("transformers")
safetensors_torch = need("safetensors.torch")

from weightstore import BurnpackStore, SafetensorsStore  # noqa: E402
from weightstore.errors import InvalidOptionError, LoadFailedError  # noqa: E402

HEAD, EMBED = "lm_head.weight", "model.embed_tokens.weight"
_SIZES: dict[str, Any] = dict(
    vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
)  # fmt: skip


def _llama(tied: bool, seed: int = 0) -> Any:
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(**_SIZES, tie_word_embeddings=tied)
    return transformers.LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """transformers' own save of a tied Llama: no lm_head in the file, the tie in config.json."""
    folder = tmp_path_factory.mktemp("tied")
    _llama(tied=True).save_pretrained(folder)
    assert HEAD not in safetensors_torch.load_file(folder / "model.safetensors")
    return folder


def _logits(model: Any) -> Any:
    with torch.no_grad():
        return model(torch.arange(12).reshape(2, 6)).logits


def test_an_untied_model_loads_its_head_from_the_embedding_as_the_config_says(
    pretrained: Path,
) -> None:
    model = _llama(tied=False, seed=1)  # a head of its own, other values than the file's
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    result = SafetensorsStore.from_file(pretrained / "model.safetensors").apply_to(model)
    assert result.missing == [] and HEAD in result.applied, result
    assert result.tied == {HEAD: EMBED}
    assert (
        "Filled from a tied tensor:  1 tensor (lm_head.weight <- model.embed_tokens.weight)"
        in str(result)
    )
    oracle = transformers.LlamaForCausalLM.from_pretrained(pretrained).eval()
    assert torch.equal(model.lm_head.weight, oracle.lm_head.weight)
    assert torch.equal(_logits(model), _logits(oracle))


def test_a_numpy_model_gets_its_head_filled_too(pretrained: Path) -> None:
    state = safetensors_torch.load_file(pretrained / "model.safetensors")
    model = {name: np.zeros(tuple(t.shape), np.float32) for name, t in state.items()}
    model[HEAD] = np.zeros(tuple(state[EMBED].shape), np.float32)
    result = SafetensorsStore.from_file(pretrained / "model.safetensors").apply_to(model)
    assert result.missing == [] and result.tied == {HEAD: EMBED}
    assert np.array_equal(model[HEAD], state[EMBED].numpy())


def test_a_storage_tied_model_loads_through_its_own_tie(pretrained: Path) -> None:
    model = _llama(tied=True, seed=1)
    result = SafetensorsStore.from_file(pretrained / "model.safetensors").apply_to(model)
    assert result.missing == [] and result.tied == {}  # nothing to fill: the model ties it
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    oracle = transformers.LlamaForCausalLM.from_pretrained(pretrained).eval()
    assert torch.equal(_logits(model), _logits(oracle))


def _copy_without_config(pretrained: Path, folder: Path, config: dict[str, Any] | None) -> Path:
    folder.mkdir()
    (folder / "model.safetensors").write_bytes((pretrained / "model.safetensors").read_bytes())
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return folder / "model.safetensors"


@pytest.mark.parametrize(
    "config", [None, {"tie_word_embeddings": False}], ids=["no config", "untied config"]
)
def test_without_a_tie_the_head_is_missing_and_the_load_refused(
    pretrained: Path, tmp_path: Path, config: dict[str, Any] | None
) -> None:
    path = _copy_without_config(pretrained, tmp_path / "copy", config)
    model = _llama(tied=False, seed=1)
    before = model.lm_head.weight.clone()
    with pytest.raises(LoadFailedError, match=r"lm_head\.weight") as failed:
        SafetensorsStore.from_file(path).apply_to(model)
    assert [p for p, _ in failed.value.result.missing] == [HEAD]
    assert ".with_tied_weights({'lm_head.weight': 'model.embed_tokens.weight'})" in str(
        failed.value
    )
    assert torch.equal(model.lm_head.weight, before)  # refused before writing anything


def test_the_config_s_default_is_tied(pretrained: Path, tmp_path: Path) -> None:
    path = _copy_without_config(pretrained, tmp_path / "copy", {"model_type": "llama"})
    result = SafetensorsStore.from_file(path).apply_to(_llama(tied=False, seed=1))
    assert result.tied == {HEAD: EMBED}  # transformers' PretrainedConfig default: true


def test_ties_named_by_the_store_serve_any_source_and_empty_ties_turn_the_config_off(
    pretrained: Path,
) -> None:
    data = (pretrained / "model.safetensors").read_bytes()
    model = _llama(tied=False, seed=1)
    result = SafetensorsStore.from_bytes(data).with_tied_weights({HEAD: EMBED}).apply_to(model)
    assert result.tied == {HEAD: EMBED}
    assert torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
    store = SafetensorsStore.from_file(pretrained / "model.safetensors").with_tied_weights({})
    with pytest.raises(LoadFailedError, match=r"lm_head\.weight"):
        store.apply_to(_llama(tied=False, seed=1))
    with pytest.raises(InvalidOptionError, match="str"):
        SafetensorsStore.from_bytes(data).with_tied_weights({HEAD: 3})  # type: ignore[dict-item]


def test_a_tie_to_a_tensor_the_source_lacks_leaves_the_head_missing(pretrained: Path) -> None:
    store = SafetensorsStore.from_file(pretrained / "model.safetensors").with_tied_weights(
        {HEAD: "model.no_such.weight"}
    )
    result = store.allow_partial().apply_to(_llama(tied=False, seed=1))
    assert [p for p, _ in result.missing] == [HEAD] and result.tied == {}


def test_a_tied_model_saves_its_head_once_as_transformers_does(
    pretrained: Path, tmp_path: Path
) -> None:
    model = _llama(tied=True)
    path = SafetensorsStore.from_file(tmp_path / "model.safetensors").collect_from(model)
    ours = safetensors_torch.load_file(str(path))
    theirs = safetensors_torch.load_file(pretrained / "model.safetensors")
    assert sorted(ours) == sorted(theirs)  # lm_head left out, the embedding kept
    for name, tensor in theirs.items():
        assert torch.equal(ours[name], tensor), name
    (tmp_path / "config.json").write_text((pretrained / "config.json").read_text())
    again = transformers.LlamaForCausalLM.from_pretrained(tmp_path).eval()
    assert torch.equal(_logits(again), _logits(model))  # transformers reads our file back


def test_dedupe_off_writes_every_name_and_burnpack_keeps_both_by_default(tmp_path: Path) -> None:
    model = _llama(tied=True)
    path = SafetensorsStore.from_file(tmp_path / "both.safetensors").dedupe_tied(False)
    both = safetensors_torch.load_file(str(path.collect_from(model)))
    assert HEAD in both and torch.equal(both[HEAD], both[EMBED])
    store = BurnpackStore.from_file(tmp_path / "model")  # Burn ties nothing: both are saved
    store.collect_from(model)
    assert {HEAD, EMBED} <= set(BurnpackStore.from_file(tmp_path / "model").keys())
