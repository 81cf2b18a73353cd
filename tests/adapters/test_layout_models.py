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


def _same_weights(phi3: Any, llama: Any) -> None:
    """Every fused weight of `phi3` is its `llama` parts concatenated, bit for bit."""
    fused, parts = phi3.state_dict(), llama.state_dict()
    for layer in range(len(llama.model.layers)):
        attn, mlp = f"model.layers.{layer}.self_attn", f"model.layers.{layer}.mlp"
        qkv = torch.cat([parts[f"{attn}.{p}_proj.weight"] for p in "qkv"])
        gate_up = torch.cat([parts[f"{mlp}.{p}_proj.weight"] for p in ("gate", "up")])
        assert torch.equal(fused[f"{attn}.qkv_proj.weight"], qkv)
        assert torch.equal(fused[f"{mlp}.gate_up_proj.weight"], gate_up)
    rest = [name for name in parts if not name.endswith(("q_proj.weight", "k_proj.weight",
            "v_proj.weight", "gate_proj.weight", "up_proj.weight"))]  # fmt: skip
    assert all(torch.equal(fused[name], parts[name]) for name in rest)


def _same_logits(got: Any, want: Any) -> None:
    """Equal logits up to float32 rounding: one fused matmul and three separate ones sum their
    products in another order (transformers 5.25 on this CPU: 1.5e-08 apart), so equality is
    the weights' (`_same_weights`), and the logits' is within a few ulps."""
    torch.testing.assert_close(_logits(got), _logits(want), rtol=1e-6, atol=1e-7)


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
    _same_weights(phi3, llama)
    _same_logits(phi3, llama)


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
    _same_weights(phi3, llama)
    _same_logits(llama, phi3)
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
