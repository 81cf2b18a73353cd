"""Hugging Face models typed by name (`weightstore.adapters._known_models`): GPT-2's Conv1D
layers, embeddings and heads, with and without the ``config.json`` beside the weights. Names and
shapes only: no transformers needed (tests/cli/test_convert_hf.py checks against it)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from weightstore import BurnpackStore, SafetensorsStore, TensorSnapshot, save_into
from weightstore.adapters import (
    HalfPrecisionAdapter,
    ModelConfig,
    PyTorchToBurnAdapter,
    assign_module_types,
    infer_module_types,
)
from weightstore.adapters._known_models import MAX_MODEL_CONFIG_SIZE
from weightstore.burnpack import BurnpackReader
from weightstore.cli import main
from weightstore.entry import TensorEntry
from weightstore.errors import ModuleTypeNeededError
from weightstore.safetensors import write_file

# One GPT-2 block as transformers saves it (n_embd=8): Conv1D weights are [in, out].
GPT2: dict[str, tuple[int, ...]] = {
    "transformer.wte.weight": (50, 8), "transformer.wpe.weight": (16, 8),
    "transformer.h.0.ln_1.weight": (8,), "transformer.h.0.ln_1.bias": (8,),
    "transformer.h.0.attn.c_attn.weight": (8, 24), "transformer.h.0.attn.c_attn.bias": (24,),
    "transformer.h.0.attn.c_proj.weight": (8, 8), "transformer.h.0.attn.c_proj.bias": (8,),
    "transformer.h.0.mlp.c_fc.weight": (8, 32), "transformer.h.0.mlp.c_fc.bias": (32,),
    "transformer.h.0.mlp.c_proj.weight": (32, 8), "transformer.h.0.mlp.c_proj.bias": (8,),
    "transformer.ln_f.weight": (8,), "transformer.ln_f.bias": (8,),
}  # fmt: skip
BERT_EMBEDDINGS: dict[str, tuple[int, ...]] = {
    "embeddings.word_embeddings.weight": (50, 8),
    "embeddings.position_embeddings.weight": (16, 8),
    "embeddings.token_type_embeddings.weight": (2, 8),
    "embeddings.LayerNorm.weight": (8,), "embeddings.LayerNorm.bias": (8,),
    "encoder.layer.0.attention.self.query.weight": (8, 8),
    "encoder.layer.0.attention.self.query.bias": (8,),
}  # fmt: skip
GPT2_CONFIG = ModelConfig(("GPT2LMHeadModel",), "gpt2")


def _types(shapes: dict[str, tuple[int, ...]], **options: object) -> dict[str, tuple[str, ...]]:
    guesses = infer_module_types(shapes, "torch", **options)  # type: ignore[arg-type]
    return {name: guess.candidates for name, guess in guesses.items()}


def test_gpt2_layers_are_conv1d_and_its_embeddings_embeddings_by_name_alone() -> None:
    types = _types(GPT2)
    for layer in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):  # the square too
        assert types[f"transformer.h.0.{layer}.weight"] == ("Conv1D",), layer
    assert types["transformer.wte.weight"] == types["transformer.wpe.weight"] == ("Embedding",)
    assert types["transformer.ln_f.weight"] == ("LayerNorm",)
    assert not any(guess.misfit for guess in infer_module_types(GPT2, "torch").values())


def test_bert_embeddings_are_embeddings_and_its_linears_linears() -> None:
    types = _types(BERT_EMBEDDINGS)
    assert {types[name] for name in BERT_EMBEDDINGS if "_embeddings" in name} == {("Embedding",)}
    assert types["encoder.layer.0.attention.self.query.weight"] == ("Linear",)
    assert types["embeddings.LayerNorm.weight"] == ("LayerNorm",)


def test_a_square_c_proj_with_nothing_to_tell_stays_ambiguous_and_the_config_settles_it() -> None:
    shapes = {"h.0.attn.c_proj.weight": (8, 8), "h.0.attn.c_proj.bias": (8,)}
    guess = infer_module_types(shapes, "torch")["h.0.attn.c_proj.weight"]
    assert guess.candidates == ("Linear", "Conv1D") and "config.json" in guess.why
    assert _types(shapes, config=GPT2_CONFIG)["h.0.attn.c_proj.weight"] == ("Conv1D",)
    bert = ModelConfig(("BertModel",), "bert")  # a config naming another family: its shapes
    assert _types(shapes, config=bert)["h.0.attn.c_proj.weight"] == ("Linear",)
    unnamed = ModelConfig(tie_word_embeddings=False)  # a config naming no model: as without
    assert _types(shapes, config=unnamed)["h.0.attn.c_proj.weight"] == ("Linear", "Conv1D")
    linear = {"h.0.mlp.c_fc.weight": (32, 8), "h.0.mlp.c_fc.bias": (32,)}  # [out, in]
    assert _types(linear, config=GPT2_CONFIG)["h.0.mlp.c_fc.weight"] == ("Linear",)


def test_c_layers_laid_out_as_linears_stay_linears() -> None:
    # GPT-BigCode names its nn.Linear layers c_attn / c_fc / c_proj: [out, in]
    shapes = {
        "h.0.attn.c_attn.weight": (24, 8), "h.0.attn.c_attn.bias": (24,),
        "h.0.attn.c_proj.weight": (8, 8), "h.0.attn.c_proj.bias": (8,),
        "h.0.mlp.c_fc.weight": (32, 8), "h.0.mlp.c_fc.bias": (32,),
    }  # fmt: skip
    assert set(_types(shapes).values()) == {("Linear",)}
    bigcode = ModelConfig(("GPTBigCodeForCausalLM",), "gpt_bigcode")
    assert set(_types(shapes, config=bigcode).values()) == {("Linear",)}
    mixed = {**shapes, "h.1.mlp.c_fc.weight": (8, 32), "h.1.mlp.c_fc.bias": (32,)}
    guesses = infer_module_types(mixed, "torch")
    assert guesses["h.0.attn.c_proj.weight"].candidates == ("Linear", "Conv1D")
    assert guesses["h.1.mlp.c_fc.weight"].misfit == "weight [8, 32] with bias [32]"


def test_a_burn_file_has_no_conv1d() -> None:
    converted = {"h.0.attn.c_attn.weight": (8, 24), "h.0.attn.c_attn.bias": (24,)}
    assert infer_module_types(converted, "burn")["h.0.attn.c_attn.weight"].candidates == ("Linear",)


def test_lm_head_is_a_linear_when_a_config_says_a_model() -> None:
    shapes = {"lm_head.weight": (50, 8), "head.weight": (50, 8)}
    assert _types(shapes)["lm_head.weight"] == ("Linear", "Embedding")
    typed = _types(shapes, config=ModelConfig(("GPT2LMHeadModel",), tie_word_embeddings=False))
    assert typed == {"lm_head.weight": ("Linear",), "head.weight": ("Linear", "Embedding")}


def _snapshots(shapes: dict[str, tuple[int, ...]]) -> list[TensorSnapshot]:
    rng = np.random.default_rng(0)
    return [
        TensorSnapshot.from_array(name, rng.standard_normal(shape).astype(np.float32))
        for name, shape in shapes.items()
    ]


def test_conv1d_goes_into_burn_untransposed_and_half_precision_casts_it() -> None:
    for adapter in (PyTorchToBurnAdapter().chain(HalfPrecisionAdapter()), HalfPrecisionAdapter()):
        owned = {s.full_path: s for s in assign_module_types(_snapshots(GPT2), adapter)}
        c_attn = owned["transformer.h.0.attn.c_attn.weight"]
        assert c_attn.container == ("Conv1D",)
        adapted = adapter.adapt(c_attn)
        assert adapted.shape == (8, 24) and adapted.dtype.name == "F16"
        np.testing.assert_array_equal(adapted.to_numpy(), c_attn.to_numpy().astype(np.float16))


def test_a_model_free_save_for_burn_keeps_conv1d_as_the_command_does(tmp_path: Path) -> None:
    arrays = {s.full_path: s.to_numpy() for s in _snapshots(GPT2)}
    source = tmp_path / "model.safetensors"
    write_file(source, [TensorEntry.from_array(n, a) for n, a in arrays.items()], {"format": "pt"})
    burn = BurnpackStore.from_bytes().with_to_adapter(PyTorchToBurnAdapter())
    save_into(SafetensorsStore.from_file(source), burn)  # no config.json: the layout tells
    assert main(["convert", str(source), str(tmp_path / "cli.bpk"), "--to-burn", "-q"]) == 0
    reader = BurnpackReader.from_bytes(burn.get_bytes())
    command = BurnpackReader.from_bytes((tmp_path / "cli.bpk").read_bytes())
    assert reader.names() == command.names()
    for name in reader.names():  # param ids are random: compare tensors, not bytes
        np.testing.assert_array_equal(reader.get(name), command.get(name), err_msg=name)
    for name in ("transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_proj.weight"):
        np.testing.assert_array_equal(reader.get(name), arrays[name], err_msg=name)
    assert "transformer.ln_f.gamma" in reader.names()


def test_an_ambiguous_square_is_refused_naming_both_candidates() -> None:
    snapshots = _snapshots({"h.0.attn.c_proj.weight": (8, 8), "h.0.attn.c_proj.bias": (8,)})
    with pytest.raises(ModuleTypeNeededError, match="Linear or Conv1D"):
        assign_module_types(snapshots, PyTorchToBurnAdapter())
    owned = assign_module_types(snapshots, PyTorchToBurnAdapter(), config=GPT2_CONFIG)
    assert [s.container for s in owned] == [("Conv1D",), ("Conv1D",)]


def test_config_fields_are_read_and_wrong_ones_ignored() -> None:
    text = {
        "architectures": ["GPT2LMHeadModel", 3],
        "model_type": "gpt2",
        "tie_word_embeddings": False,
    }
    assert ModelConfig.from_json(json.dumps(text).encode()) == ModelConfig(
        ("GPT2LMHeadModel",), "gpt2", tie_word_embeddings=False
    )
    odd = {"architectures": "GPT2", "model_type": 1, "tie_word_embeddings": "no"}
    assert ModelConfig.from_json(json.dumps(odd).encode()) == ModelConfig()
    for broken in (b"[1]", b"{", b"\xff", b"[" * 100_000):
        assert ModelConfig.from_json(broken) is None
    assert ModelConfig(model_type="openai-gpt").uses_conv1d
    assert not ModelConfig(("GPTBigCodeForCausalLM",), "gpt_bigcode").uses_conv1d


def test_the_config_beside_the_weights_is_read_up_to_its_limit(tmp_path: Path) -> None:
    weights = tmp_path / "model.safetensors"
    assert ModelConfig.beside(str(weights)) is None  # none there
    text = b'{"model_type": "gpt2"}'
    (tmp_path / "config.json").write_bytes(text.ljust(MAX_MODEL_CONFIG_SIZE))
    assert ModelConfig.beside(str(weights)) == ModelConfig(model_type="gpt2")
    assert ModelConfig.beside(str(tmp_path)) == ModelConfig(model_type="gpt2")  # a set's folder
    (tmp_path / "config.json").write_bytes(text.ljust(MAX_MODEL_CONFIG_SIZE + 1))
    assert ModelConfig.beside(str(weights)) is None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_config_that_is_no_regular_file_is_not_opened(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "config.json")  # opening it would block until a writer came
    assert ModelConfig.beside(str(tmp_path / "model.safetensors")) is None
