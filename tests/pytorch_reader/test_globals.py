"""Stand-ins (`_globals.py`, `_rebuild.py`): known names build plain values, others stay inert."""

from __future__ import annotations

import argparse
import collections
import pickle
from typing import Any

import numpy as np
import pytest

from tests.pytorch_reader._support import (
    op_call,
    op_global,
    op_int,
    op_str,
    op_tuple,
    pickle_of,
)
from weightstore.dtypes import from_name
from weightstore.errors import DescriptorError, DTypeError, PickleError
from weightstore.pytorch_reader import (
    GlobalRef,
    InertObject,
    LazyTensor,
    TorchDevice,
    TorchDType,
    UnreadableTensor,
)
from weightstore.pytorch_reader._machine import run_pickle
from weightstore.pytorch_reader._objects import StorageClass
from weightstore.pytorch_reader._rebuild import storage_from_pid
from weightstore.pytorch_reader._tensors import StorageRef


def load(data: bytes) -> Any:
    return run_pickle(data, persistent_load=lambda pid: storage_from_pid(pid, None))[0]


def test_an_unknown_global_is_recorded_not_called() -> None:
    got = load(pickle_of(op_call(op_global("somewhere.deep", "Thing"), op_int(1), op_str("x"))))
    assert isinstance(got, InertObject)
    assert got.callee == GlobalRef("somewhere.deep", "Thing")
    assert (got.args, got.how, got.class_name) == ((1, "x"), "call", "somewhere.deep.Thing")
    assert repr(got) == "<inert somewhere.deep.Thing object>"


def test_calling_an_inert_result_is_inert_too() -> None:
    getter = op_call(op_global("builtins", "getattr"), op_global("os", "path"), op_str("join"))
    got = load(pickle_of(op_call(getter, op_str("a"))))
    assert isinstance(got, InertObject) and isinstance(got.callee, InertObject)


class Plain:
    def __init__(self) -> None:
        self.a, self.b = 1, [2]


@pytest.mark.parametrize("protocol", [0, 1, 2, 4])
def test_plain_objects_keep_class_and_attributes(protocol: int) -> None:
    got = load(pickle.dumps(Plain(), protocol=protocol))
    assert isinstance(got, InertObject)
    assert got.class_name == f"{__name__}.Plain"
    assert got.attributes == {"a": 1, "b": [2]}


@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_namespace_is_rebuilt(protocol: int) -> None:
    got = load(pickle.dumps(argparse.Namespace(lr=0.1, name="run"), protocol=protocol))
    assert isinstance(got, argparse.Namespace)
    assert vars(got) == {"lr": 0.1, "name": "run"}


def test_ordered_dict_attributes_stay_attributes() -> None:
    # state_dict() puts `_metadata` on its OrderedDict; Burn merges it in as a key.
    value = collections.OrderedDict(w=1)
    value._metadata = {"": {"version": 1}}  # type: ignore[attr-defined]
    got = load(pickle.dumps(value, protocol=2))
    assert list(got) == ["w"]
    assert got._metadata == {"": {"version": 1}}


def test_defaultdict_becomes_a_dict_without_its_factory() -> None:
    got = load(pickle.dumps(collections.defaultdict(list, {"a": [1]}), protocol=2))
    assert type(got) is dict and got == {"a": [1]}


def test_counter_and_python2_names() -> None:
    assert load(pickle.dumps(collections.Counter("aab"), protocol=2)) == {"a": 2, "b": 1}
    py2_set = b"c__builtin__\nset\n((lp0\nI1\naI2\natR."
    assert load(py2_set) == {1, 2}
    assert load(pickle_of(op_call(op_global("__builtin__", "xrange"), op_int(3)))) == range(3)


@pytest.mark.parametrize(
    "array",
    [
        np.arange(6, dtype="<f4").reshape(2, 3),
        np.arange(6, dtype=">i8").reshape(3, 2),
        np.asfortranarray(np.arange(12.0).reshape(3, 4)),
        np.array([True, False]),
        np.array([1 + 2j], dtype="c16"),
        np.array(["ab", "c"]),
        np.zeros((0, 3), dtype="u2"),
    ],
    ids=lambda a: f"{a.dtype.str}{list(a.shape)}",
)
@pytest.mark.parametrize("protocol", [2, 5])
def test_numpy_arrays(array: np.ndarray[Any, Any], protocol: int) -> None:
    got = load(pickle.dumps(array, protocol=protocol))
    assert isinstance(got, np.ndarray)
    assert got.dtype == array.dtype and got.shape == array.shape
    np.testing.assert_array_equal(got, array)


def test_numpy_scalars() -> None:
    assert load(pickle.dumps(np.float32(2.5), protocol=2)) == np.float32(2.5)
    assert type(load(pickle.dumps(np.int16(-3), protocol=2))) is np.int16


@pytest.mark.parametrize(
    "value",
    [np.array([{"a": 1}, None], dtype=object), np.zeros(2, dtype=[("x", "f4"), ("y", "i2")])],
    ids=["object", "structured"],
)
def test_numpy_arrays_of_objects_or_records_stay_inert(value: np.ndarray[Any, Any]) -> None:
    got = load(pickle.dumps(value, protocol=2))
    assert isinstance(got, InertObject)


def test_codecs_encode_only_plain_text_encodings() -> None:
    assert load(pickle.dumps(b"\x00\xffab", protocol=2)) == b"\x00\xffab"
    hostile = op_call(op_global("_codecs", "encode"), op_str("x"), op_str("hex"))
    with pytest.raises(PickleError, match="encode expects"):
        load(pickle_of(hostile))


@pytest.mark.parametrize(
    "body",
    [
        op_call(op_global("builtins", "slice"), op_str("a")),
        op_call(op_global("builtins", "range")),
        op_call(op_global("builtins", "complex"), op_str("1j")),
        op_call(op_global("collections", "OrderedDict"), op_int(3)),
        op_call(op_global("builtins", "set"), op_int(3)),
        op_call(op_global("torch", "Size"), op_tuple(op_str("3"))),
    ],
)
def test_stand_ins_check_their_arguments(body: bytes) -> None:
    with pytest.raises(PickleError) as caught:
        load(pickle_of(body))
    assert caught.value.opcode == "REDUCE"


def test_torch_values() -> None:
    assert load(pickle_of(op_global("torch", "float"))) == TorchDType("float32")
    assert load(pickle_of(op_global("torch", "bfloat16"))).dtype == from_name("BF16")
    with pytest.raises(DTypeError):
        _ = load(pickle_of(op_global("torch", "qint8"))).dtype
    device = load(pickle_of(op_call(op_global("torch", "device"), op_str("cuda:1"))))
    assert device == TorchDevice("cuda", 1) and str(device) == "cuda:1"
    size = load(pickle_of(op_call(op_global("torch", "Size"), op_tuple(op_int(2), op_int(3)))))
    assert size == (2, 3)
    assert load(pickle_of(op_global("torch.cuda", "HalfStorage"))) == StorageClass(
        "HalfStorage", "float16"
    )


# -- tensor rebuilds, torch-free ----------------------------------------------------------------

STORAGE = op_tuple(
    op_str("storage"), op_global("torch", "FloatStorage"), op_str("0"), op_str("cuda:0"), op_int(12)
)
HOOKS = op_call(op_global("collections", "OrderedDict"))


def rebuild(name: str, *args: bytes, module: str = "torch._utils") -> Any:
    return load(pickle_of(op_call(op_global(module, name), *args)))


def test_rebuild_tensor_v2_records_the_view() -> None:
    size, stride = op_tuple(op_int(3), op_int(2)), op_tuple(op_int(1), op_int(3))
    conj = b"}" + op_str("conj") + b"\x88s"
    tensor = rebuild("_rebuild_tensor_v2", STORAGE, op_int(2), size, stride, b"\x88", HOOKS, conj)
    assert isinstance(tensor, LazyTensor)
    assert (tensor.shape, tensor.stride, tensor.storage_offset) == ((3, 2), (1, 3), 2)
    assert (tensor.torch_dtype, tensor.requires_grad, tensor.conj, tensor.device) == (
        "float32",
        True,
        True,
        "cuda:0",
    )
    assert isinstance(tensor.storage, StorageRef) and tensor.storage.numel == 12


def test_rebuild_tensor_v3_takes_its_dtype_argument() -> None:
    untyped = op_tuple(
        op_str("storage"),
        op_global("torch", "UntypedStorage"),
        op_str("0"),
        op_str("cpu"),
        op_int(8),
    )
    tensor = rebuild(
        "_rebuild_tensor_v3",
        untyped,
        op_int(0),
        op_tuple(op_int(4)),
        op_tuple(op_int(1)),
        b"\x89",
        HOOKS,
        op_global("torch", "uint16"),
    )
    assert tensor.torch_dtype == "uint16" and tensor.nbytes == 8


def test_parameters_and_subclasses_keep_their_tensor() -> None:
    inner = op_call(
        op_global("torch._utils", "_rebuild_tensor_v2"),
        STORAGE,
        op_int(0),
        op_tuple(op_int(12)),
        op_tuple(op_int(1)),
        b"\x89",
        HOOKS,
    )
    param = rebuild("_rebuild_parameter", inner, b"\x88", HOOKS)
    assert param.is_parameter and param.requires_grad
    typed = rebuild(
        "_rebuild_from_type_v2",
        op_global("torch._utils", "_rebuild_tensor_v2"),
        op_global("torch.nn.parameter", "Parameter"),
        op_tuple(STORAGE, op_int(0), op_tuple(op_int(12)), op_tuple(op_int(1)), b"\x89", HOOKS),
        b"}",
        module="torch._tensor",
    )
    assert isinstance(typed, LazyTensor) and typed.is_parameter


def test_a_numpy_backed_device_tensor_reads_from_its_array() -> None:
    array = pickle.dumps(np.arange(4, dtype="<f8"), protocol=2)[2:-1]
    tensor = rebuild(
        "_rebuild_device_tensor_from_numpy",
        array,
        op_global("torch", "float32"),
        op_str("xla:0"),
        b"\x89",
    )
    got = tensor.to_numpy()
    assert got.dtype == np.float32 and got.tolist() == [0, 1, 2, 3]


def test_a_meta_tensor_has_shape_but_no_values() -> None:
    tensor = rebuild(
        "_rebuild_meta_tensor_no_storage",
        op_global("torch", "float16"),
        op_tuple(op_int(2), op_int(3)),
        op_tuple(op_int(3), op_int(1)),
        b"\x89",
    )
    assert tensor.shape == (2, 3) and tensor.device == "meta"
    tensor.validate()
    with pytest.raises(DescriptorError, match="meta tensor"):
        tensor.to_numpy()


@pytest.mark.parametrize(
    "name",
    [
        "_rebuild_sparse_tensor",
        "_rebuild_nested_tensor",
        "_rebuild_wrapper_subclass",
    ],
)
def test_unrepresentable_rebuilds_are_deferred_errors(name: str) -> None:
    got = rebuild(name, op_int(1))
    assert isinstance(got, UnreadableTensor)
    assert got.global_name == f"torch._utils.{name}"


def test_a_quantized_rebuild_checks_its_arguments_as_the_others_do() -> None:
    """Quantized tensors are read now (`test_qtensors.py`); a malformed call is a PickleError."""
    with pytest.raises(PickleError, match="_rebuild_qtensor takes 7 arguments"):
        rebuild("_rebuild_qtensor", op_int(1))


@pytest.mark.parametrize(
    "args",
    [
        (op_int(5), op_int(0), op_tuple(), op_tuple(), b"\x89", HOOKS),
        (STORAGE, op_str("0"), op_tuple(), op_tuple(), b"\x89", HOOKS),
        (STORAGE, op_int(0), op_tuple(op_str("2")), op_tuple(op_int(1)), b"\x89", HOOKS),
        (STORAGE, op_int(0), op_tuple()),
    ],
)
def test_rebuild_argument_types_are_checked(args: tuple[bytes, ...]) -> None:
    with pytest.raises(PickleError, match="_rebuild_tensor_v2"):
        rebuild("_rebuild_tensor_v2", *args)
