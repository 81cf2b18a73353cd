"""`weightstore convert --to-burn` on models transformers saves, with no ``--module-type``: tiny
random GPT-2 and BERT built by transformers itself (the oracle of their layouts), the Burn file
checked tensor by tensor against the torch modules they came from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.cli._support import read_weights
from weightstore.cli import main

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

_BURN_NORM_NAMES = {"weight": "gamma", "bias": "beta"}


def _saved(model: Any, folder: Path) -> dict[str, np.ndarray[Any, Any]]:
    """`model` saved as transformers does (SafeTensors and config.json in `folder`); its
    tensors by the names in the file."""
    model.save_pretrained(folder, safe_serialization=True)
    return read_weights(folder / "model.safetensors")


def _modules(model: Any) -> dict[str, str]:
    """Parameter name (as saved) -> the class name of the module that owns it."""
    return {
        f"{prefix}.{leaf}" if prefix else leaf: type(module).__name__
        for prefix, module in model.named_modules()
        for leaf, _ in module.named_parameters(recurse=False)
    }


def _convert(source: Path, destination: Path) -> dict[str, np.ndarray[Any, Any]]:
    assert main(["convert", str(source), str(destination), "--to-burn", "--quiet"]) == 0
    return read_weights(destination)


def _check_burn_layout(
    burn: dict[str, np.ndarray[Any, Any]],
    torch_arrays: dict[str, np.ndarray[Any, Any]],
    owners: dict[str, str],
) -> None:
    """Linear weights transposed, LayerNorm's renamed gamma/beta, the rest (Conv1D included)
    as they were."""
    for name, array in torch_arrays.items():
        owner = owners[name]
        prefix, _, leaf = name.rpartition(".")
        if owner == "LayerNorm":
            found = burn[f"{prefix}.{_BURN_NORM_NAMES[leaf]}"]
            np.testing.assert_array_equal(found, array, err_msg=name)
        elif owner == "Linear" and leaf == "weight":
            np.testing.assert_array_equal(burn[name], array.T, err_msg=name)
        else:
            np.testing.assert_array_equal(burn[name], array, err_msg=name)


def test_gpt2_converts_with_conv1d_untransposed(tmp_path: Path) -> None:
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=50, n_positions=16, bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config)
    arrays = _saved(model, tmp_path / "gpt2")
    burn = _convert(tmp_path / "gpt2", tmp_path / "gpt2.bpk")
    c_attn = "transformer.h.0.attn.c_attn.weight"
    assert arrays[c_attn].shape == (32, 96)
    np.testing.assert_array_equal(burn[c_attn], arrays[c_attn])  # [in, out]: Burn's already
    owners = _modules(model)
    assert owners[c_attn] == "Conv1D"
    _check_burn_layout(burn, arrays, owners)
    # the weights alone, no config.json beside them: their [in, out] layout tells
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "model.safetensors").write_bytes(
        (tmp_path / "gpt2" / "model.safetensors").read_bytes()
    )
    assert _convert(alone / "model.safetensors", tmp_path / "alone.bpk").keys() == burn.keys()
    np.testing.assert_array_equal(read_weights(tmp_path / "alone.bpk")[c_attn], arrays[c_attn])


def test_bert_converts_with_its_embeddings_and_linears_transposed(tmp_path: Path) -> None:
    config = transformers.BertConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=37,
        vocab_size=50, max_position_embeddings=16,
    )  # fmt: skip
    model = transformers.BertModel(config)
    arrays = _saved(model, tmp_path / "bert")
    burn = _convert(tmp_path / "bert", tmp_path / "bert.bpk")
    query = "encoder.layer.0.attention.self.query.weight"
    intermediate = "encoder.layer.0.intermediate.dense.weight"
    np.testing.assert_array_equal(
        burn[intermediate], arrays[intermediate].T
    )  # [37, 32] -> [32, 37]
    np.testing.assert_array_equal(burn[query], arrays[query].T)
    owners = _modules(model)
    assert owners["embeddings.word_embeddings.weight"] == "Embedding"
    _check_burn_layout(burn, arrays, owners)
