"""The DCP index of the largest checkpoint weightstore's limits are sized for: a training
checkpoint of a Llama-3.1-405B-shaped model on 1,024 ranks, written by weightstore's own
`dcp_index_bytes` (no torch needed), then parsed in a fresh process for its time and peak RSS.

Run ``.venv/bin/python benchmarks/bench_dcp_index.py`` (about two minutes and 8 GiB of memory
per layout; ``--ranks 64`` for a quick run). The layouts:

- ``fsdp``: FSDP2, every tensor split on dim 0 over all ranks as ``torch.chunk`` splits it (the
  last chunks short, a dimension smaller than the ranks leaving some ranks an empty chunk);
- ``tp``: TP=8 x FSDP=``ranks/8``: each matrix split over 8 on its TP dimension (dim 0 of q, k,
  v, gate, up and lm_head, as colwise parallelism splits them; dim 1 of o, down and the
  embedding), then on dim 0 over the rest, a 2-d grid; norms split on dim 0 over all ranks.

The state is what torch's ``get_state_dict`` gives, flattened: ``model.<fqn>``, and for each
parameter ``optim.state.<fqn>.exp_avg``, ``.exp_avg_sq`` (sharded as the parameter) and
``.step`` (a 0-d tensor every rank holds alike, saved once by rank 0), plus the param group's
hyperparameters as values (``optim.param_groups.<fqn>.lr``, ...).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

from weightstore.dcp._index import DcpChunk, DcpTensor, dcp_index_bytes, rank_file_name
from weightstore.dtypes import from_name

SET_ID = "1f2e3d4c5b6a79881f2e3d4c5b6a7988"
LAYERS, HIDDEN, INTERMEDIATE, VOCAB = 126, 16384, 53248, 128256
KV_DIM = 8 * 128  # 8 kv heads of dim 128; the 128 q heads make HIDDEN
GROUP: dict[str, object] = {"lr": 3e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}
GROUP_FLAGS = ("amsgrad", "foreach", "maximize", "capturable", "differentiable", "fused")


def parameters(layers: int = LAYERS) -> Iterator[tuple[str, tuple[int, ...], int | None]]:
    """(fqn, shape, TP dimension or None) of each parameter of the model."""
    yield "model.embed_tokens.weight", (VOCAB, HIDDEN), 1
    for n in range(layers):
        prefix = f"model.layers.{n}"
        yield f"{prefix}.self_attn.q_proj.weight", (HIDDEN, HIDDEN), 0
        yield f"{prefix}.self_attn.k_proj.weight", (KV_DIM, HIDDEN), 0
        yield f"{prefix}.self_attn.v_proj.weight", (KV_DIM, HIDDEN), 0
        yield f"{prefix}.self_attn.o_proj.weight", (HIDDEN, HIDDEN), 1
        yield f"{prefix}.mlp.gate_proj.weight", (INTERMEDIATE, HIDDEN), 0
        yield f"{prefix}.mlp.up_proj.weight", (INTERMEDIATE, HIDDEN), 0
        yield f"{prefix}.mlp.down_proj.weight", (HIDDEN, INTERMEDIATE), 1
        yield f"{prefix}.input_layernorm.weight", (HIDDEN,), None
        yield f"{prefix}.post_attention_layernorm.weight", (HIDDEN,), None
    yield "model.norm.weight", (HIDDEN,), None
    yield "lm_head.weight", (VOCAB, HIDDEN), 0


def splits(size: int, parts: int) -> list[tuple[int, int]]:
    """(offset, length) of each of `parts` pieces of `size`, as ``torch.chunk`` and FSDP2 cut
    it: ceil(size / parts) each, the last ones short or empty (an empty one starts at the end)."""
    step = -(-size // parts)
    return [(min(i * step, size), max(0, min(step, size - i * step))) for i in range(parts)]


def chunks(
    name: str, shape: tuple[int, ...], tp_dim: int | None, ranks: int, tp: int, ext: str
) -> list[DcpChunk]:
    """The chunk each rank saves of a tensor: rank = tp_rank + tp * dp_rank on a 2-d mesh."""
    if tp == 1 or tp_dim is None:
        return [
            DcpChunk(
                rank_file_name(rank, SET_ID, ext),
                name,
                (o, *[0] * (len(shape) - 1)),
                (s, *shape[1:]),
            )
            for rank, (o, s) in enumerate(splits(shape[0], ranks))
        ]
    dp = ranks // tp
    # Dim 0 is split over TP first when TP splits it, then over DP (FSDP2 on top of TP).
    result = []
    for tp_rank, (tp_o, tp_s) in enumerate(splits(shape[tp_dim], tp)):
        rows = (tp_o, tp_s) if tp_dim == 0 else (0, shape[0])
        for dp_rank, (o, s) in enumerate(splits(rows[1], dp)):
            offsets, sizes = [rows[0] + min(o, rows[1]), 0], [s, shape[1]]
            if tp_dim == 1:
                offsets[1], sizes[1] = tp_o, tp_s
            rank = tp_rank + tp * dp_rank
            result.append(DcpChunk(rank_file_name(rank, SET_ID, ext), name, offsets, sizes))
    return result


def training_index(ranks: int, tp: int = 1, layers: int = LAYERS) -> bytes:
    """The index of a model + Adam state checkpoint laid out on `ranks` ranks (TP `tp`)."""
    f32 = from_name("F32")
    tensors: dict[str, DcpTensor] = {}
    values: dict[str, object] = {}
    paths: dict[str, list[str | int]] = {}
    for fqn, shape, tp_dim in parameters(layers):
        name = f"model.{fqn}"
        tensors[name] = DcpTensor(f32, shape, chunks(name, shape, tp_dim, ranks, tp, "bpk"))
        paths[name] = ["model", fqn]
        for state in ("exp_avg", "exp_avg_sq"):
            key = f"optim.state.{fqn}.{state}"
            tensors[key] = DcpTensor(f32, shape, chunks(key, shape, tp_dim, ranks, tp, "bpk"))
            paths[key] = ["optim", "state", fqn, state]
        step = f"optim.state.{fqn}.step"
        tensors[step] = DcpTensor(
            f32, (), [DcpChunk(rank_file_name(0, SET_ID, "bpk"), step, (), ())]
        )
        paths[step] = ["optim", "state", fqn, "step"]
        group = {**GROUP, **dict.fromkeys(GROUP_FLAGS, False)}
        for key, value in group.items():
            full = f"optim.param_groups.{fqn}.{key}"
            values[full] = value
            paths[full] = ["optim", "param_groups", fqn, key]
    return dcp_index_bytes(
        SET_ID,
        tensors,
        values,
        paths=paths,
        planner_data=None,
        metadata={},
        container="burnpack",
        dcp_version="1.0.0",
    )


_CHILD = """
import resource, sys, time
from weightstore.dcp._index import parse_dcp_index
data = open(sys.argv[1], "rb").read()
start = time.perf_counter()
index = parse_dcp_index(data, sys.argv[1])
seconds = time.perf_counter() - start
chunks = sum(len(t.chunks) for t in index.tensors.values())
try:  # this program's own peak: ru_maxrss would count the parent's pages it forked from
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
except OSError:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(seconds, peak, len(index.tensors), chunks)
"""


def measure(ranks: int, tp: int) -> dict[str, object]:
    """Write the index, then parse it in a child: its size, parse time and peak RSS."""
    start = time.perf_counter()
    data = training_index(ranks, tp)
    written = time.perf_counter() - start
    with tempfile.NamedTemporaryFile(suffix=".json") as file:
        file.write(data)
        file.flush()
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, file.name], check=True, capture_output=True, text=True
        ).stdout.split()
    seconds, rss_kib, tensors, count = float(out[0]), int(out[1]), int(out[2]), int(out[3])
    return {
        "ranks": ranks,
        "tp": tp,
        "index_bytes": len(data),
        "tensors": tensors,
        "chunks": count,
        "write_s": round(written, 2),
        "parse_s": round(seconds, 2),
        "parse_peak_rss_mib": round(rss_kib / 1024),
        "input_mib": round(len(data) / 2**20),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--layout", choices=("fsdp", "tp", "both"), default="both")
    args = parser.parse_args()
    layouts = {"fsdp": [1], "tp": [8], "both": [1, 8]}[args.layout]
    for tp in layouts:
        print(json.dumps(measure(args.ranks, tp)), flush=True)


if __name__ == "__main__":
    main()
