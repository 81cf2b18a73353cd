"""The Flax adapters one snapshot at a time: names, layouts, both directions, laziness.

NumPy only: these run without jax. What the converted weights compute is test_interop.py's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from weightstore import SafetensorsStore, TensorSnapshot, save_into
from weightstore.adapters import (
    Adapter,
    BurnToFlaxAdapter,
    FlaxToBurnAdapter,
    FlaxToPyTorchAdapter,
    PyTorchToFlaxAdapter,
)
from weightstore.errors import ModuleTypeNeededError

_GENERATOR = np.random.default_rng(0)


def _snapshot(name: str, shape: tuple[int, ...], module_type: str | None) -> TensorSnapshot:
    data = _GENERATOR.standard_normal(shape).astype(np.float32)
    container = () if module_type is None else ("Net", module_type)
    return TensorSnapshot.from_array(name, data, container)


# adapter, owning module type, name in, shape in -> name out, how the data moves (axes)
SAVES: list[tuple[Adapter, str | None, str, tuple[int, ...], str, tuple[int, ...] | None]] = [
    (PyTorchToFlaxAdapter(), "Linear", "fc.weight", (4, 3), "fc.kernel", (1, 0)),
    (PyTorchToFlaxAdapter(), "Linear", "fc.bias", (4,), "fc.bias", None),
    (PyTorchToFlaxAdapter(), "Conv2d", "c.weight", (8, 3, 5, 2), "c.kernel", (2, 3, 1, 0)),
    (PyTorchToFlaxAdapter(), "Conv1d", "c.weight", (8, 3, 5), "c.kernel", (2, 1, 0)),
    (PyTorchToFlaxAdapter(), "Conv3d", "c.weight", (8, 3, 5, 2, 2), "c.kernel", (2, 3, 4, 1, 0)),
    (PyTorchToFlaxAdapter(), "Embedding", "e.weight", (10, 4), "e.embedding", None),
    (PyTorchToFlaxAdapter(), "LayerNorm", "n.weight", (4,), "n.scale", None),
    (PyTorchToFlaxAdapter(), "RMSNorm", "n.weight", (4,), "n.scale", None),
    (PyTorchToFlaxAdapter(), "BatchNorm2d", "b.weight", (4,), "b.scale", None),
    (PyTorchToFlaxAdapter(), "BatchNorm2d", "b.running_mean", (4,), "b.mean", None),
    (PyTorchToFlaxAdapter(), "BatchNorm1d", "b.running_var", (4,), "b.var", None),
    (
        PyTorchToFlaxAdapter(),
        "BatchNorm2d",
        "b.num_batches_tracked",
        (),
        "b.num_batches_tracked",
        None,
    ),
    (PyTorchToFlaxAdapter(), "ConvTranspose2d", "t.weight", (3, 8, 2, 2), "t.weight", None),
    (PyTorchToFlaxAdapter(), "MyBlock", "m.weight", (4, 3), "m.weight", None),
    (PyTorchToFlaxAdapter(), None, "fc.weight", (4, 3), "fc.weight", None),
    (FlaxToPyTorchAdapter(), "Linear", "fc.kernel", (3, 4), "fc.weight", (1, 0)),
    (FlaxToPyTorchAdapter(), "Dense", "fc.kernel", (3, 4), "fc.weight", (1, 0)),
    (FlaxToPyTorchAdapter(), "Conv", "c.kernel", (5, 2, 3, 8), "c.weight", (3, 2, 0, 1)),
    (FlaxToPyTorchAdapter(), "Embed", "e.embedding", (10, 4), "e.weight", None),
    (FlaxToPyTorchAdapter(), "LayerNorm", "n.scale", (4,), "n.weight", None),
    (FlaxToPyTorchAdapter(), "BatchNorm", "b.mean", (4,), "b.running_mean", None),
    (FlaxToPyTorchAdapter(), "BatchNorm", "b.var", (4,), "b.running_var", None),
    (BurnToFlaxAdapter(), "Linear", "fc.weight", (3, 4), "fc.kernel", None),  # [in, out] both
    (BurnToFlaxAdapter(), "Conv2d", "c.weight", (8, 3, 5, 2), "c.kernel", (2, 3, 1, 0)),
    (BurnToFlaxAdapter(), "BatchNorm", "b.gamma", (4,), "b.scale", None),
    (BurnToFlaxAdapter(), "BatchNorm", "b.beta", (4,), "b.bias", None),
    (BurnToFlaxAdapter(), "LayerNorm", "n.beta", (4,), "n.bias", None),
    (FlaxToBurnAdapter(), "Linear", "fc.kernel", (3, 4), "fc.weight", None),
    (FlaxToBurnAdapter(), "Linear", "fc.bias", (4,), "fc.bias", None),
    (FlaxToBurnAdapter(), "LayerNorm", "n.scale", (4,), "n.gamma", None),
    (FlaxToBurnAdapter(), "LayerNorm", "n.bias", (4,), "n.beta", None),
    (FlaxToBurnAdapter(), "BatchNorm", "b.var", (4,), "b.running_var", None),
]


@pytest.mark.parametrize(
    ("adapter", "module_type", "name", "shape", "renamed", "axes"),
    SAVES,
    ids=[f"{type(row[0]).__name__}-{row[1]}-{row[2]}" for row in SAVES],
)
def test_a_save_renames_and_lays_out_each_layer(
    adapter: Adapter,
    module_type: str | None,
    name: str,
    shape: tuple[int, ...],
    renamed: str,
    axes: tuple[int, ...] | None,
) -> None:
    snapshot = _snapshot(name, shape, module_type)
    adapted = adapter.adapt(snapshot)
    expected = snapshot.to_numpy() if axes is None else snapshot.to_numpy().transpose(axes)
    assert adapted.full_path == renamed
    assert adapted.shape == expected.shape
    np.testing.assert_array_equal(adapted.to_numpy(), expected)
    assert adapted.to_numpy().flags.c_contiguous


@pytest.mark.parametrize(
    ("forth", "back"),
    [
        (PyTorchToFlaxAdapter(), FlaxToPyTorchAdapter()),
        (BurnToFlaxAdapter(), FlaxToBurnAdapter()),
    ],
)
@pytest.mark.parametrize(
    ("flax_type", "other_type"), [("Linear", "Linear"), ("Conv", "Conv2d"), ("Dense", "Linear")]
)
def test_there_and_back_is_the_identity(
    forth: Adapter, back: Adapter, flax_type: str, other_type: str
) -> None:
    shape = (4, 3) if other_type == "Linear" else (8, 3, 5, 2)
    original = _snapshot("layer.weight", shape, other_type)
    flax = forth.adapt(original)
    again = back.adapt(
        TensorSnapshot(flax.path, flax.dtype, flax.shape, flax.load, ("M", flax_type))
    )
    assert again.full_path == "layer.weight" and again.shape == shape
    np.testing.assert_array_equal(again.to_numpy(), original.to_numpy())


# A load hands the adapter the model's name and module type with the file's data.
LOADS: list[tuple[Adapter, str, str, str | None, tuple[int, ...] | None]] = [
    # adapter, model module type, model leaf, the file's name for it, axes
    (PyTorchToFlaxAdapter(), "Linear", "kernel", "weight", (1, 0)),
    (PyTorchToFlaxAdapter(), "Conv", "kernel", "weight", (2, 3, 1, 0)),
    (PyTorchToFlaxAdapter(), "Embed", "embedding", "weight", None),
    (PyTorchToFlaxAdapter(), "BatchNorm", "scale", "weight", None),
    (PyTorchToFlaxAdapter(), "BatchNorm", "bias", None, None),
    (PyTorchToFlaxAdapter(), "BatchNorm", "mean", "running_mean", None),
    (PyTorchToFlaxAdapter(), "RMSNorm", "scale", "weight", None),
    (FlaxToPyTorchAdapter(), "Linear", "weight", "kernel", (1, 0)),
    (FlaxToPyTorchAdapter(), "Conv2d", "weight", "kernel", (3, 2, 0, 1)),
    (FlaxToPyTorchAdapter(), "Embedding", "weight", "embedding", None),
    (FlaxToPyTorchAdapter(), "BatchNorm2d", "running_var", "var", None),
    (FlaxToPyTorchAdapter(), "LayerNorm", "weight", "scale", None),
    (BurnToFlaxAdapter(), "Linear", "kernel", "weight", None),
    (BurnToFlaxAdapter(), "Linear", "bias", None, None),
    (BurnToFlaxAdapter(), "BatchNorm", "bias", "beta", None),
    (BurnToFlaxAdapter(), "LayerNorm", "scale", "gamma", None),
]


@pytest.mark.parametrize(
    ("adapter", "module_type", "leaf", "file_name", "axes"),
    LOADS,
    ids=[f"{type(row[0]).__name__}-{row[1]}-{row[2]}" for row in LOADS],
)
def test_a_load_finds_the_files_name_and_lays_out_its_data(
    adapter: Adapter,
    module_type: str,
    leaf: str,
    file_name: str | None,
    axes: tuple[int, ...] | None,
) -> None:
    assert adapter.alternative_name(leaf, module_type) == file_name
    shape = {2: (4, 3), 4: (8, 3, 5, 2)}.get(len(axes) if axes else 0, (4,))
    seen = _snapshot(f"layer.{leaf}", shape, module_type)  # the model's name, the file's data
    adapted = adapter.adapt_for_load(seen, seen.dtype)
    assert adapted.full_path == f"layer.{leaf}"
    expected = seen.to_numpy() if axes is None else seen.to_numpy().transpose(axes)
    np.testing.assert_array_equal(adapted.to_numpy(), expected)


def test_adapting_reads_nothing_until_the_data_is_asked_for() -> None:
    reads: list[int] = []

    def load() -> Any:
        reads.append(1)
        return np.zeros((4, 3), np.float32)

    snapshot = TensorSnapshot(("fc", "weight"), _snapshot("x", (1,), None).dtype, (4, 3), load,
                              ("Net", "Linear"))  # fmt: skip
    adapted = PyTorchToFlaxAdapter().adapt(snapshot)
    assert reads == [] and adapted.shape == (3, 4)
    adapted.to_numpy()
    assert reads == [1]


def test_unknown_names_and_modules_have_no_alternative() -> None:
    assert PyTorchToFlaxAdapter().alternative_name("kernel", "MyBlock") is None
    assert PyTorchToFlaxAdapter().alternative_name("bias", "Linear") is None
    assert FlaxToPyTorchAdapter().alternative_name("weight", None) is None
    assert repr(FlaxToBurnAdapter()) == "FlaxToBurnAdapter()"


def test_a_flax_layout_save_from_a_store_types_its_tensors_by_names_and_shapes(
    tmp_path: Any,
) -> None:
    source = SafetensorsStore.from_file(tmp_path / "a.safetensors")
    weight = np.arange(6, dtype=np.float32).reshape(2, 3)
    save_into({"fc": {"weight": weight}}, source)  # 2-D alone: a Linear or an Embedding
    target = SafetensorsStore.from_file(tmp_path / "b.safetensors")
    with pytest.raises(ModuleTypeNeededError, match="PyTorchToFlaxAdapter treats them differ"):
        save_into(source, target.with_to_adapter(PyTorchToFlaxAdapter()))
    assert not (tmp_path / "b.safetensors").exists()
    save_into({"fc": {"weight": weight, "bias": np.zeros(2, np.float32)}}, source.overwrite())
    with_bias = SafetensorsStore.from_file(tmp_path / "a.safetensors")  # with its bias: a Linear
    save_into(with_bias, target.with_to_adapter(PyTorchToFlaxAdapter()))
    kernel = SafetensorsStore.from_file(tmp_path / "b.safetensors").get_tensor("fc.kernel")
    assert kernel is not None
    np.testing.assert_array_equal(kernel.to_numpy(), weight.T)
