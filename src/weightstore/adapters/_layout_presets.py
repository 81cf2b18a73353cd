"""Layout presets: the rule sets for the fused layouts users meet most, as plain `Layout`
values that print (``print(LAYOUT_PRESETS["fuse-qkv-gate-up"])``) so a user can copy one and
change it. Each is written in the load direction its name says; ``.inverse()`` is the other.
"""

from __future__ import annotations

from weightstore.adapters._layout_ops import Chunk, Concat, Permute, Split, Stack
from weightstore.adapters._layout_rules import Layout, LayoutRule
from weightstore.errors import InvalidOptionError

__all__ = ["LAYOUT_PRESETS", "layout_preset"]

_FUSE_QKV_GATE_UP = Layout(
    [
        LayoutRule(
            [r"(.*)\.q_proj\.weight", r"(.*)\.k_proj\.weight", r"(.*)\.v_proj\.weight"],
            ["$1.qkv_proj.weight"],
            [Concat(0)],
            name="fused qkv",
        ),
        LayoutRule(
            [r"(.*)\.gate_proj\.weight", r"(.*)\.up_proj\.weight"],
            ["$1.gate_up_proj.weight"],
            [Concat(0)],
            name="fused gate_up",
        ),
    ],
    name="fuse-qkv-gate-up",
)
"""Separate ``q/k/v_proj`` and ``gate/up_proj`` (Llama-style) into fused ``qkv_proj`` and
``gate_up_proj`` (Phi-3-style), rows in that order."""

_SPLIT_QKV_GATE_UP = Layout(
    [
        LayoutRule(
            [r"(.*)\.qkv_proj\.weight"],
            ["$1.q_proj.weight", "$1.k_proj.weight", "$1.v_proj.weight"],
            [Split(0, ())],
            name="split qkv",
        ),
        LayoutRule(
            [r"(.*)\.gate_up_proj\.weight"],
            ["$1.gate_proj.weight", "$1.up_proj.weight"],
            [Split(0, ())],
            name="split gate_up",
        ),
    ],
    name="split-qkv-gate-up",
)
"""The other way: fused into separate, sizes from the model's q/k/v (``Split(0, ())`` splits
by its targets' sizes, so a file-to-file conversion needs them given)."""


def _stacked_experts(
    experts: str, parts: tuple[str, str, str], stacked: str, name: str
) -> list[LayoutRule]:
    """Per-expert ``experts.N.<gate>/<up>/<down>`` (`parts`) into transformers 5's stacked
    ``<stacked>.gate_up_proj [E, 2I, H]`` (each expert's gate rows, then its up rows) and
    ``<stacked>.down_proj [E, H, I]``."""
    gate, up, down = (f"{experts}\\.{part}\\.weight" for part in parts)
    return [
        LayoutRule([gate, up], [f"{stacked}.gate_up_proj"], [Stack(0, runs=2), Concat(1)],
                   name=f"stacked gate_up {name}"),
        LayoutRule([down], [f"{stacked}.down_proj"], [Stack(0)], name=f"stacked down {name}"),
    ]  # fmt: skip


_STACK_MIXTRAL_EXPERTS = Layout(
    [
        *_stacked_experts(
            r"(.*)\.block_sparse_moe\.experts\.(\d+)", ("w1", "w3", "w2"), "$1.mlp.experts",
            "experts",
        ),
        LayoutRule(
            [r"(.*)\.block_sparse_moe\.gate\.weight"], ["$1.mlp.gate.weight"], [], name="router"
        ),
    ],
    name="stack-mixtral-experts",
)  # fmt: skip
"""Mixtral checkpoints as the Hub holds them (``block_sparse_moe.experts.N.w1/w2/w3``) into
transformers 5's stacked experts: ``mlp.experts.gate_up_proj [E, 2I, H]`` (each expert's
``w1`` rows, then its ``w3`` rows) and ``mlp.experts.down_proj [E, H, I]``."""

_STACK_EXPERTS = Layout(
    _stacked_experts(
        r"(.*)\.experts\.(\d+)", ("gate_proj", "up_proj", "down_proj"), "$1.experts", "experts"
    ),
    name="stack-experts",
)
"""Per-expert ``experts.N.gate_proj/up_proj/down_proj`` (Qwen2-MoE-style checkpoints) into the
same stacked ``experts.gate_up_proj`` and ``experts.down_proj``."""

_GPT2_TO_LINEAR = Layout(
    [
        LayoutRule(
            [r"(.*)\.attn\.c_attn\.weight"],
            ["$1.attn.q_proj.weight", "$1.attn.k_proj.weight", "$1.attn.v_proj.weight"],
            [Permute((1, 0)), Chunk(0, 3)],
            name="c_attn weight",
        ),
        LayoutRule(
            [r"(.*)\.attn\.c_attn\.bias"],
            ["$1.attn.q_proj.bias", "$1.attn.k_proj.bias", "$1.attn.v_proj.bias"],
            [Chunk(0, 3)],
            name="c_attn bias",
        ),
        LayoutRule(
            [r"(.*)\.(attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight"],
            ["$1.$2.weight"],
            [Permute((1, 0))],
            name="Conv1D weight",
        ),
    ],
    name="gpt2-conv1d-to-linear",
)
"""GPT-2's ``Conv1D`` weights (``[in, out]``) as ``nn.Linear`` weights (``[out, in]``), and its
fused ``c_attn`` as ``q_proj``, ``k_proj`` and ``v_proj`` (weights and biases)."""


def _per_gate(gates: tuple[str, ...], name: str) -> Layout:
    """torch's gate-stacked recurrent weights (``weight_ih_l0 [G*H, I]``, gates in `gates`
    order) as one Burn ``GateController`` per gate: ``<gate>.input_transform`` and
    ``<gate>.hidden_transform`` Linear layers, weights ``[in, out]`` as Burn stores them."""
    rules = []
    for torch_name, transform, kind in (
        ("weight_ih_l0", "input_transform", "weight"),
        ("weight_hh_l0", "hidden_transform", "weight"),
        ("bias_ih_l0", "input_transform", "bias"),
        ("bias_hh_l0", "hidden_transform", "bias"),
    ):
        ops = [Chunk(0, len(gates))] + ([Permute((1, 0))] if kind == "weight" else [])
        targets = [f"$1.{gate}.{transform}.{kind}" for gate in gates]
        rules.append(LayoutRule([rf"(.*)\.{torch_name}"], targets, ops, name=torch_name))
    return Layout(rules, name=name)


_LSTM_TO_BURN = _per_gate(
    ("input_gate", "forget_gate", "cell_gate", "output_gate"), "lstm-torch-to-burn"
)
"""``nn.LSTM`` (gates i, f, g, o) into Burn's ``Lstm`` field names. The reference is silent on
recurrent layers; the names follow Burn's ``Lstm``/``GateController``."""

_GRU_TO_BURN = _per_gate(("reset_gate", "update_gate", "new_gate"), "gru-torch-to-burn")
"""``nn.GRU`` (gates r, z, n) into Burn's ``Gru`` field names."""

LAYOUT_PRESETS: dict[str, Layout] = {
    layout.name: layout
    for layout in (
        _FUSE_QKV_GATE_UP, _SPLIT_QKV_GATE_UP, _STACK_MIXTRAL_EXPERTS, _STACK_EXPERTS,
        _GPT2_TO_LINEAR, _LSTM_TO_BURN, _GRU_TO_BURN,
    )
}  # fmt: skip


def layout_preset(name: str) -> Layout:
    """The preset called `name`.

    Raises:
        InvalidOptionError: no preset has that name; the message lists them.
    """
    try:
        return LAYOUT_PRESETS[name]
    except KeyError:
        raise InvalidOptionError(
            f"no layout preset {name!r}; presets: {', '.join(sorted(LAYOUT_PRESETS))}"
        ) from None
