"""Sharded loads of a quantized checkpoint read dequantized on four CPU devices: each device
decodes its part from the FP8 blocks around it, reading about a quarter of the codes, and
the values are those of the whole tensor's dequantization, sliced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
pytest.importorskip("safetensors.torch")

import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from tests.distributed import _quantized as q  # noqa: E402
from tests.distributed._counting import counting_reads  # noqa: E402
from weightstore import SafetensorsStore  # noqa: E402
from weightstore.bridge import load_tree  # noqa: E402

if len(jax.devices()) < 4:  # tests/jax/conftest.py asks for four before any backend starts
    pytest.skip(
        "needs 4 CPU devices; a JAX backend started before conftest", allow_module_level=True
    )


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("q") / "q.safetensors"
    q.write_checkpoint(path)
    return path


def _mesh() -> Mesh:
    return Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))


@pytest.mark.parametrize(
    ("spec", "dtype"),
    [(P("x", "y"), "bf16"), (P(("x", "y"), None), "f32"), (P(None, ("x", "y")), "bf16")],
    ids=["rows-and-columns-bf16", "rows-4-f32", "columns-4-bf16"],  # 96 columns: mid-block
)
def test_each_device_decodes_its_part_from_its_blocks(
    checkpoint: Path, spec: Any, dtype: str
) -> None:
    numpy_dtype = {"bf16": ml_dtypes.bfloat16, "f32": np.float32}[dtype]
    abstract = {"fc": {"weight": jax.ShapeDtypeStruct((q.ROWS, q.COLUMNS), jnp.dtype(numpy_dtype))}}
    sharding = NamedSharding(_mesh(), spec)
    with counting_reads() as opening:
        SafetensorsStore.from_file(checkpoint).keys()
    with counting_reads() as counter:
        store = SafetensorsStore.from_file(checkpoint).with_dequantize(dtype).with_regex("^fc")
        tree, result = load_tree(abstract, store.allow_partial(), device={"fc.weight": sharding})
    assert result.applied == ["fc.weight"]
    weight = tree["fc"]["weight"]
    assert weight.sharding == sharding and len(weight.addressable_shards) == 4
    want = q.dequantized(checkpoint, q.FP8).astype(numpy_dtype)  # rounded once from float32
    assert np.array_equal(np.asarray(weight), want)
    for shard in weight.addressable_shards:
        assert np.array_equal(np.asarray(shard.data), want[shard.index])
    read = counter.total - opening.total
    assert read == sum(_enclosing_bytes(shard.index) for shard in weight.addressable_shards)
    print(f"{spec}: read {read:,} bytes; the codes and scales are {_enclosing_bytes(()):,}")


def _enclosing_bytes(index: tuple[slice, ...]) -> int:
    """What decoding `index` of the FP8 weight reads: codes and F32 scales of the 128 x 128
    blocks around it (each device's part is distinct here, so read once)."""
    rows, columns = (
        part.indices(size)[:2] for part, size in zip((*index, slice(None), slice(None))[:2],
                                                     (q.ROWS, q.COLUMNS), strict=True)
    )  # fmt: skip
    grid = [(start // 128, -(-stop // 128)) for start, stop in (rows, columns)]
    height = min(q.ROWS, grid[0][1] * 128) - grid[0][0] * 128
    width = min(q.COLUMNS, grid[1][1] * 128) - grid[1][0] * 128
    return height * width + (grid[0][1] - grid[0][0]) * (grid[1][1] - grid[1][0]) * 4


@pytest.mark.parametrize("spec", [P(("x", "y"), None), P(None, ("x", "y")), P("x", "y")])
def test_int4_shards_decode_from_their_own_words_scales_and_zero_points(
    tmp_path: Path, spec: Any
) -> None:
    from safetensors.numpy import save_file

    from tests.quantized.test_hf_int import hand_parts

    parts, _ = hand_parts(rows=256, cols=1000, gs=40, bits=4, seed=5)  # 250 columns a device
    path = tmp_path / "int4.safetensors"
    save_file(parts, str(path))
    whole = SafetensorsStore.from_file(path).with_dequantize("bf16").get_tensor("m.weight")
    assert whole is not None
    want = whole.to_numpy()
    abstract = {"m": {"weight": jax.ShapeDtypeStruct((256, 1000), jnp.bfloat16)}}
    sharding = NamedSharding(_mesh(), spec)
    with counting_reads() as opening:
        SafetensorsStore.from_file(path).keys()
    with counting_reads() as counter:
        store = SafetensorsStore.from_file(path).with_dequantize("bf16").allow_partial()
        tree, _ = load_tree(abstract, store, device={"m.weight": sharding})
    weight = tree["m"]["weight"]
    for shard in weight.addressable_shards:
        assert np.array_equal(
            np.asarray(shard.data).view(np.uint16), want[shard.index].view(np.uint16)
        )
    stored = sum(array.nbytes for array in parts.values())
    ratio = (counter.total - opening.total) / stored
    print(f"{spec}: the four devices read {ratio:.3f}x the group's bytes")
    assert ratio < 1.1
