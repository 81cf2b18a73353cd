"""JAX models as weightstore models: names, container types, loads in place and as new trees,
abstract models, dtypes, and the errors for what cannot load."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("flax")

import flax.linen as nn  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
from flax import nnx  # noqa: E402

from weightstore import (  # noqa: E402
    BurnpackStore,
    DTypeError,
    InvalidOptionError,
    LoadFailedError,
    PathFilter,
    SafetensorsStore,
    load_from,
    save_into,
)
from weightstore.adapters import FloatCastAdapter  # noqa: E402
from weightstore.bridge import bridge_for, is_jax_model, load_tree  # noqa: E402
from weightstore.bridge._numpy import NumpyDictBridge  # noqa: E402


class Block(nnx.Module):
    def __init__(self, rngs: nnx.Rngs, dtype: Any = jnp.float32) -> None:
        self.fc = nnx.Linear(3, 4, param_dtype=dtype, rngs=rngs)
        self.bn = nnx.BatchNorm(4, param_dtype=dtype, rngs=rngs)
        self.layers = nnx.List([nnx.Linear(4, 4, param_dtype=dtype, rngs=rngs) for _ in range(2)])
        self.drop = nnx.Dropout(0.5, rngs=rngs)  # keeps RNG state, which is no weight


def _block(dtype: Any = jnp.float32) -> Any:
    return nnx.eval_shape(lambda: Block(nnx.Rngs(0), dtype))


def _concrete() -> Any:
    """A Block holding arrays (zeros), made without Flax's initialisers, which compile a
    random-number kernel per shape."""
    graph, state = nnx.split(_block())
    numeric = lambda s: jnp.zeros(s.shape, s.dtype) if jnp.issubdtype(s.dtype, jnp.number) else s  # noqa: E731
    return nnx.merge(graph, jax.tree_util.tree_map(numeric, state))


def _values(model: Any, seed: int = 0) -> dict[str, np.ndarray[Any, Any]]:
    """A dict of seeded arrays under the model's names (a NumPy model weightstore saves)."""
    generator = np.random.default_rng(seed)
    return {
        t.path: generator.uniform(0.5, 1.5, t.shape).astype(t.dtype.numpy)
        for t in bridge_for(model).targets()
    }


def _saved(tmp_path: Path, model: Any, seed: int = 0) -> tuple[Any, dict[str, Any]]:
    values = _values(model, seed)
    save_into(values, BurnpackStore.from_file(tmp_path / "block").overwrite())
    return BurnpackStore.from_file(tmp_path / "block.bpk"), values


# -- names and container types ---------------------------------------------------------------


def test_nnx_names_and_containers_start_with_the_variable_type() -> None:
    targets = {t.path: t.container for t in bridge_for(_block()).targets()}
    assert targets == {
        "bn.bias": ("Param", "Block", "BatchNorm"),
        "bn.mean": ("BatchStat", "Block", "BatchNorm"),
        "bn.scale": ("Param", "Block", "BatchNorm"),
        "bn.var": ("BatchStat", "Block", "BatchNorm"),
        "fc.bias": ("Param", "Block", "Linear"),
        "fc.kernel": ("Param", "Block", "Linear"),
        "layers.0.bias": ("Param", "Block", "List", "Linear"),
        "layers.0.kernel": ("Param", "Block", "List", "Linear"),
        "layers.1.bias": ("Param", "Block", "List", "Linear"),
        "layers.1.kernel": ("Param", "Block", "List", "Linear"),
    }  # Dropout's RNG key and counter are no weights


class LinenNet(nn.Module):
    @nn.compact
    def __call__(self, x: Any) -> Any:
        x = nn.Dense(4)(x)  # auto-named Dense_0
        x = nn.BatchNorm(use_running_average=True, name="bn")(x)
        x = nn.Embed(5, 4, name="table").attend(x)
        x = nn.Conv(2, (3,), name="conv")(x[..., None])
        return nn.LayerNorm(name="norm")(x)


def test_linen_collections_become_variable_types_and_modules_are_typed() -> None:
    variables = jax.eval_shape(LinenNet().init, jax.random.key(0), jnp.ones((1, 3)))
    containers = {t.path: t.container for t in bridge_for(variables).targets()}
    assert containers == {
        "batch_stats.bn.mean": ("BatchStat", "BatchNorm"),
        "batch_stats.bn.var": ("BatchStat", "BatchNorm"),
        "params.Dense_0.bias": ("Param", "Dense"),
        "params.Dense_0.kernel": ("Param", "Dense"),
        "params.bn.bias": ("Param", "BatchNorm"),
        "params.bn.scale": ("Param", "BatchNorm"),
        "params.conv.bias": ("Param", "Conv"),
        "params.conv.kernel": ("Param", "Conv"),
        "params.norm.bias": ("Param", "LayerNorm"),
        "params.norm.scale": ("Param", "LayerNorm"),
        "params.table.embedding": ("Param", "Embed"),
    }


def test_a_filter_on_the_variable_type_loads_batch_statistics_only(tmp_path: Path) -> None:
    store, values = _saved(tmp_path, _block())
    stats = PathFilter().with_predicate(lambda path, container: container.startswith("BatchStat"))
    model = _block()
    result = load_from(model, store.filter(stats).allow_partial())
    assert result.applied == ["bn.mean", "bn.var"]
    assert len(result.skipped) == 8
    np.testing.assert_array_equal(model.bn.var.get_value(), values["bn.var"])
    assert isinstance(model.fc.kernel.get_value(), jax.ShapeDtypeStruct)  # skipped: not written


# -- loads -----------------------------------------------------------------------------------


def test_an_nnx_module_loads_in_place_through_its_own_variables(tmp_path: Path) -> None:
    store, values = _saved(tmp_path, _block())
    model = _concrete()
    kernel = model.fc.kernel
    result = load_from(model, store)
    assert result.is_success() and len(result.applied) == 10
    assert model.fc.kernel is kernel  # the same Variable, a new value
    for path, expected in values.items():
        np.testing.assert_array_equal(_leaf(model, path), expected)


def test_an_abstract_model_is_materialised_from_the_store(tmp_path: Path) -> None:
    store, values = _saved(tmp_path, _block())
    model = _block()
    assert isinstance(model.fc.kernel.get_value(), jax.ShapeDtypeStruct)
    assert load_from(model, store).is_success()
    kernel = model.fc.kernel.get_value()
    assert isinstance(kernel, jax.Array) and kernel.dtype == jnp.float32
    np.testing.assert_array_equal(kernel, values["fc.kernel"])


def test_a_partial_load_reports_what_is_missing_and_leaves_it_abstract(tmp_path: Path) -> None:
    store, _ = _saved(tmp_path, _block())
    model = _block()
    with pytest.raises(LoadFailedError) as failed:
        load_from(model, store.with_key_remapping(r"^layers", "blocks"))
    assert failed.value.result.refused == "missing"
    assert isinstance(model.fc.kernel.get_value(), jax.ShapeDtypeStruct)  # refused: untouched
    result = load_from(model, store.with_key_remapping(r"^layers", "blocks").allow_partial())
    assert ("layers.0.kernel", "Param.Block.List.Linear") in result.missing
    assert "blocks.0.kernel" in result.unused
    assert isinstance(model.layers[0].kernel.get_value(), jax.ShapeDtypeStruct)
    assert isinstance(model.fc.kernel.get_value(), jax.Array)


def test_a_linen_dict_loads_in_place_and_load_tree_returns_a_new_one(tmp_path: Path) -> None:
    abstract = jax.eval_shape(LinenNet().init, jax.random.key(0), jnp.ones((1, 3)))
    generator = np.random.default_rng(0)  # values without Linen's initialisers (compiles)
    variables = jax.tree_util.tree_map(
        lambda leaf: jnp.asarray(generator.uniform(0.5, 1.5, leaf.shape), leaf.dtype), abstract
    )
    save_into(variables, SafetensorsStore.from_file(tmp_path / "net.safetensors"))
    store = SafetensorsStore.from_file(tmp_path / "net.safetensors")
    zeros = jax.tree_util.tree_map(jnp.zeros_like, variables)
    new, result = load_tree(zeros, store)
    assert result.is_success()
    assert not np.any(zeros["params"]["bn"]["scale"])  # the tree given is unchanged
    jax.tree_util.tree_map(np.testing.assert_array_equal, new, variables)
    assert load_from(zeros, store).is_success()  # nested dicts: written in place
    jax.tree_util.tree_map(np.testing.assert_array_equal, zeros, variables)
    assert SafetensorsStore.from_file(tmp_path / "net.safetensors").read_metadata()["format"] == (
        "flax"
    )


def test_a_tree_of_tuples_loads_as_a_new_tree_but_not_in_place(tmp_path: Path) -> None:
    tree = {"layers": (jnp.ones(3), jnp.zeros((2, 2)))}
    save_into(tree, BurnpackStore.from_file(tmp_path / "t"))
    store = BurnpackStore.from_file(tmp_path / "t.bpk")
    abstract = jax.eval_shape(lambda: tree)
    new, result = load_tree(abstract, store)
    assert result.applied == ["layers.0", "layers.1"] and isinstance(new["layers"], tuple)
    np.testing.assert_array_equal(new["layers"][0], np.ones(3))
    with pytest.raises(InvalidOptionError, match=r"sits in a tuple \(layers\).*load_tree"):
        load_from({"layers": (jnp.ones(3), jnp.zeros((2, 2)))}, store)


def test_a_registered_pytree_saves_and_loads_through_a_tree_slot(tmp_path: Path) -> None:
    from flax import struct

    from weightstore.bridge import TreeSlot

    @struct.dataclass
    class Params:
        kernel: Any
        bias: Any

    params = Params(jnp.arange(6.0).reshape(2, 3), jnp.ones(3))
    assert not is_jax_model(params)  # not made of dicts, lists and tuples: say so explicitly
    save_into(TreeSlot(params), BurnpackStore.from_file(tmp_path / "p"))
    assert BurnpackStore.from_file(tmp_path / "p.bpk").keys() == ["bias", "kernel"]
    new, result = load_tree(
        jax.eval_shape(lambda: params), BurnpackStore.from_file(tmp_path / "p.bpk")
    )
    assert result.is_success() and isinstance(new, Params)
    np.testing.assert_array_equal(new.kernel, params.kernel)


def test_bf16_and_fp8_load_in_their_own_dtype(tmp_path: Path) -> None:
    values = {
        "w": np.linspace(-2, 2, 64, dtype=np.float32).astype(ml_dtypes.bfloat16),
        "q": np.linspace(-2, 2, 64, dtype=np.float32).astype(ml_dtypes.float8_e4m3fn),
    }
    save_into(values, SafetensorsStore.from_file(tmp_path / "low.safetensors"))
    abstract = {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in values.items()}
    new, _ = load_tree(abstract, SafetensorsStore.from_file(tmp_path / "low.safetensors"))
    for name, expected in values.items():
        assert new[name].dtype == expected.dtype
        assert np.asarray(new[name]).tobytes() == expected.tobytes()  # bit for bit


def test_a_lossy_dtype_is_refused_and_an_exact_one_converts(tmp_path: Path) -> None:
    save_into(
        {"w": np.linspace(0, 1, 8, dtype=np.float32)}, BurnpackStore.from_file(tmp_path / "f")
    )
    store = BurnpackStore.from_file(tmp_path / "f.bpk")
    bf16 = {"w": jax.ShapeDtypeStruct((8,), jnp.bfloat16)}
    with pytest.raises(LoadFailedError) as failed:
        load_tree(bf16, store)
    assert failed.value.result.errors[0].kind == "dtype_mismatch"
    new, _ = load_tree(bf16, store.with_from_adapter(FloatCastAdapter.to("BF16")))
    assert new["w"].dtype == jnp.bfloat16
    f64 = {"w": jax.ShapeDtypeStruct((8,), jnp.float32)}
    save_into({"w": np.ones(8, ml_dtypes.bfloat16)}, BurnpackStore.from_file(tmp_path / "h"))
    new, _ = load_tree(f64, BurnpackStore.from_file(tmp_path / "h.bpk"))
    assert new["w"].dtype == jnp.float32 and float(new["w"].sum()) == 8.0


def test_a_shape_mismatch_is_reported_for_its_path(tmp_path: Path) -> None:
    values = {"w": np.ones((2, 3), np.float32), "b": np.ones(2, np.float32)}
    save_into(values, BurnpackStore.from_file(tmp_path / "s"))
    store = BurnpackStore.from_file(tmp_path / "s.bpk").validate(False)
    new, result = load_tree({"w": jnp.zeros((3, 2)), "b": jnp.zeros(2)}, store)
    assert [(e.kind, e.path) for e in result.errors] == [("shape_mismatch", "w")]
    assert result.applied == ["b"] and not np.any(new["w"])


# -- what cannot be a model --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "match"),
    [
        ({"w": jnp.ones(2), "step": 3}, "leaf 'step' is int, not an array"),
        ({"a.b": jnp.ones(2), "a": {"b": jnp.ones(2)}}, "names two leaves 'a.b'"),
        ({"rng": jax.random.key(0), "w": jnp.ones(2)}, "leaf 'rng' has dtype key<fry>"),
    ],
)
def test_a_tree_that_names_no_tensors_is_refused(model: Any, match: str) -> None:
    with pytest.raises(InvalidOptionError, match=match):
        bridge_for(model).targets()


@pytest.mark.parametrize(
    ("device", "match"),
    [
        ("cpu", "device is str; expected a jax.Device"),
        (lambda path, shape: "x", "placement for 'w' is str"),
        ({"v": jax.devices()[0]}, "names 1 path.*the model lacks, first 'v'"),
    ],
)
def test_a_placement_that_is_no_sharding_is_refused(device: Any, match: str) -> None:
    with pytest.raises(InvalidOptionError, match=match):
        bridge_for({"w": jnp.ones(2)}, device=device)


def test_an_abstract_model_has_nothing_to_save(tmp_path: Path) -> None:
    with pytest.raises(DTypeError, match=r"leaf 'bn\.bias' is abstract"):
        save_into(_block(), BurnpackStore.from_file(tmp_path / "nothing"))
    assert not list(tmp_path.iterdir())  # no file, no scratch file


def test_numpy_dicts_stay_numpy_models_when_jax_is_loaded() -> None:
    assert not is_jax_model({"w": np.ones(2)}) and not is_jax_model(jnp.ones(2))
    assert isinstance(bridge_for({"w": np.ones(2)}), NumpyDictBridge)
    assert is_jax_model({"w": np.ones(2), "v": jnp.ones(2)}) and is_jax_model(_block())


def test_weightstore_never_imports_jax_for_a_numpy_model(tmp_path: Path) -> None:
    code = (
        "import sys, numpy as np\n"
        "from weightstore import BurnpackStore, load_from, save_into\n"
        f"path = {str(tmp_path / 'm')!r}\n"
        "save_into({'w': np.ones(2, np.float32)}, BurnpackStore.from_file(path))\n"
        "load_from({'w': np.zeros(2, np.float32)}, BurnpackStore.from_file(path + '.bpk'))\n"
        "import json; print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('jax', 'jaxlib', 'flax'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == []


def _leaf(model: Any, path: str) -> Any:
    node = model
    for part in path.split("."):
        node = node[int(part)] if part.isdigit() else getattr(node, part)
    return node.get_value()
