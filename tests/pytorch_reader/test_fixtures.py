"""Burn's real PyTorch files (shared/fixtures/burn): the names, shapes, dtypes and values Burn's
tests expect, and, where torch is installed, every tensor bit for bit against `torch.load`.
Each test skips when ``../shared/fixtures/burn`` is absent."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import BURN_FIXTURES, burn_fixture
from tests.pytorch_reader._support import assert_same, flatten
from weightstore.errors import KeyNotFoundError, UnsupportedFormatError
from weightstore.pytorch_reader import PytorchReader


def read(relative: str, top_level_key: str | None = None) -> dict[str, np.ndarray[Any, Any]]:
    with PytorchReader(burn_fixture(relative), top_level_key) as reader:
        return {name: tensor.to_numpy() for name, tensor in reader.tensors().items()}


def dtypes_and_shapes(relative: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    with PytorchReader(burn_fixture(relative)) as reader:
        return {n: (t.dtype.name, t.shape) for n, t in reader.tensors().items()}


# -- 8.2 reader fixtures ------------------------------------------------------------------------

SINGLE: list[tuple[str, str, list[Any]]] = [
    ("float32.pt", "F32", [1.0, 2.5, -3.7, 0.0]),
    ("float64.pt", "F64", [1.1, 2.2, 3.3]),
    ("int64.pt", "I64", [100, -200, 300, 0]),
    ("int32.pt", "I32", [10, 20, -30]),
    ("int16.pt", "I16", [1000, -2000, 3000]),
    ("int8.pt", "I8", [127, -128, 0, 50]),
    ("uint8.pt", "U8", [0, 128, 255, 42]),
    ("bool.pt", "BOOL", [True, False, True, True, False]),
    ("float16.pt", "F16", [1.5, -2.25, 3.125]),
    ("bfloat16.pt", "BF16", [1.5, -2.5, 3.5]),
    ("tar_float32.tar", "F32", [1.0, 2.5, -3.7, 0.0]),
    ("tar_float64.tar", "F64", [1.1, 2.2, 3.3]),
    ("tar_int64.tar", "I64", [100, -200, 300, 0]),
]


@pytest.mark.parametrize(("name", "dtype", "values"), SINGLE, ids=[row[0] for row in SINGLE])
def test_single_tensor_files(name: str, dtype: str, values: list[Any]) -> None:
    assert dtypes_and_shapes(f"reader/{name}") == {"tensor": (dtype, (len(values),))}
    got = read(f"reader/{name}")["tensor"]
    expected = np.array(values, dtype=got.dtype)
    np.testing.assert_array_equal(got, expected)  # exact: each literal rounds as torch rounded it


def test_zip_metadata_as_burn_expects_it() -> None:
    with PytorchReader(burn_fixture("reader/float32.pt")) as reader:
        meta = reader.metadata()
    assert (meta.format, meta.byte_order, meta.tensor_count, meta.total_bytes) == (
        "zip",
        "little",
        1,
        16,
    )


def test_shapes_and_row_major_values() -> None:
    np.testing.assert_array_equal(read("reader/tensor_2d.pt")["tensor"], [[1, 2], [3, 4], [5, 6]])
    np.testing.assert_array_equal(
        read("reader/tar_2d_tensor.tar")["matrix"], np.arange(1, 13).reshape(3, 4)
    )
    cube = read("reader/tensor_3d.pt")["tensor"]
    assert cube.shape == (2, 3, 4) and cube.flat[0] == pytest.approx(19.26915, abs=1e-5)
    assert read("reader/tensor_4d.pt")["tensor"].shape == (2, 3, 2, 2)
    large = read("reader/large_shape.pt")["tensor"].ravel()
    assert (large.size, large[0], large[5050], large[9999], large.sum()) == (10_000, 1, 2, 3, 6)
    assert read("reader/empty.pt")["tensor"].shape == (0,)
    scalar = read("reader/scalar.pt")["tensor"]
    assert scalar.shape == () and scalar == 42.0


def test_state_dicts_and_nesting() -> None:
    state = read("reader/state_dict.pt")
    assert {n: a.shape for n, a in state.items()} == {
        "weight": (3, 4),
        "bias": (3,),
        "running_mean": (3,),
        "running_var": (3,),
    }
    assert not state["running_mean"].any() and (state["running_var"] == 1).all()
    nested = dtypes_and_shapes("reader/nested_dict.pt")
    assert {n: s for n, (_, s) in nested.items()} == {
        "layer1.weight": (2, 3),
        "layer1.bias": (2,),
        "layer2.weight": (4, 2),
        "layer2.bias": (4,),
    }
    structure = dtypes_and_shapes("reader/complex_structure.pt")
    assert structure["state.encoder.layer_0.weight"][1] == (4, 3)
    assert structure["state.decoder.weight"][1] == (3, 2)
    with PytorchReader(burn_fixture("reader/complex_structure.pt")) as reader:
        assert reader.load_object("metadata") == {"version": 1, "name": "test_model"}
        assert reader.load_object("config") == {"hidden_size": 4, "num_layers": 2}


def test_a_training_checkpoint() -> None:
    path = burn_fixture("reader/checkpoint.pt")
    with PytorchReader(path) as reader:
        assert reader.names() == [
            "model_state_dict.fc1.weight",
            "model_state_dict.fc1.bias",
            "model_state_dict.fc2.weight",
            "model_state_dict.fc2.bias",
            "optimizer_state_dict.state.0.momentum_buffer",
        ]
        assert reader.load_object("epoch") == 42
        assert reader.load_object("loss") == pytest.approx(0.123)
        with pytest.raises(KeyNotFoundError) as caught:
            reader.load_object("missing")
        assert caught.value.key == "missing" and "epoch" in caught.value.available
    with PytorchReader(path, top_level_key="model_state_dict") as reader:
        assert reader.names() == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
        assert reader.tensor("fc1.weight").shape == (10, 5)


def test_mixed_dtypes_specials_and_extremes() -> None:
    mixed = read("reader/mixed_types.pt")
    assert {n: a.dtype.str for n, a in mixed.items()} == {
        "float32": "<f4",
        "int64": "<i8",
        "bool": "|b1",
        "float64": "<f8",
    }
    assert mixed["int64"].tolist() == [100, 200] and mixed["bool"].tolist() == [True, False]
    special = read("reader/special_values.pt")["tensor"]
    assert math.isnan(special[0]) and special[1:].tolist() == [math.inf, -math.inf, 0, 1]
    extreme = read("reader/extreme_values.pt")["tensor"]
    np.testing.assert_allclose(extreme, np.float32([1e-30, 1e30, -1e-30, -1e30]))


def test_parameters_and_buffers() -> None:
    with PytorchReader(burn_fixture("reader/parameter.pt")) as reader:
        assert reader.names() == ["param"]
        assert reader.tensor("param").is_parameter and reader.get("param").shape == (3, 3)
    buffers = read("reader/buffers.pt")
    assert buffers["buffer1"].dtype == np.int32 and buffers["buffer1"].tolist() == [1, 2, 3]
    assert buffers["buffer2"].tolist() == [True, False]


def test_the_broken_file() -> None:
    with pytest.raises(UnsupportedFormatError, match="pickle"):
        PytorchReader(burn_fixture("reader/broken.pt"))


def test_legacy_files() -> None:
    with PytorchReader(burn_fixture("reader/simple_legacy.pt")) as reader:
        meta = reader.metadata()
        assert (meta.format, meta.tensor_count, meta.pytorch_version) == ("legacy", 3, None)
        assert meta.total_bytes > 0
        assert reader.get("weight").shape == (2, 3)
        assert reader.get("bias").tolist() == [1, 1]
        assert reader.get("running_mean").tolist() == [0, 0]
    with PytorchReader(burn_fixture("reader/legacy_uncloned_views.pt")) as reader:
        first, second = reader.get("tensor1"), reader.get("tensor2")
        assert first.tolist() == list(range(10, 20)) and second.tolist() == list(range(50, 60))
        # one 100-element storage; its legacy blob is misaligned, so the views are copies
        assert reader.tensor("tensor1").storage is not None
        assert reader.tensor("tensor1").storage.key == reader.tensor("tensor2").storage.key
    offsets = read("reader/legacy_with_offsets.pt")
    np.testing.assert_allclose(offsets["tensor1"], 1 + np.arange(10) / 100, rtol=1e-6)
    np.testing.assert_allclose(offsets["tensor2"], 2 + np.arange(5) / 10, rtol=1e-6)
    np.testing.assert_allclose(offsets["tensor3"], 3 + np.arange(5) / 10, rtol=1e-6)
    shared = read("reader/legacy_shared_storage.pt")
    assert {n: a.size for n, a in shared.items()} == {"view1": 10, "view2": 20, "view3": 10}


def test_tar_files() -> None:
    with PytorchReader(burn_fixture("reader/tar_weight_bias.tar")) as reader:
        assert reader.metadata().format == "tar"
        np.testing.assert_array_equal(
            reader.get("weight"), np.float32([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]])
        )
        np.testing.assert_array_equal(reader.get("bias"), np.float32([0.01, 0.02]))
    multi = read("reader/tar_multi_dtype.tar")
    np.testing.assert_array_equal(multi["float_tensor"], np.float32([1.5, 2.5, 3.5]))
    np.testing.assert_array_equal(multi["double_tensor"], [1.111, 2.222])
    assert multi["int_tensor"].dtype == np.int64
    assert multi["int_tensor"].tolist() == [10, 20, 30, 40]


# -- 8.1 pytorch-tests, 8.3 store, 8.5 import-model-weights -------------------------------------


def test_layer_fixtures_names_and_shapes() -> None:
    shapes = {
        "pytorch-tests/conv1d/conv1d.pt": {
            "conv1.weight": (2, 2, 2),
            "conv1.bias": (2,),
            "conv2.weight": (2, 2, 2),
        },
        "pytorch-tests/conv2d/conv2d.pt": {
            "conv1.weight": (2, 2, 2, 2),
            "conv1.bias": (2,),
            "conv2.weight": (2, 2, 2, 2),
        },
        "pytorch-tests/conv_transpose1d/conv_transpose1d.pt": {
            "conv1.weight": (2, 2, 2),
            "conv1.bias": (2,),
            "conv2.weight": (2, 2, 2),
        },
        "pytorch-tests/enum_module/enum_depthwise_false.pt": {
            "conv.weight": (2, 2, 3, 3),
            "conv.bias": (2,),
        },
        "pytorch-tests/enum_module/enum_depthwise_true.pt": {
            "conv.dconv.weight": (2, 1, 3, 3),
            "conv.dconv.bias": (2,),
            "conv.pconv.weight": (2, 2, 1, 1),
            "conv.pconv.bias": (2,),
        },
        "pytorch-tests/linear/linear.pt": {
            "fc1.weight": (3, 2),
            "fc1.bias": (3,),
            "fc2.weight": (4, 3),
        },
        "pytorch-tests/linear/linear_with_bias.pt": {"fc1.weight": (3, 2), "fc1.bias": (3,)},
        "pytorch-tests/embedding/embedding.pt": {"embed.weight": (10, 3)},
        "pytorch-tests/key_remap/key_remap.pt": {
            "conv.conv1.weight": (2, 2, 2, 2),
            "conv.conv1.bias": (2,),
            "conv.conv2.weight": (2, 2, 2, 2),
        },
        "store/model_without_enum_variants.pt": {
            "feature.weight": (64, 3),
            "feature.bias": (64,),
            "classifier.weight": (10, 64),
            "classifier.bias": (10,),
        },
    }
    for relative, expected in shapes.items():
        assert {n: s for n, (_, s) in dtypes_and_shapes(relative).items()} == expected, relative


def test_layer_fixture_values() -> None:
    norm = read("pytorch-tests/batch_norm/batch_norm2d.pt")
    assert norm["norm1.num_batches_tracked"].dtype == np.int64
    assert norm["norm1.num_batches_tracked"].shape == () and norm["norm1.num_batches_tracked"] == 1
    out = (0.7 - norm["norm1.running_mean"]) / np.sqrt(norm["norm1.running_var"] + 1e-5)
    np.testing.assert_allclose(
        out * norm["norm1.weight"] + norm["norm1.bias"], 0.68515635, rtol=1e-6
    )  # Burn's expected BatchNorm output
    assert read("pytorch-tests/boolean/boolean.pt")["buffer"].tolist() == [True, False, True]
    assert (read("pytorch-tests/buffer/buffer.pt")["buffer"] == np.ones((3, 3))).all()
    integer = read("pytorch-tests/integer/integer.pt")["buffer"]
    assert integer.dtype == np.int64 and integer.tolist() == [1, 2, 3]
    linear = read("pytorch-tests/linear/linear.pt")["fc1.weight"]
    np.testing.assert_allclose(linear.flat[:2], [0.36434609, -0.31210154], rtol=1e-6)
    embed = read("pytorch-tests/embedding/embedding.pt")["embed.weight"]
    np.testing.assert_allclose(embed[0], [-1.5255959, -0.7502318, -0.6539809], rtol=1e-6)
    np.testing.assert_allclose(embed[1], [-1.6094849, -0.10016718, -0.6091889], rtol=1e-6)
    group = read("pytorch-tests/group_norm/group_norm.pt")
    assert group["norm1.weight"].tolist() == [1] * 6 and group["norm1.bias"].tolist() == [0] * 6
    layer = read("pytorch-tests/layer_norm/layer_norm.pt")
    assert layer["norm1.weight"].tolist() == [1, 1] and layer["norm1.bias"].tolist() == [0, 0]


def test_nested_and_remapped_fixtures() -> None:
    nested = read("pytorch-tests/complex_nested/complex_nested.pt")
    assert len(nested) == 23
    assert nested["conv_blocks.0.conv.weight"].shape == (4, 2, 3, 2)
    assert nested["conv_blocks.1.conv.weight"].shape == (6, 4, 3, 2)
    assert (nested["fc1.weight"].shape, nested["fc2.weight"].shape) == ((12, 120), (10, 12))
    assert nested["norm1.num_batches_tracked"] == 2
    chained = dtypes_and_shapes("pytorch-tests/key_remap_chained/key_remap.pt")
    assert chained["conv.weight"][1] == (6, 3, 3, 3)
    assert chained["layer.1.block.0.weight"][1] == (6, 6, 1, 1)
    assert chained["layer.0.block.1.num_batches_tracked"] == ("I64", ())
    fc = dtypes_and_shapes("pytorch-tests/non_contiguous_indexes/non_contiguous_indexes.pt")
    assert list(fc) == [f"fc.{i}.{p}" for i in (0, 2, 4, 6, 8) for p in ("weight", "bias")]
    assert fc["fc.4.weight"][1] == (2, 2, 3, 3)
    fields = read("pytorch-tests/missing_module_field/missing_module_field.pt")
    assert list(fields) == ["conv1.weight", "conv1.bias"]


def test_top_level_keys_and_configs() -> None:
    relative = "pytorch-tests/top_level_key/top_level_key.pt"
    assert list(read(relative)) == ["my_state_dict.conv1.weight", "my_state_dict.conv1.bias"]
    assert list(read(relative, "my_state_dict")) == ["conv1.weight", "conv1.bias"]
    with PytorchReader(burn_fixture("pytorch-tests/config/weights_with_config.pt")) as reader:
        assert reader.names() == ["my_model.fc1.weight", "my_model.fc1.bias", "my_model.fc2.weight"]
        assert reader.load_object("my_config") == {
            "n_head": 2,
            "n_layer": 3,
            "d_model": 512,
            "some_float": 0.1,
            "some_int": 1,
            "some_bool": True,
            "some_str": "hello",
            "some_list_int": [1, 2, 3],
            "some_list_str": ["hello", "world"],
            "some_list_float": [0.1, 0.2, 0.3],
            "some_dict": {"some_key": "some_value"},
        }
        config = reader.load_object("my_config")
        assert type(config["some_bool"]) is bool and type(config["d_model"]) is int
        assert reader.load_object()["my_config"] == config
    debug = PytorchReader(burn_fixture("pytorch-tests/debug_test.pt"))
    assert debug.metadata().format_version is not None
    assert debug.metadata().storage_alignment is not None
    assert debug.get("test").tolist() == [1, 2, 3, 4]
    debug.close()
    assert read("pytorch-tests/test_int.pt")["test"].tolist() == [1, 2, 3]


def test_the_trained_mnist_model() -> None:
    tensors = dtypes_and_shapes("import-model-weights/mnist.pt")
    assert {n: s for n, (_, s) in tensors.items() if n.endswith("weight")} == {
        "conv1.weight": (8, 1, 3, 3),
        "conv2.weight": (16, 8, 3, 3),
        "conv3.weight": (24, 16, 3, 3),
        "norm1.weight": (24,),
        "fc1.weight": (32, 11616),
        "fc2.weight": (10, 32),
        "norm2.weight": (10,),
    }
    with PytorchReader(burn_fixture("import-model-weights/mnist.pt")) as reader:
        assert reader.tensor("conv1.weight").device == "mps"  # saved on a Mac; read on the CPU
        assert reader.get("norm1.num_batches_tracked") == 3752
        # The .safetensors twin comes from another training run: names and shapes agree only.
        safetensors_numpy = pytest.importorskip("safetensors.numpy")
        twin = safetensors_numpy.load_file(burn_fixture("import-model-weights/mnist.safetensors"))
        assert {n: a.shape for n, a in twin.items()} == {n: s for n, (_, s) in tensors.items()}


# -- everything, against torch.load -------------------------------------------------------------


def _fixtures() -> Iterator[str]:
    for folder in ("reader", "pytorch-tests", "store", "import-model-weights"):
        for path in sorted((BURN_FIXTURES / folder).rglob("*")):
            if path.suffix in (".pt", ".tar") and path.name != "broken.pt":
                yield path.relative_to(BURN_FIXTURES).as_posix()


@pytest.mark.parametrize("relative", list(_fixtures()) or ["reader/float32.pt"])
def test_every_fixture_matches_torch_load(relative: str) -> None:
    torch = pytest.importorskip("torch")
    path: Path = burn_fixture(relative)
    if relative.endswith(".tar"):
        pytest.skip("Burn's hand-made tar files are not loadable by torch itself")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = flatten(torch.load(path, weights_only=False, map_location="cpu"))
    with PytorchReader(path) as reader:
        assert reader.names() == list(expected)
        for name, tensor in expected.items():
            assert_same(reader.get(name), tensor, name)
