"""Peak memory of a load through a fused layout: one group at a time, not the model.

A Llama-style checkpoint (separate ``q/k/v_proj`` and ``gate/up_proj``, float32) is loaded
into a model with fused ``qkv_proj`` and ``gate_up_proj`` (NumPy arrays, allocated before the
measurement) through the ``fuse-qkv-gate-up`` preset, and the Python-heap peak of the load is
measured with ``tracemalloc`` (NumPy reports its buffers to it; the file is memory-mapped, so
reading it costs no heap). The peer is what users write today: ``safetensors.numpy.load_file``
of the whole file, then one ``np.concatenate`` per fused tensor. Printed per size: the largest
group (its fused tensor), our peak, the peer's peak, and the ratios. Then the same for a
file-to-file conversion (what ``convert --layout fuse-qkv-gate-up`` runs: a save from the
store through the layout), against ``load_file``, the concatenations and ``save_file``.

Run ``.venv/bin/python benchmarks/bench_layout_peak.py`` (add ``--quick`` for small sizes).
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def _checkpoint(path: Path, layers: int, hidden: int) -> dict[str, tuple[int, int]]:
    """Write the separate checkpoint; return the fused model's shapes."""
    from weightstore.stores import SafetensorsStore

    kv, inter = hidden // 4, hidden * 2
    rng = np.random.default_rng(0)
    arrays: dict[str, Any] = {}
    fused: dict[str, tuple[int, int]] = {}
    for i in range(layers):
        for name, rows in (("q_proj", hidden), ("k_proj", kv), ("v_proj", kv)):
            arrays[f"l.{i}.attn.{name}.weight"] = rng.standard_normal((rows, hidden), np.float32)
        for name in ("gate_proj", "up_proj"):
            arrays[f"l.{i}.mlp.{name}.weight"] = rng.standard_normal((inter, hidden), np.float32)
        fused[f"l.{i}.attn.qkv_proj.weight"] = (hidden + 2 * kv, hidden)
        fused[f"l.{i}.mlp.gate_up_proj.weight"] = (2 * inter, hidden)
    SafetensorsStore.from_file(path).overwrite().collect_from(arrays)
    return fused


def _model(shapes: dict[str, tuple[int, int]]) -> dict[str, Any]:
    model: dict[str, Any] = {}
    for name, shape in shapes.items():
        node = model
        *parents, leaf = name.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = np.zeros(shape, np.float32)
    return model


def _peak(run: Callable[[Path, dict[str, Any]], object], path: Path, model: dict[str, Any]) -> int:
    gc.collect()
    tracemalloc.start()
    run(path, model)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def _ours(path: Path, model: dict[str, Any]) -> None:
    from weightstore.adapters import layout_preset
    from weightstore.stores import SafetensorsStore

    store = SafetensorsStore.from_file(path).with_from_adapter(layout_preset("fuse-qkv-gate-up"))
    store.apply_to(model)


def _peer(path: Path, model: dict[str, Any]) -> None:
    from safetensors.numpy import load_file

    state = load_file(str(path))
    for layer, block in model["l"].items():
        parts = [state[f"l.{layer}.attn.{p}_proj.weight"] for p in "qkv"]
        block["attn"]["qkv_proj"]["weight"][...] = np.concatenate(parts)
        mlp = [state[f"l.{layer}.mlp.{p}_proj.weight"] for p in ("gate", "up")]
        block["mlp"]["gate_up_proj"]["weight"][...] = np.concatenate(mlp)


def _convert(path: Path, _: dict[str, Any]) -> None:
    from weightstore.adapters import layout_preset
    from weightstore.stores import SafetensorsStore

    out = SafetensorsStore.from_file(path.with_name("fused.safetensors")).overwrite()
    out.with_to_adapter(layout_preset("fuse-qkv-gate-up")).collect_from(
        SafetensorsStore.from_file(path)
    )


def _peer_convert(path: Path, _: dict[str, Any]) -> None:
    from safetensors.numpy import load_file, save_file

    state = load_file(str(path))
    layers = sorted({name.split(".")[1] for name in state})
    for layer in layers:
        qkv = [state.pop(f"l.{layer}.attn.{p}_proj.weight") for p in "qkv"]
        state[f"l.{layer}.attn.qkv_proj.weight"] = np.concatenate(qkv)
        mlp = [state.pop(f"l.{layer}.mlp.{p}_proj.weight") for p in ("gate", "up")]
        state[f"l.{layer}.mlp.gate_up_proj.weight"] = np.concatenate(mlp)
    save_file(state, str(path.with_name("peer.safetensors")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, seconds")
    args = parser.parse_args()
    sizes = [(4, 256), (8, 256)] if args.quick else [(4, 512), (8, 512), (16, 512), (8, 1024)]
    print("layers hidden  file_MB  group_MB  ours_MB  peer_MB  ours/group  ours/peer  "
          "convert_MB  peer_convert_MB  convert/group  convert/peer")  # fmt: skip
    for layers, hidden in sizes:
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(scratch) / "separate.safetensors"
            shapes = _checkpoint(path, layers, hidden)
            group = max(4 * a * b for a, b in shapes.values())
            model = _model(shapes)
            ours = _peak(_ours, path, model)
            peer = _peak(_peer, path, model)
            converted = _peak(_convert, path, model)
            peer_converted = _peak(_peer_convert, path, model)
            size = path.stat().st_size
            print(f"{layers:6} {hidden:6} {size / 1e6:8.1f} {group / 1e6:9.2f} "
                  f"{ours / 1e6:8.2f} {peer / 1e6:8.2f} {ours / group:11.2f} "
                  f"{ours / peer:10.3f} {converted / 1e6:11.2f} {peer_converted / 1e6:16.2f} "
                  f"{converted / group:14.2f} {converted / peer_converted:13.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
