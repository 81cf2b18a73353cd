"""The stacked-experts preset against transformers 5's own loader: a Mixtral checkpoint with
one tensor per expert (as the Hub holds them) loaded through the preset equals what
``from_pretrained`` makes of the same checkpoint, and saves back to it byte for byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests._optional import need

torch = need("torch")
transformers = need("transformers")

from weightstore.adapters import layout_preset  # noqa: E402
from weightstore.stores import SafetensorsStore  # noqa: E402

_CONFIG: dict[str, Any] = dict(
    vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
    num_attention_heads=2, num_key_value_heads=1, num_local_experts=3, num_experts_per_tok=2,
    max_position_embeddings=32, tie_word_embeddings=False,
)  # fmt: skip


def _per_expert_checkpoint(directory: Path) -> Any:
    """A Hub-style Mixtral checkpoint: a random model's experts written one tensor each."""
    torch.manual_seed(0)
    config = transformers.MixtralConfig(**_CONFIG)
    model = transformers.MixtralForCausalLM(config)
    size = config.intermediate_size
    tensors: dict[str, Any] = {}
    for name, value in model.state_dict().items():
        value = value.detach().numpy()
        if ".mlp.experts.gate_up_proj" in name:
            prefix = name.replace(".mlp.experts.gate_up_proj", ".block_sparse_moe.experts")
            for e in range(config.num_local_experts):
                tensors[f"{prefix}.{e}.w1.weight"] = value[e, :size].copy()
                tensors[f"{prefix}.{e}.w3.weight"] = value[e, size:].copy()
        elif ".mlp.experts.down_proj" in name:
            prefix = name.replace(".mlp.experts.down_proj", ".block_sparse_moe.experts")
            for e in range(config.num_local_experts):
                tensors[f"{prefix}.{e}.w2.weight"] = value[e].copy()
        else:
            tensors[name.replace(".mlp.gate.", ".block_sparse_moe.gate.")] = value
    directory.mkdir()
    SafetensorsStore.from_file(directory / "model.safetensors").collect_from(tensors)
    (directory / "config.json").write_text(json.dumps(config.to_dict()))
    return config


def test_mixtral_from_per_expert_tensors_equals_from_pretrained(tmp_path: Path) -> None:
    config = _per_expert_checkpoint(tmp_path / "hub")
    oracle = transformers.MixtralForCausalLM.from_pretrained(tmp_path / "hub").eval()
    torch.manual_seed(5)
    model = transformers.MixtralForCausalLM(config).eval()
    store = SafetensorsStore.from_file(tmp_path / "hub" / "model.safetensors")
    layout = layout_preset("stack-mixtral-experts")
    plan = store.plan(model, layout)
    result = store.with_from_adapter(layout).apply_to(model)
    assert result.missing == [] and result.unused == [] and result.errors == []
    expected = oracle.state_dict()
    assert expected.keys() == model.state_dict().keys()
    for name, value in model.state_dict().items():
        assert torch.equal(value, expected[name]), name
    ids = torch.arange(10).reshape(2, 5)
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, oracle(input_ids=ids).logits)
    back = tmp_path / "back.safetensors"
    SafetensorsStore.from_file(back).with_to_adapter(plan.inverse()).collect_from(model)
    saved = SafetensorsStore.from_file(back).get_all_snapshots()
    hub = SafetensorsStore.from_file(tmp_path / "hub" / "model.safetensors").get_all_snapshots()
    assert saved.keys() == hub.keys()  # the Hub names, each bit for bit
    for name, snapshot in hub.items():
        assert saved[name].to_numpy().tobytes() == snapshot.to_numpy().tobytes(), name
