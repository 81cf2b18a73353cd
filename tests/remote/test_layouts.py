"""Layout rules over a URL: a fused file split into separate tensors and separate tensors fused,
read from a range-capable HTTP server, each byte of the file served at most once (a split reads
its source once for all its parts), the values as from a local file; and a rank's part of a
fused tensor read over the network."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests._optional import need
from tests.remote.conftest import HttpServer, safetensors_bytes
from weightstore import SafetensorsStore
from weightstore.adapters import layout_preset
from weightstore.distributed import FusedSplit, load

need("fsspec")

HIDDEN, Q, KV, FFN = 256, 256, 64, 512


def _separate() -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(3)
    shapes = {
        "attn.q_proj.weight": (Q, HIDDEN), "attn.k_proj.weight": (KV, HIDDEN),
        "attn.v_proj.weight": (KV, HIDDEN), "mlp.gate_proj.weight": (FFN, HIDDEN),
        "mlp.up_proj.weight": (FFN, HIDDEN), "norm.weight": (HIDDEN,),
    }  # fmt: skip
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def _fused() -> dict[str, np.ndarray[Any, Any]]:
    parts = _separate()
    return {
        "attn.qkv_proj.weight": np.concatenate([parts[f"attn.{p}_proj.weight"] for p in "qkv"]),
        "mlp.gate_up_proj.weight": np.concatenate(
            [parts["mlp.gate_proj.weight"], parts["mlp.up_proj.weight"]]
        ),
        "norm.weight": parts["norm.weight"],
    }


def _served_once(server: HttpServer, size: int) -> None:
    """No byte of the file was served twice, and no more than the file was served."""
    served = np.zeros(size, np.int32)
    for request in server.requests:
        if request.method == "GET":
            served[request.start : request.end] += 1
    assert served.max() == 1, int(served.max())
    assert server.nbytes <= size


def _publish(server: HttpServer, name: str, tensors: dict[str, Any]) -> tuple[str, int]:
    data = safetensors_bytes(tensors)
    (server.root / name).write_bytes(data)
    return server.url(name), len(data)


def test_a_fused_file_at_a_url_splits_reading_each_source_once(http_server: HttpServer) -> None:
    url, size = _publish(http_server, "phi3.safetensors", _fused())
    want = _separate()
    model = {name: np.zeros_like(array) for name, array in want.items()}
    store = SafetensorsStore.from_file(url).with_from_adapter(layout_preset("split-qkv-gate-up"))
    result = store.apply_to(model)
    assert result.is_success() and result.missing == [], result
    for name, array in want.items():
        assert np.array_equal(model[name], array), name
    _served_once(http_server, size)


def test_separate_tensors_at_a_url_fuse_reading_each_once(http_server: HttpServer) -> None:
    url, size = _publish(http_server, "llama.safetensors", _separate())
    want = _fused()
    model = {name: np.zeros_like(array) for name, array in want.items()}
    store = SafetensorsStore.from_file(url).with_from_adapter(layout_preset("fuse-qkv-gate-up"))
    assert store.apply_to(model).is_success()
    for name, array in want.items():
        assert np.array_equal(model[name], array), name
    _served_once(http_server, size)


@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_reads_its_parts_of_a_fused_tensor_over_http(
    http_server: HttpServer, rank: int
) -> None:
    url, size = _publish(http_server, "phi3.safetensors", _fused())
    fused = _fused()["attn.qkv_proj.weight"]
    half = [(rank * Q // 2, (rank + 1) * Q // 2)] + [
        (Q + part * KV + rank * KV // 2, Q + part * KV + (rank + 1) * KV // 2) for part in (0, 1)
    ]
    want = np.concatenate([fused[start:stop] for start, stop in half])
    model = {"attn": {"qkv_proj": {"weight": np.zeros_like(want)}}}
    store = SafetensorsStore.from_file(url).with_regex(r"qkv_proj")
    plan = {r"qkv_proj\.weight$": FusedSplit(0, (Q, KV, KV))}
    assert load(store, model, plan, rank=rank, world_size=2).is_success()
    assert np.array_equal(model["attn"]["qkv_proj"]["weight"], want)
    head = http_server.requests[0]  # the first read, 64 KiB: the header and what follows it
    assert (head.start, head.end) == (0, min(size, 64 * 1024))
    beyond = http_server.nbytes - head.nbytes  # rank 0's q rows begin inside the head
    assert beyond <= want.nbytes, (http_server.nbytes, want.nbytes)  # past it: the share only
    print(f"rank {rank}: served {http_server.nbytes:,} bytes for a share of {want.nbytes:,}")
