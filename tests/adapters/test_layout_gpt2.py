"""The GPT-2 preset against transformers: GPT-2 (``Conv1D`` layers, fused ``c_attn``) loaded
into a twin built of ``nn.Linear`` layers gives GPT-2's logits, and the twin saves back to
GPT-2's own names and bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests._optional import need

torch = need("torch")
transformers = need("transformers")

from weightstore.adapters import layout_preset  # noqa: E402
from weightstore.stores import SafetensorsStore  # noqa: E402

nn = torch.nn
_HIDDEN, _HEADS, _LAYERS, _VOCAB, _POSITIONS = 32, 4, 2, 50, 16


class _Attention(nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.c_proj = (
            nn.Linear(_HIDDEN, _HIDDEN) for _ in range(4)
        )

    def forward(self, x: Any) -> Any:
        batch, length, _ = x.shape
        heads = [
            p(x).view(batch, length, _HEADS, -1).transpose(1, 2)
            for p in (self.q_proj, self.k_proj, self.v_proj)
        ]
        q, k, v = heads
        weights = torch.matmul(q, k.transpose(-1, -2)) * (_HIDDEN // _HEADS) ** -0.5
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        weights = weights.masked_fill(~causal, torch.finfo(weights.dtype).min)
        out = torch.matmul(weights.softmax(-1), v).transpose(1, 2).reshape(batch, length, -1)
        return self.c_proj(out)


class _Mlp(nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.c_fc, self.c_proj = nn.Linear(_HIDDEN, 4 * _HIDDEN), nn.Linear(4 * _HIDDEN, _HIDDEN)

    def forward(self, x: Any) -> Any:
        gelu = transformers.activations.NewGELUActivation()
        return self.c_proj(gelu(self.c_fc(x)))


class _Block(nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(_HIDDEN), nn.LayerNorm(_HIDDEN)
        self.attn, self.mlp = _Attention(), _Mlp()

    def forward(self, x: Any) -> Any:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class _Body(nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(_VOCAB, _HIDDEN), nn.Embedding(_POSITIONS, _HIDDEN)
        self.h = nn.ModuleList(_Block() for _ in range(_LAYERS))
        self.ln_f = nn.LayerNorm(_HIDDEN)


class LinearGpt2(nn.Module):  # type: ignore[misc]
    """GPT-2 with ``nn.Linear`` layers and separate q, k, v; the head tied to ``wte``."""

    def __init__(self) -> None:
        super().__init__()
        self.transformer = _Body()

    def forward(self, ids: Any) -> Any:
        body = self.transformer
        x = body.wte(ids) + body.wpe(torch.arange(ids.shape[1]))
        for block in body.h:
            x = block(x)
        return body.ln_f(x) @ body.wte.weight.T


def _gpt2() -> Any:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=_VOCAB, n_positions=_POSITIONS, n_embd=_HIDDEN, n_layer=_LAYERS,
        n_head=_HEADS, attn_implementation="eager",
    )  # fmt: skip
    return transformers.GPT2LMHeadModel(config).eval()


def test_gpt2_in_a_linear_twin_gives_gpt2_logits_and_saves_back(tmp_path: Path) -> None:
    gpt2 = _gpt2()
    source = tmp_path / "gpt2.safetensors"
    SafetensorsStore.from_file(source).dedupe_tied().collect_from(gpt2.transformer)
    twin = LinearGpt2().eval()
    store = SafetensorsStore.from_file(source).with_key_remapping("^", "transformer.")
    result = store.with_from_adapter(layout_preset("gpt2-conv1d-to-linear")).apply_to(twin)
    assert result.missing == [] and result.unused == [] and result.errors == []
    ids = torch.arange(12).reshape(2, 6) % _VOCAB
    with torch.no_grad():
        difference = (twin(ids) - gpt2(input_ids=ids).logits).abs().max().item()
    assert difference < 1e-5  # Linear and Conv1D multiply in other orders: not bit for bit
    back = tmp_path / "back.safetensors"
    inverse = layout_preset("gpt2-conv1d-to-linear").inverse()
    SafetensorsStore.from_file(back).with_to_adapter(inverse).with_key_remapping(
        "^transformer\\.", ""
    ).collect_from(twin)
    saved = SafetensorsStore.from_file(back).get_all_snapshots()
    original = SafetensorsStore.from_file(source).get_all_snapshots()
    assert saved.keys() == original.keys()
    for name, snapshot in original.items():
        assert saved[name].to_numpy().tobytes() == snapshot.to_numpy().tobytes(), name
