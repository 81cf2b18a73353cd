"""A burnpack load into JAX on the CPU copies nothing: the arrays are the mapped file's pages.

JAX aliases host memory that is 64-byte aligned; burnpack aligns every tensor to 256 bytes
from a page-aligned mapping. The proof is the address: each loaded array's buffer lies inside
the file's mapping in /proc/self/maps. (benchmarks/bench_jax.py times a 1 GB load.)
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("flax")

import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
from flax import nnx  # noqa: E402

from weightstore import BurnpackStore, SafetensorsStore, save_into  # noqa: E402
from weightstore.bridge import load_tree  # noqa: E402

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/maps")


def _mapped_ranges(path: Path) -> list[tuple[int, int]]:
    """The address ranges where `path` is mapped into this process."""
    ranges = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        if line.endswith(str(path)):
            start, end = line.split()[0].split("-")
            ranges.append((int(start, 16), int(end, 16)))
    return ranges


def _inside(array: Any, ranges: list[tuple[int, int]]) -> bool:
    pointer = array.unsafe_buffer_pointer()
    return any(start <= pointer and pointer + array.nbytes <= end for start, end in ranges)


class Wide(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.fc = nnx.Linear(1024, 1024, rngs=rngs)  # 4 MiB of float32
        self.out = nnx.Linear(1024, 16, param_dtype=jnp.bfloat16, rngs=rngs)


def _saved_wide(tmp_path: Path) -> dict[str, np.ndarray[Any, Any]]:
    generator = np.random.default_rng(0)
    values = {
        "fc.kernel": generator.standard_normal((1024, 1024), np.float32),
        "fc.bias": generator.standard_normal(1024, np.float32),
        "out.kernel": generator.standard_normal((1024, 16), np.float32).astype(ml_dtypes.bfloat16),
        "out.bias": np.zeros(16, ml_dtypes.bfloat16),
    }
    save_into(values, BurnpackStore.from_file(tmp_path / "wide"))
    return values


def test_a_burnpack_load_into_an_abstract_model_aliases_the_mapped_file(tmp_path: Path) -> None:
    values = _saved_wide(tmp_path)
    model = nnx.eval_shape(lambda: Wide(nnx.Rngs(0)))
    assert BurnpackStore.from_file(tmp_path / "wide.bpk").apply_to(model).is_success()
    ranges = _mapped_ranges(tmp_path / "wide.bpk")
    assert ranges, "the file is not mapped"
    for name in values:  # float32 and bfloat16 alike: no copy, no float32 detour
        owner, leaf = name.split(".")
        array = getattr(getattr(model, owner), leaf).get_value()
        assert _inside(array, ranges), name
        np.testing.assert_array_equal(np.asarray(array), values[name])


def test_arrays_outlive_the_store_and_jax_never_writes_the_file(tmp_path: Path) -> None:
    values = _saved_wide(tmp_path)
    abstract = {"fc": {"kernel": jax.ShapeDtypeStruct((1024, 1024), jnp.float32)}}
    store = BurnpackStore.from_file(tmp_path / "wide.bpk").allow_partial()
    tree, _ = load_tree(abstract, store)
    kernel = tree["fc"]["kernel"]
    del store, tree
    gc.collect()
    assert _inside(kernel, _mapped_ranges(tmp_path / "wide.bpk"))  # still mapped: JAX holds it
    # A donated buffer that aliases host memory is copied, not written: the file stays.
    doubled = jax.jit(lambda x: x * 2, donate_argnums=0)(kernel)
    np.testing.assert_array_equal(np.asarray(doubled), values["fc.kernel"] * 2)
    again, _ = load_tree(abstract, BurnpackStore.from_file(tmp_path / "wide.bpk").allow_partial())
    np.testing.assert_array_equal(np.asarray(again["fc"]["kernel"]), values["fc.kernel"])


def test_a_safetensors_load_aliases_exactly_the_tensors_jax_finds_aligned(tmp_path: Path) -> None:
    from weightstore.safetensors import SafetensorsReader

    data = np.arange(1 << 16, dtype=np.float32)
    path = tmp_path / "m.safetensors"
    save_into({"a": data[:3], "w": data}, SafetensorsStore.from_file(path))
    tree, _ = load_tree(
        {"a": jnp.zeros(3), "w": jnp.zeros(1 << 16)}, SafetensorsStore.from_file(path)
    )
    with SafetensorsReader.from_file(path) as reader:
        offsets = {
            name: reader.data_start + reader.descriptor(name).data_offsets[0] for name in "aw"
        }
    ranges = _mapped_ranges(path)
    for name, offset in offsets.items():  # SafeTensors aligns to the element size only
        np.testing.assert_array_equal(np.asarray(tree[name]), data[: tree[name].size])
        assert _inside(tree[name], ranges) == (offset % 64 == 0), (name, offset)
