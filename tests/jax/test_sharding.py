"""Sharded loads on four CPU devices: each device's part read on its own, each distinct part
once, and the bytes read from the file counted at the byte source."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("flax")

import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from weightstore import BurnpackStore, SafetensorsStore, save_into  # noqa: E402
from weightstore.adapters import PyTorchToFlaxAdapter  # noqa: E402
from weightstore.bridge import load_tree  # noqa: E402
from weightstore.io._source import MmapSource  # noqa: E402

if len(jax.devices()) < 4:  # tests/jax/conftest.py asks for four before any backend starts
    pytest.skip(
        "needs 4 CPU devices; a JAX backend started before conftest", allow_module_level=True
    )

ROWS, COLS = 64, 32
WEIGHT = np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS)
BIAS = np.arange(COLS, dtype=np.float32)
ABSTRACT = {
    "w": jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32),
    "b": jax.ShapeDtypeStruct((COLS,), jnp.float32),
}


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Each read of tensor data from a mapped file, as (tensor, bytes), recorded where the
    reader asks the byte source for them: a whole tensor, or one run of a slice."""
    recorded: list[tuple[str, int]] = []
    read, array = MmapSource.read, MmapSource.array

    def recording_read(self: Any, offset: int, size: int, what: str, tensor: Any = None) -> Any:
        if tensor is not None:
            recorded.append((tensor, size))
        return read(self, offset, size, what, tensor)

    def recording_array(self: Any, offset: int, size: int, *rest: Any) -> Any:
        recorded.append((rest[-1], size))
        return array(self, offset, size, *rest)

    monkeypatch.setattr(MmapSource, "read", recording_read)
    monkeypatch.setattr(MmapSource, "array", recording_array)
    return recorded


def _total(reads: list[tuple[str, int]]) -> Counter[str]:
    counted: Counter[str] = Counter()
    for tensor, size in reads:
        counted[tensor] += size
    return counted


@pytest.fixture
def store(tmp_path: Path) -> Any:
    save_into({"w": WEIGHT, "b": BIAS}, BurnpackStore.from_file(tmp_path / "wb"))
    return BurnpackStore.from_file(tmp_path / "wb.bpk")


def _mesh() -> Mesh:
    return Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))


@pytest.mark.parametrize("spec", [P("x", None), P(None, "y"), P("x", "y"), P()], ids=str)
def test_each_distinct_part_is_read_once_whatever_the_split(
    spec: P, store: Any, reads: list[tuple[str, int]]
) -> None:
    mesh = _mesh()
    shardings = {"w": NamedSharding(mesh, spec), "b": NamedSharding(mesh, P())}
    tree, result = load_tree(ABSTRACT, store, device=shardings)
    assert result.is_success()
    assert tree["w"].sharding == shardings["w"]
    for shard in tree["w"].addressable_shards:  # every device holds its own part
        np.testing.assert_array_equal(np.asarray(shard.data), WEIGHT[shard.index])
    # The unique parts tile the tensor once, replicas share a read: the bytes read are the
    # tensor's, never more, however many of the four devices hold each part.
    assert _total(reads) == {"w": WEIGHT.nbytes, "b": BIAS.nbytes}


def test_four_way_rows_read_a_quarter_each(store: Any, reads: list[tuple[str, int]]) -> None:
    mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
    rule = lambda path, shape: NamedSharding(mesh, P("x")) if path == "w" else None  # noqa: E731
    tree, _ = load_tree(ABSTRACT, store, device=rule)
    assert [size for tensor, size in reads if tensor == "w"] == [WEIGHT.nbytes // 4] * 4
    assert len(tree["w"].sharding.device_set) == 4
    assert tree["b"].sharding.device_set == {jax.devices()[0]}  # the rule said None: default


def test_a_dtype_conversion_reads_the_parts_in_the_files_dtype(
    tmp_path: Path, reads: list[tuple[str, int]]
) -> None:
    half = WEIGHT.astype(ml_dtypes.bfloat16)
    save_into({"w": half}, SafetensorsStore.from_file(tmp_path / "h.safetensors"))
    store = SafetensorsStore.from_file(tmp_path / "h.safetensors")
    sharding = NamedSharding(_mesh(), P(None, "y"))
    tree, _ = load_tree({"w": ABSTRACT["w"]}, store, device={"w": sharding})
    assert tree["w"].dtype == jnp.float32  # bf16 -> f32 is exact, so the load converts
    np.testing.assert_array_equal(np.asarray(tree["w"]), half.astype(np.float32))
    assert _total(reads) == {"w": half.nbytes}


def test_an_adapted_tensor_is_read_whole_once_and_split_in_memory(
    tmp_path: Path, reads: list[tuple[str, int]]
) -> None:
    class Head(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.fc = nnx.Linear(ROWS, COLS, rngs=rngs)

    save_into(
        {"fc": {"weight": WEIGHT.T.copy(), "bias": BIAS}}, BurnpackStore.from_file(tmp_path / "t")
    )
    store = BurnpackStore.from_file(tmp_path / "t.bpk").with_from_adapter(PyTorchToFlaxAdapter())
    model = nnx.eval_shape(lambda: Head(nnx.Rngs(0)))
    sharding = NamedSharding(_mesh(), P("x", "y"))
    assert store.apply_to(model, device={"fc.kernel": sharding}).is_success()
    kernel = model.fc.kernel.get_value()
    assert kernel.sharding == sharding and len(kernel.addressable_shards) == 4
    np.testing.assert_array_equal(np.asarray(kernel), WEIGHT)  # torch's [out, in] transposed
    assert _total(reads) == {"fc.weight": WEIGHT.nbytes, "fc.bias": BIAS.nbytes}  # once each


def test_an_nnx_model_keeps_its_own_sharding_unless_told_otherwise(store: Any) -> None:
    class Layer(nnx.Module):
        def __init__(self) -> None:
            self.w = nnx.Param(jnp.zeros((ROWS, COLS)))
            self.b = nnx.Param(jnp.zeros(COLS))

    sharding = NamedSharding(_mesh(), P("x", None))
    model = Layer()
    model.w.set_value(jax.device_put(model.w.get_value(), sharding))
    assert store.apply_to(model).is_success()
    assert model.w.get_value().sharding == sharding  # where it was
    np.testing.assert_array_equal(np.asarray(model.w.get_value()), WEIGHT)

    abstract = nnx.eval_shape(Layer)  # eval_shape keeps no sharding: the load is told one
    store.apply_to(abstract, device={"w": NamedSharding(_mesh(), P(None, "y"))})
    assert abstract.w.get_value().sharding.spec == P(None, "y")
    np.testing.assert_array_equal(np.asarray(abstract.b.get_value()), BIAS)
