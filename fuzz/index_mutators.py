"""Structure-aware mutations of the two indexes: the set index and the DCP index.

Both are JSON, so a byte flip mostly dies in the JSON parser. These mutators decode the index,
make edits that aim at what the readers check after parsing, and write it back:

- names: a shard or rank file name replaced by a hostile one (``..``, absolute paths, drives,
  backslashes, NUL, lone surrogates, names past ``NAME_MAX``, the directory's hostile
  neighbours: symlink loops and links out, a FIFO, a socket, a directory, an empty file, a
  git-lfs pointer), a shard that is missing or named twice, a tensor named by no shard;
- numbers at the edges: shapes, offsets, sizes and totals of ``0``, ``2**63``, ``2**64``,
  5,000 digits, a zero dim beside a huge one, 65 dims;
- chunk geometry (DCP): chunks duplicated (overlap), removed (gap), moved, or one tensor cut into
  up to 2,000 chunks whose sweep keeps many active (the quadratic-overlap shape);
- stored values (DCP): every tagged form broken (``$dict`` with keys that all hash alike, bad
  base64, unknown tags, nesting past the limit, an opaque payload of random bytes);
- and the generic tree edits of `fuzz.mutators` (types swapped, members deleted or twinned under
  hostile names, deep nesting) plus its text-level extras (duplicate keys, huge digit strings).

Each returns the new bytes, or ``None`` when `data` is not a JSON object.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any, Final

from fuzz import mutators
from fuzz.index_targets import HF_SHARDS, HOSTILE_NEIGHBOURS, WS_SHARDS

__all__ = ["INDEX_MUTATORS", "mutate_dcp_index", "mutate_set_index"]

Rng = random.Random

HOSTILE_NAMES: Final = (
    "", ".", "..", "../model-00001-of-00002.safetensors", "/etc/hostname", "C:\\x.safetensors",
    "C:x.safetensors", "a\\b.safetensors", "x\x00y.safetensors", "\ud800.safetensors",
    "\udfff", "x" * 300 + ".safetensors", "subdir.safetensors/x", "./" + HF_SHARDS[0],
    HF_SHARDS[0] + "/", "model-00003-of-00002.safetensors", "\u00e9.safetensors",
    "checkpoint/" + HF_SHARDS[0], "~/" + HF_SHARDS[0], "nul", "con.safetensors",
    *HOSTILE_NEIGHBOURS, *HF_SHARDS, *WS_SHARDS,
)  # fmt: skip
EDGE_INTS: Final = (0, 1, 2, 3, 4, 7, 2**31, 2**32, 2**62, 2**63 - 1, 2**63, 2**64, -1, 10**30)
MAX_OUTPUT: Final = 2**18  # characters: the runner's -max_len for the index parsers
MERSENNE_61: Final = 2**61 - 1  # CPython hashes int k as k mod this: its multiples collide


_HUGE: Final = "\u0002digits-{}\u0002"  # a number too long for json.dumps, put in as text


def _edge_int(rng: Rng) -> Any:
    """An int at an edge, or (one time in ten) a marker `_encode` writes as 4,301 to 20,000
    digits: CPython will not convert such an int to text, so json.dumps could not."""
    if rng.random() < 0.1:
        return _HUGE.format(rng.choice(mutators.HUGE_DIGITS))
    return rng.choice(EDGE_INTS)


def _hostile_name(rng: Rng) -> str:
    name: str = rng.choice(HOSTILE_NAMES)
    return name


def _encode(tree: Any, rng: Rng) -> bytes | None:
    try:
        text = json.dumps(tree, ensure_ascii=rng.random() < 0.5, allow_nan=True)
    except (ValueError, RecursionError, TypeError):
        return None
    if len(text) > MAX_OUTPUT:
        return None
    text = mutators._text_extras(text, rng)
    for digits in mutators.HUGE_DIGITS:  # a few: a list of 100,000 would make gigabytes
        text = text.replace(json.dumps(_HUGE.format(digits)), "9" * digits, 3)
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate as invalid UTF-8


def _decode(data: bytes) -> dict[str, Any] | None:
    try:
        tree = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return tree if isinstance(tree, dict) else None


def _pick(mapping: Any, rng: Rng) -> Any:
    """A key of `mapping` (a dict), or None when it is not a non-empty dict."""
    if not isinstance(mapping, dict) or not mapping:
        return None
    return rng.choice(list(mapping))


def _edit_metadata(tree: dict[str, Any], rng: Rng) -> None:
    metadata = tree.setdefault("metadata", {})
    if not isinstance(metadata, dict):
        return
    key = rng.choice(
        ("total_size", "weightstore.set_id", "weightstore.format", "weightstore.container",
         "format", "dcp_version", _hostile_name(rng))
    )  # fmt: skip
    metadata[key] = rng.choice(
        (_edge_int(rng), "", "f" * 32, "F" * 32, "0" * 31, "safetensors", "burnpack", "pt",
         "torch.distributed.checkpoint", None, [], {"a": 1}, 1.5, "\ud800")
    )  # fmt: skip


# -- the set index --------------------------------------------------------------------------------


def _edit_weight_map(tree: dict[str, Any], rng: Rng) -> None:
    weight_map = tree.get("weight_map")
    if not isinstance(weight_map, dict):
        tree["weight_map"] = weight_map = {}
    roll = rng.randrange(6)
    tensor = _pick(weight_map, rng)
    if roll <= 1 and tensor is not None:  # a hostile or wrong shard
        weight_map[tensor] = _hostile_name(rng)
    elif roll == 2:  # a tensor no shard holds, or under a hostile name
        weight_map[rng.choice(("missing", "\ud800", "", "x" * 5000, "a..b"))] = _hostile_name(rng)
    elif roll == 3 and tensor is not None:
        del weight_map[tensor]
    elif roll == 4:  # many tensors in many shards: the 1,000-shard shape and past it
        count = rng.choice((10, 100, 1000, 2000))
        for i in range(count):
            weight_map[f"t{i}"] = f"model-{i % 1001 + 1:05d}-of-01001.safetensors"
    elif tensor is not None:  # every tensor to one shard
        shard = weight_map[tensor]
        for name in weight_map:
            weight_map[name] = shard


def mutate_set_index(data: bytes, rng: Rng) -> bytes | None:
    """A set index with its weight map, metadata or structure edited."""
    tree = _decode(data)
    if tree is None:
        return None
    for _ in range(rng.choice((1, 1, 2, 3))):
        roll = rng.random()
        if roll < 0.45:
            _edit_weight_map(tree, rng)
        elif roll < 0.65:
            _edit_metadata(tree, rng)
        else:
            mutators._mutate_tree(tree, rng, cbor=False)
    return _encode(tree, rng)


# -- the DCP index --------------------------------------------------------------------------------


def _chunks_of(tree: dict[str, Any], rng: Rng) -> tuple[dict[str, Any], list[Any]] | None:
    tensors = tree.get("tensors")
    fqn = _pick(tensors, rng)
    if fqn is None or not isinstance(tensors[fqn], dict):
        return None
    entry = tensors[fqn]
    chunks = entry.get("chunks")
    if not isinstance(chunks, list):
        entry["chunks"] = chunks = []
    return entry, chunks


def _many_chunks(entry: dict[str, Any], chunks: list[Any], rng: Rng) -> None:
    """One 2-d tensor cut into `n` chunks: a tiling, or staggered strips that overlap in
    a way a naive pairwise sweep keeps thousands of chunks active for."""
    count = rng.choice((10, 100, 100, 1000, 2000))  # 2,000: about 160 KB
    file = chunks[0].get("file", "f") if chunks and isinstance(chunks[0], dict) else "f"
    entry["shape"] = [count, count] if rng.random() < 0.5 else [count, 1]
    staggered = rng.random() < 0.5
    chunks[:] = [
        {
            "file": file,
            "name": f"c{i}",
            "offsets": [i, 0] if not staggered else [i // 2, i % 2],
            "sizes": [1, entry["shape"][1]] if not staggered else [count // 2, 1],
        }
        for i in range(count)
    ]


def _edit_chunks(tree: dict[str, Any], rng: Rng) -> None:
    found = _chunks_of(tree, rng)
    if found is None:
        return
    entry, chunks = found
    roll = rng.randrange(9)
    if roll == 0 and chunks:  # overlap
        chunk = chunks[rng.randrange(len(chunks))]
        chunks.append(dict(chunk) if isinstance(chunk, dict) else chunk)
    elif roll == 1 and chunks:  # gap
        chunks.pop(rng.randrange(len(chunks)))
    elif roll == 2 and chunks:
        chunk = rng.choice(chunks)
        if isinstance(chunk, dict):
            field = rng.choice(("offsets", "sizes"))
            values = chunk.get(field)
            if isinstance(values, list) and values:
                values[rng.randrange(len(values))] = _edge_int(rng)
            else:
                chunk[field] = [_edge_int(rng)]
    elif roll == 3:
        _many_chunks(entry, chunks, rng)
    elif roll == 4 and chunks and isinstance(chunk := rng.choice(chunks), dict):
        chunk["file"] = _hostile_name(rng).replace("safetensors", "bpk")
    elif roll == 5 and chunks and isinstance(chunk := rng.choice(chunks), dict):
        chunk["name"] = rng.choice(("", "missing", "\ud800", "model.w@[4, 3]"))
    elif roll == 6:  # a zero dim beside a huge one, and no chunks
        entry["shape"] = rng.choice(
            ([0, 2**64], [2**62, 2**62, 0], [0, _HUGE.format(5000)], [0] * 65)
        )
        if rng.random() < 0.7:
            chunks.clear()
    elif roll == 7:
        shape = entry.get("shape")
        if isinstance(shape, list) and shape:
            shape[rng.randrange(len(shape))] = _edge_int(rng)
        else:
            entry["shape"] = [_edge_int(rng)]
    else:
        entry["dtype"] = rng.choice(mutators.DTYPE_NAMES)


def _hostile_value(rng: Rng) -> Any:
    roll = rng.randrange(10)
    if roll == 0:  # integer keys that all hash alike
        count = rng.choice((10, 100, 1000, 2000))  # 2,000: about 50 KB
        return {"$dict": [[i * MERSENNE_61, i] for i in range(count)]}
    if roll == 1:
        return {"$dict": [[[1], 2]] if rng.random() < 0.5 else [[1, 2], [1, 3]]}
    if roll == 2:
        return {"$bytes": rng.choice(("!!", "QQ", "Q" * 4097, ""))}
    if roll == 3:
        return {"$opaque": rng.choice(("", "UEsDBA==", "gAJ9cQAu", "A" * 1000))}
    if roll == 4:
        return {"$float": rng.choice(("nan", "1e999", "x", 1.0))}
    if roll == 5:
        return {"$tuple": rng.choice(([], {}, "x", [{"$tuple": []}] * 3))}
    if roll == 6:
        return {"$what": 1} if rng.random() < 0.5 else {"$tuple": [], "$dict": []}
    if roll == 7:
        value: Any = 1
        for _ in range(rng.choice((63, 65, 1000))):
            value = {"$tuple": [value]} if rng.random() < 0.5 else [value]
        return value
    if roll == 8:
        return [rng.choice(EDGE_INTS)] * rng.choice((1, 1000, 100_000))
    return {"$dict": [[_edge_int(rng), "x"], [rng.choice(("1", "-0", "1e3")), None]]}


def _edit_values(tree: dict[str, Any], rng: Rng) -> None:
    values = tree.get("values")
    if not isinstance(values, dict):
        tree["values"] = values = {}
    key = _pick(values, rng) if rng.random() < 0.6 else None
    if key is None:
        key = rng.choice(("new", "model.w", "\ud800", "", "step"))  # may clash with a tensor
    values[key] = _hostile_value(rng)
    if rng.random() < 0.2:
        tree["planner_data"] = _hostile_value(rng)


def mutate_dcp_index(data: bytes, rng: Rng) -> bytes | None:
    """A DCP index with its chunks, shapes, values, metadata or structure edited."""
    tree = _decode(data)
    if tree is None:
        return None
    for _ in range(rng.choice((1, 1, 2, 3))):
        roll = rng.random()
        if roll < 0.35:
            _edit_chunks(tree, rng)
        elif roll < 0.6:
            _edit_values(tree, rng)
        elif roll < 0.7:
            _edit_metadata(tree, rng)
        elif roll < 0.75:
            paths = tree.get("paths")
            if isinstance(paths, dict) and paths:
                paths[rng.choice(list(paths))] = rng.choice(([], ["x"] * 300, [1, None], "x"))
        else:
            mutators._mutate_tree(tree, rng, cbor=False)
    return _encode(tree, rng)


INDEX_MUTATORS: Final[dict[str, Callable[[bytes, Rng], bytes | None]]] = {
    "set-index": mutate_set_index,
    "dcp-index": mutate_dcp_index,
}
