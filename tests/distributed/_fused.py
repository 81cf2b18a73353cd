"""A small grouped-query attention block in two layouts, shared by the fused tensor-parallel
tests: Llama-style separate ``q/k/v_proj`` and ``gate/up_proj``, and Phi-3-style fused
``qkv_proj`` and ``gate_up_proj``. Eight query heads and two KV heads of eight dims: q is 64
rows, k and v 16 each, so a chunk of the fused whole would cut across q, k and v."""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from weightstore.distributed import FusedSplit, chunk_bounds

LAYERS: Final = 2
HIDDEN: Final = 64
Q_ROWS, KV_ROWS, FFN = 64, 16, 96
QKV_SIZES: Final = (Q_ROWS, KV_ROWS, KV_ROWS)
GATE_UP_SIZES: Final = (FFN, FFN)

# The fused model's plan: column-parallel fused tensors, row-parallel o and down.
COLUMN_PARALLEL: dict[str, int | FusedSplit] = {
    r"\.qkv_proj\.weight$": 0, r"\.gate_up_proj\.weight$": 0,
    r"\.o_proj\.weight$": 1, r"\.down_proj\.weight$": 1,
}  # fmt: skip
# The same split, for a file that holds the fused tensors.
FUSED_FILE_PLAN: dict[str, int | FusedSplit] = {
    r"\.qkv_proj\.weight$": FusedSplit(0, QKV_SIZES),
    r"\.gate_up_proj\.weight$": FusedSplit(0, GATE_UP_SIZES),
    r"\.o_proj\.weight$": 1, r"\.down_proj\.weight$": 1,
}  # fmt: skip

Arrays = dict[str, np.ndarray[Any, Any]]


def separate(seed: int = 0) -> Arrays:
    """The Llama-style checkpoint's tensors (float32)."""
    rng = np.random.default_rng(seed)
    shapes: dict[str, tuple[int, ...]] = {}
    for layer in range(LAYERS):
        attn, mlp = f"layers.{layer}.self_attn", f"layers.{layer}.mlp"
        shapes[f"{attn}.q_proj.weight"] = (Q_ROWS, HIDDEN)
        shapes[f"{attn}.k_proj.weight"] = (KV_ROWS, HIDDEN)
        shapes[f"{attn}.v_proj.weight"] = (KV_ROWS, HIDDEN)
        shapes[f"{attn}.o_proj.weight"] = (HIDDEN, Q_ROWS)
        shapes[f"{mlp}.gate_proj.weight"] = (FFN, HIDDEN)
        shapes[f"{mlp}.up_proj.weight"] = (FFN, HIDDEN)
        shapes[f"{mlp}.down_proj.weight"] = (HIDDEN, FFN)
        shapes[f"layers.{layer}.input_layernorm.weight"] = (HIDDEN,)
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def fused(seed: int = 0) -> Arrays:
    """The same weights as one Phi-3-style checkpoint holds them."""
    parts = separate(seed)
    out: Arrays = {}
    for layer in range(LAYERS):
        attn, mlp = f"layers.{layer}.self_attn", f"layers.{layer}.mlp"
        out[f"{attn}.qkv_proj.weight"] = np.concatenate(
            [parts.pop(f"{attn}.{p}_proj.weight") for p in "qkv"]
        )
        out[f"{mlp}.gate_up_proj.weight"] = np.concatenate(
            [parts.pop(f"{mlp}.{p}_proj.weight") for p in ("gate", "up")]
        )
    return {**out, **parts}


def chunk(array: np.ndarray[Any, Any], dim: int, rank: int, world_size: int) -> Any:
    """Rank `rank`'s chunk of `array` along `dim`, cut by hand (torch.chunk's rule)."""
    start, stop = chunk_bounds(array.shape[dim], rank, world_size)
    return np.take(array, range(start, stop), axis=dim)


def expected_fused_local(rank: int, world_size: int, seed: int = 0) -> Arrays:
    """A rank's fused model, built by hand: each part of q, k, v (and gate, up) chunked on
    its rows and the chunks joined, as vLLM's QKVParallelLinear holds them; o and down split
    on their columns; the norm whole."""
    parts = separate(seed)
    out: Arrays = {}
    for layer in range(LAYERS):
        attn, mlp = f"layers.{layer}.self_attn", f"layers.{layer}.mlp"
        out[f"{attn}.qkv_proj.weight"] = np.concatenate(
            [chunk(parts.pop(f"{attn}.{p}_proj.weight"), 0, rank, world_size) for p in "qkv"]
        )
        out[f"{mlp}.gate_up_proj.weight"] = np.concatenate(
            [chunk(parts.pop(f"{mlp}.{p}_proj.weight"), 0, rank, world_size)
             for p in ("gate", "up")]
        )  # fmt: skip
    for name in [n for n in parts if n.endswith(("o_proj.weight", "down_proj.weight"))]:
        out[name] = chunk(parts.pop(name), 1, rank, world_size)
    return {**out, **parts}


def zeros_like(arrays: Arrays) -> Arrays:
    return {name: np.zeros_like(array) for name, array in arrays.items()}
