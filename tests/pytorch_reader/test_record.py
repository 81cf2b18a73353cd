"""The reader's value records (on `weightstore.base._record`): they behave as the frozen
dataclasses they replaced, and no class on the load path is a dataclass (generating one costs
a millisecond)."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

from weightstore.pytorch_reader import GlobalRef, LazyTensor, TorchDevice, TorchDType
from weightstore.pytorch_reader._loaded import ArchiveInfo
from weightstore.pytorch_reader._opcodes import OPCODES
from weightstore.pytorch_reader._reader import PytorchMetadata

LOAD_PATH_MODULES = [
    "weightstore.base._record", *(f"weightstore.pytorch_reader.{name}" for name in (
        "_archive", "_globals", "_layout", "_loaded", "_machine", "_objects", "_opcodes",
        "_reader", "_rebuild", "_tensors", "_walk", "_zip",
    )),
]  # fmt: skip


def _tensor() -> LazyTensor:
    return LazyTensor((2, 3), (3, 1), 0, "float32", name="w")


def test_fields_cannot_be_assigned_or_deleted() -> None:
    tensor = _tensor()
    with pytest.raises(AttributeError, match="cannot assign to field 'name'"):
        tensor.name = "other"
    with pytest.raises(AttributeError, match="cannot delete field 'shape'"):
        del tensor.shape
    assert tensor.name == "w"


def test_replace_changes_only_the_named_fields() -> None:
    tensor = _tensor()
    copy = tensor.replace(is_parameter=True, requires_grad=True)
    assert (copy.is_parameter, copy.requires_grad, tensor.is_parameter) == (True, True, False)
    assert (copy.shape, copy.torch_dtype, copy.name) == ((2, 3), "float32", "w")
    assert tensor.with_name("v").name == "v"
    with pytest.raises(TypeError, match="no field 'colour'"):
        tensor.replace(colour="red")


def test_value_records_compare_and_hash_by_fields() -> None:
    assert GlobalRef("os", "system") == GlobalRef("os", "system")
    assert GlobalRef("os", "system") != GlobalRef("os", "popen")
    assert len({GlobalRef("a", "b"), GlobalRef("a", "b"), TorchDType("float32")}) == 2
    assert TorchDType("float32") != GlobalRef("torch", "float32")
    assert ArchiveInfo("zip", pickle_protocol=2) == ArchiveInfo("zip", "little", 2)


def test_tensors_compare_by_identity() -> None:
    first, second = _tensor(), _tensor()
    assert first == first and first != second
    assert len({first, second}) == 2


def test_repr_lists_fields_in_declaration_order() -> None:
    assert repr(TorchDevice("cuda", 1)) == "TorchDevice(type='cuda', index=1)"
    assert repr(OPCODES[0]).startswith("Opcode(name='INT', code=73, ")


def test_metadata_is_still_a_mapping_of_its_fields() -> None:
    meta = PytorchMetadata("zip", "little", None, "1", "3", 64, 2, 5, 80, None)
    assert list(meta)[:3] == ["format", "byte_order", "pytorch_version"]
    assert meta["total_bytes"] == 80 and len(meta) == 10
    assert meta == PytorchMetadata("zip", "little", None, "1", "3", 64, 2, 5, 80, None)


@pytest.mark.parametrize("name", LOAD_PATH_MODULES)
def test_no_class_on_the_load_path_is_a_dataclass(name: str) -> None:
    module = importlib.import_module(name)
    found = [
        value.__name__
        for value in vars(module).values()
        if isinstance(value, type)
        and value.__module__ == module.__name__
        and dataclasses.is_dataclass(value)
    ]
    assert found == []
