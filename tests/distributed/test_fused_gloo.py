"""Fused tensor-parallel loads on real gloo process groups of 2 and 4 ranks: each rank loads a
torch model with a column-parallel fused ``qkv_proj`` and ``gate_up_proj`` (vLLM's
QKVParallelLinear and MergedColumnParallelLinear layouts) from a Llama-style checkpoint
through the ``fuse-qkv-gate-up`` preset and from a Phi-3-style one by `FusedSplit`; its
tensors must equal ``torch.chunk`` of each part, joined, and it must read its own bytes only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests._ranks import run_ranks  # skips without torch.distributed
from tests.distributed import _fused as f
from tests.distributed._counting import counting_reads
from weightstore import SafetensorsStore, save_into
from weightstore.adapters import layout_preset
from weightstore.distributed import load

torch = pytest.importorskip("torch")
nn = torch.nn


def _linear(rows: int, columns: int) -> nn.Linear:
    return nn.Linear(columns, rows, bias=False)


def _rank_model(world_size: int) -> nn.Module:
    """A rank's fused block; its shapes from a hand-written split, not from the library
    (64, 16 and 96 rows divide evenly by 2 and by 4)."""

    def share(size: int) -> int:
        return size // world_size

    layers = nn.ModuleList()
    for _ in range(f.LAYERS):
        layer = nn.Module()
        layer.self_attn = nn.ModuleDict({
            "qkv_proj": _linear(share(f.Q_ROWS) + 2 * share(f.KV_ROWS), f.HIDDEN),
            "o_proj": _linear(f.HIDDEN, share(f.Q_ROWS)),
        })  # fmt: skip
        layer.mlp = nn.ModuleDict({
            "gate_up_proj": _linear(2 * share(f.FFN), f.HIDDEN),
            "down_proj": _linear(f.HIDDEN, share(f.FFN)),
        })  # fmt: skip
        layer.input_layernorm = nn.RMSNorm(f.HIDDEN)
        layers.append(layer)
    model = nn.Module()
    model.layers = layers
    return model


def _expected(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """torch.chunk of each part, the chunks joined: what QKVParallelLinear holds."""
    parts = {name: torch.from_numpy(array) for name, array in f.separate().items()}
    want = {}

    def pick(name: str, dim: int) -> torch.Tensor:
        return torch.chunk(parts[name], world_size, dim)[rank]

    for layer in range(f.LAYERS):
        attn, mlp = f"layers.{layer}.self_attn", f"layers.{layer}.mlp"
        want[f"{attn}.qkv_proj.weight"] = torch.cat(
            [pick(f"{attn}.{p}_proj.weight", 0) for p in "qkv"]
        )
        want[f"{mlp}.gate_up_proj.weight"] = torch.cat(
            [pick(f"{mlp}.{p}_proj.weight", 0) for p in ("gate", "up")]
        )
        want[f"{attn}.o_proj.weight"] = pick(f"{attn}.o_proj.weight", 1)
        want[f"{mlp}.down_proj.weight"] = pick(f"{mlp}.down_proj.weight", 1)
        norm = f"layers.{layer}.input_layernorm.weight"
        want[norm] = parts[norm]
    return want


def _rank(rank: int, world_size: int, run: str) -> None:
    root = Path(run)
    want = _expected(rank, world_size)
    read = {}
    for kind, path, plan in (
        ("preset", root / "llama.safetensors", f.COLUMN_PARALLEL),
        ("fused", root / "phi3.safetensors", f.FUSED_FILE_PLAN),
    ):
        store = SafetensorsStore.from_file(path)
        if kind == "preset":
            store = store.with_from_adapter(layout_preset("fuse-qkv-gate-up"))
        model = _rank_model(world_size)
        with counting_reads() as counter:
            result = load(store, model, plan)  # rank and world: the process group's
        assert result.is_success(), result
        got = model.state_dict()
        assert sorted(got) == sorted(want), kind
        for name, tensor in want.items():
            assert torch.equal(got[name], tensor), (kind, name)
        share = sum(t.numel() * t.element_size() for t in want.values())
        read[kind] = {"read": counter.total, "share": share}
    (root / f"read-{rank}.json").write_text(json.dumps(read))


def _header(path: Path) -> int:
    with counting_reads() as counter:
        SafetensorsStore.from_file(path).keys()
    return counter.total


@pytest.mark.parametrize("world_size", [2, 4])
def test_fused_qkv_ranks_equal_each_part_chunked_and_read_their_share(
    tmp_path: Path, world_size: int
) -> None:
    save_into(f.separate(), SafetensorsStore.from_file(tmp_path / "llama.safetensors"))
    save_into(f.fused(), SafetensorsStore.from_file(tmp_path / "phi3.safetensors"))
    run_ranks(_rank, world_size, str(tmp_path))  # each rank checks its tensors, raises if off
    headers = {
        "preset": _header(tmp_path / "llama.safetensors"),
        "fused": _header(tmp_path / "phi3.safetensors"),
    }
    for rank in range(world_size):
        for kind, row in json.loads((tmp_path / f"read-{rank}.json").read_text()).items():
            tensors = row["read"] - headers[kind]
            assert tensors <= 1.1 * row["share"], (rank, kind, row)
            assert tensors == row["share"], (rank, kind, row)  # exactly its bytes, in fact
            print(
                f"world {world_size} rank {rank} {kind}: read {row['read']:,} bytes, share "
                f"{row['share']:,} + header {headers[kind]:,} ({tensors / row['share']:.3f}x)"
            )
