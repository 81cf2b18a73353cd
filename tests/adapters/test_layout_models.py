"""Layout presets against transformers: a Phi-3-style model (fused ``qkv_proj`` and
``gate_up_proj``) loaded from a Llama-style checkpoint of the same weights gives the very same
logits, and the other way; and the fused model saves back to the Llama file byte for byte."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests._optional import need

torch = need("torch")
transformers = need("transformers")

from weightstore.adapters import layout_preset  # noqa: E402
from weightstore.errors import LoadFailedError  # noqa: E402
from weightstore.stores import SafetensorsStore  # noqa: E402

_SIZES: dict[str, Any] = dict(
    vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    rms_norm_eps=1e-5, tie_word_embeddings=False,
)  # fmt: skip


def _llama() -> Any:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**_SIZES, attention_bias=False, mlp_bias=False)
    return transformers.LlamaForCausalLM(config).eval()


def _phi3() -> Any:
    torch.manual_seed(1)  # other weights than the Llama's, so a tensor left unloaded shows
    config = transformers.Phi3Config(**_SIZES, pad_token_id=0)
    return transformers.Phi3ForCausalLM(config).eval()


def _logits(model: Any) -> Any:
    ids = torch.arange(12).reshape(2, 6) % 64
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_phi3_loaded_from_a_llama_checkpoint_gives_the_llama_logits(tmp_path: Path) -> None:
    llama = _llama()
    SafetensorsStore.from_file(tmp_path / "llama.safetensors").collect_from(llama)
    phi3 = _phi3()
    store = SafetensorsStore.from_file(tmp_path / "llama.safetensors")
    result = store.with_from_adapter(layout_preset("fuse-qkv-gate-up")).apply_to(phi3)
    assert result.missing == [] and result.unused == [] and result.errors == []
    assert (_logits(phi3) - _logits(llama)).abs().max().item() == 0.0


def test_the_fused_model_saves_back_to_the_llama_file_byte_for_byte(tmp_path: Path) -> None:
    SafetensorsStore.from_file(tmp_path / "llama.safetensors").collect_from(_llama())
    phi3 = _phi3()
    store = SafetensorsStore.from_file(tmp_path / "llama.safetensors")
    plan = store.plan(phi3, layout_preset("fuse-qkv-gate-up"))
    store.with_from_adapter(layout_preset("fuse-qkv-gate-up")).apply_to(phi3)
    back = SafetensorsStore.from_file(tmp_path / "back.safetensors")
    back.with_to_adapter(plan.inverse()).collect_from(phi3)
    original = (tmp_path / "llama.safetensors").read_bytes()
    assert (tmp_path / "back.safetensors").read_bytes() == original


def test_llama_loaded_from_a_phi3_checkpoint_gives_the_phi3_logits(tmp_path: Path) -> None:
    phi3 = _phi3()
    SafetensorsStore.from_file(tmp_path / "phi3.safetensors").collect_from(phi3)
    llama = _llama()
    store = SafetensorsStore.from_file(tmp_path / "phi3.safetensors")
    result = store.with_from_adapter(layout_preset("split-qkv-gate-up")).apply_to(llama)
    assert result.missing == [] and result.unused == [] and result.errors == []
    assert (_logits(llama) - _logits(phi3)).abs().max().item() == 0.0
    # Back to fused: Concat needs no sizes, so the preset's own inverse saves it.
    back = SafetensorsStore.from_file(tmp_path / "back.safetensors")
    back.with_to_adapter(layout_preset("split-qkv-gate-up").inverse()).collect_from(llama)
    assert (tmp_path / "back.safetensors").read_bytes() == (
        tmp_path / "phi3.safetensors"
    ).read_bytes()


def test_a_model_one_kv_head_short_fails_naming_the_rule(tmp_path: Path) -> None:
    SafetensorsStore.from_file(tmp_path / "llama.safetensors").collect_from(_llama())
    config = transformers.Phi3Config(**{**_SIZES, "num_key_value_heads": 1}, pad_token_id=0)
    phi3 = transformers.Phi3ForCausalLM(config).eval()
    before = {k: v.clone() for k, v in phi3.state_dict().items()}
    store = SafetensorsStore.from_file(tmp_path / "llama.safetensors")
    with pytest.raises(LoadFailedError) as failed:
        store.with_from_adapter(layout_preset("fuse-qkv-gate-up")).apply_to(phi3)
    message = str(failed.value)
    assert "layout rule 'fused qkv'" in message
    assert "model.layers.0.self_attn.k_proj.weight" in message  # the group's sources
    assert "[64, 32], but the target is [48, 32]" in message
    assert all(torch.equal(before[k], v) for k, v in phi3.state_dict().items())  # unchanged
