"""Split GGUF models for the tests: written by gguf-py's writer, or part by part with ours
(broken on purpose where a test asks)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from weightstore.entry import TensorEntry
from weightstore.gguf import GgufValue, GgufWriter
from weightstore.gguf._layout import ValueType
from weightstore.gguf._names import part_path
from weightstore.io._digest import encode_digests

U16, I32, U32 = ValueType.UINT16, ValueType.INT32, ValueType.UINT32

# Five tensors, F32 and F16, as a model's would be; gguf-py with split_max_tensors=2 puts them
# in three parts: (a, b), (c, d), (e).
TENSORS: dict[str, np.ndarray[Any, Any]] = {
    "token_embd.weight": np.arange(24, dtype=np.float32).reshape(4, 6),
    "blk.0.attn_q.weight": (np.arange(16, dtype=np.float16) / 4).reshape(2, 8),
    "blk.0.attn_norm.weight": np.linspace(-1, 1, 8, dtype=np.float32),
    "blk.1.ffn_up.weight": np.arange(12, dtype=np.float32).reshape(3, 4) - 5,
    "output.weight": np.ones((2, 3), dtype=np.float16),
}
NAMES = list(TENSORS)


def gguf_py() -> Any:
    """gguf-py, the oracle; the test skips without it."""
    return pytest.importorskip("gguf")


def write_with_gguf_py(path: Path, **split: Any) -> None:
    """The model written by gguf-py's writer (split when `split` says so)."""
    gguf = gguf_py()
    writer = gguf.GGUFWriter(path, "llama", **split)
    writer.add_name("tiny")
    writer.add_context_length(128)
    for name, array in TENSORS.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def part(directory: Path, number: int, count: int = 3, prefix: str = "model") -> Path:
    """Where part `number` of `count` lies in `directory`, as llama.cpp names it."""
    return Path(part_path(str(directory / "x.gguf"), prefix, number, count))


def split_pairs(number: int, count: int, total: int) -> dict[str, GgufValue]:
    """The three pairs every part holds, typed as gguf-split types them."""
    return {
        "split.no": GgufValue(U16, number - 1),
        "split.count": GgufValue(U16, count),
        "split.tensors.count": GgufValue(I32, total),
    }


def write_parts(
    directory: Path,
    groups: Sequence[Sequence[str]] = (NAMES[:2], NAMES[2:4], NAMES[4:]),
    *,
    prefix: str = "model",
    changed: Mapping[int, Mapping[str, object]] | None = None,
    dropped: Mapping[int, Sequence[str]] | None = None,
    digests: bool = False,
) -> list[Path]:
    """A split model written part by part with our writer, as gguf-split lays it out: part 1
    holds the model's metadata, every part its split pairs. `changed` overrides (or adds)
    pairs of a part (1-based), `dropped` removes them: the broken models of the tests."""
    count, total = len(groups), sum(len(group) for group in groups)
    paths = []
    for number, group in enumerate(groups, 1):
        metadata: dict[str, object] = {}
        if number == 1:
            metadata.update({"general.architecture": "llama", "general.name": "tiny"})
        metadata.update(split_pairs(number, count, total))
        metadata.update((changed or {}).get(number, {}))
        for key in (dropped or {}).get(number, ()):
            del metadata[key]
        if digests:
            tensors = {n: hashlib.sha256(TENSORS[n].tobytes()).hexdigest() for n in group}
            metadata["weightstore.digests"] = encode_digests("sha256", tensors)
        entries = [TensorEntry.from_array(name, TENSORS[name]) for name in group]
        path = part(directory, number, count, prefix)
        directory.mkdir(parents=True, exist_ok=True)
        GgufWriter(entries, metadata).save(path)
        paths.append(path)
    return paths
