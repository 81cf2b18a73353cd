"""Tensors (`_tensors.py`) from files real torch writes: every dtype, every kind of view, every
pickle protocol torch uses, zip and legacy; compared with `torch.load` bit for bit."""

from __future__ import annotations

import gc
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.pytorch_reader._support import assert_same, rewrite_zip
from weightstore.errors import DescriptorError, DTypeError, UnsupportedObjectError
from weightstore.pytorch_reader import PytorchReader

torch = pytest.importorskip("torch")

CLASSIC = [
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
    "complex64",
    "complex128",
]
# Written through `_rebuild_tensor_v3` and an untyped storage.
NEW = [
    "uint16",
    "uint32",
    "uint64",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
]
FORMATS = [("zip", p) for p in (2, 3, 4, 5)] + [("legacy", p) for p in (2, 3, 4, 5)]


def sample(name: str) -> Any:
    dtype = getattr(torch, name)
    base = torch.linspace(-3, 3, 12).reshape(3, 4)
    if dtype.is_complex:
        return torch.complex(base, base.flip(0)).to(dtype)
    if dtype == torch.bool:
        return base > 0
    if name.startswith("uint") or name == "float8_e8m0fnu":
        return (base.abs() * 7 + 1).to(dtype)
    return (base * 5).to(dtype)


def save(obj: Any, path: Path, layout: str = "zip", protocol: int = 2) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save(
            obj, path, _use_new_zipfile_serialization=layout == "zip", pickle_protocol=protocol
        )
    return path


def torch_load(path: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.load(path, weights_only=False, map_location="cpu")


def read_all(path: Path) -> dict[str, np.ndarray[Any, Any]]:
    with PytorchReader(path) as reader:
        return {name: tensor.to_numpy() for name, tensor in reader.tensors().items()}


@pytest.mark.parametrize(("layout", "protocol"), FORMATS)
def test_every_dtype_matches_torch_load(tmp_path: Path, layout: str, protocol: int) -> None:
    tensors = {name: sample(name) for name in CLASSIC + NEW}
    path = save(tensors, tmp_path / "dtypes.pt", layout, protocol)
    got = read_all(path)
    assert list(got) == list(tensors)
    # torch cannot read back the new dtypes from a legacy file it wrote (its legacy loader
    # asks an untyped storage for a dtype); there the saved tensors are the reference.
    reference = torch_load(path) if layout == "zip" else tensors
    if layout == "legacy":
        classic_only = save({n: tensors[n] for n in CLASSIC}, tmp_path / "c.pt", layout, protocol)
        for name, tensor in torch_load(classic_only).items():
            assert_same(got[name], tensor, name)
    for name, tensor in reference.items():
        assert_same(got[name], tensor, name)


def views() -> dict[str, Any]:
    base = torch.arange(48, dtype=torch.float32).reshape(4, 12)
    cube = torch.arange(60, dtype=torch.int16).reshape(3, 4, 5)
    column = torch.arange(4, dtype=torch.float64).reshape(4, 1)
    image = torch.arange(120, dtype=torch.bfloat16).reshape(2, 3, 4, 5)
    return {
        "base": base,
        "transposed": base.t(),
        "sliced": base[1:3, 2:7],
        "strided": base[:, ::3],
        "offset": base.view(-1)[5:17],
        "scalar_view": base[2, 7],
        "empty_view": base[:, 3:3],
        "permuted": cube.permute(2, 0, 1)[1:, :, 2:],
        "expanded": column.expand(4, 6),
        "broadcast_row": torch.arange(5.0).expand(3, 5),
        "channels_last": image.contiguous(memory_format=torch.channels_last),
        "diagonal": base[:, :4].diagonal(),
        "conj": torch.complex(base[0], base[1]).conj(),
        "neg": torch.complex(base[0], base[1]).conj().imag,
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 3),
    }


@pytest.mark.parametrize(("layout", "protocol"), FORMATS)
def test_every_view_matches_torch_load(tmp_path: Path, layout: str, protocol: int) -> None:
    path = save(views(), tmp_path / "views.pt", layout, protocol)
    got = read_all(path)
    reference = torch_load(path)
    assert list(got) == list(reference)
    for name, tensor in reference.items():
        assert_same(got[name], tensor, name)


def test_contiguous_tensors_are_views_of_the_file_and_share_storage(tmp_path: Path) -> None:
    path = save(views(), tmp_path / "views.pt")
    with PytorchReader(path) as reader:
        base, offset = reader.get("base"), reader.get("offset")
        assert not base.flags.owndata and not offset.flags.owndata
        assert np.shares_memory(base, offset)  # one storage, read once
        transposed = reader.get("transposed")
        assert transposed.flags.owndata and transposed.flags.c_contiguous


def test_arrays_outlive_their_reader(tmp_path: Path) -> None:
    path = save(views(), tmp_path / "views.pt", "legacy")
    with PytorchReader(path) as reader:
        arrays = {name: tensor.to_numpy() for name, tensor in reader.tensors().items()}
    del reader
    gc.collect()
    for name, tensor in torch_load(path).items():
        assert_same(arrays[name], tensor, name)


def test_a_deflated_storage_is_inflated_once(tmp_path: Path) -> None:
    import zipfile

    path = save(views(), tmp_path / "views.pt")
    deflated = rewrite_zip(path, tmp_path / "deflated.pt", compression=zipfile.ZIP_DEFLATED)
    with PytorchReader(deflated) as reader:
        base, offset = reader.get("base"), reader.get("offset")
        assert np.shares_memory(base, offset)
    for name, tensor in torch_load(path).items():
        assert_same(read_all(deflated)[name], tensor, name)


def test_arrays_are_writable_and_writes_never_reach_the_file(tmp_path: Path) -> None:
    path = save({"w": torch.ones(4)}, tmp_path / "w.pt")
    before = path.read_bytes()
    with PytorchReader(path) as reader:
        array = reader.get("w")
        array[:] = 7
    assert path.read_bytes() == before
    assert read_all(path)["w"].tolist() == [1, 1, 1, 1]


@pytest.mark.filterwarnings("ignore::UserWarning")  # complex32 and qint8 are "experimental"
def test_tensors_torch_has_but_numpy_cannot_hold_fail_by_name(tmp_path: Path) -> None:
    tensors = {
        "ok": torch.ones(2),
        "half_complex": torch.ones(2, dtype=torch.complex32),
        "quantized": torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8),
        "sparse": torch.eye(3).to_sparse(),
    }
    with PytorchReader(save(tensors, tmp_path / "odd.pt")) as reader:
        assert reader.names() == list(tensors)
        with pytest.raises(DTypeError) as dtype_error:
            reader.get("half_complex")
        assert dtype_error.value.tensor == "half_complex" and "complex32" in str(dtype_error.value)
        for name, builder in (
            ("quantized", "_rebuild_qtensor"),
            ("sparse", "_rebuild_sparse_tensor"),
        ):
            with pytest.raises(UnsupportedObjectError) as caught:
                reader.get(name)
            assert caught.value.tensor == name
            assert caught.value.global_name == f"torch._utils.{builder}"
        assert reader.get("ok").tolist() == [1, 1]


def test_meta_tensors_list_with_shape_and_refuse_values(tmp_path: Path) -> None:
    path = save({"m": torch.empty(2, 3, device="meta", dtype=torch.float16)}, tmp_path / "m.pt")
    with PytorchReader(path) as reader:
        tensor = reader.tensor("m")
        assert (tensor.shape, tensor.dtype.name, tensor.device) == ((2, 3), "F16", "meta")
        with pytest.raises(DescriptorError, match="meta tensor") as caught:
            tensor.to_numpy()
        assert caught.value.tensor == "m"


class Tagged(torch.Tensor):  # a tensor subclass: saved through `_rebuild_from_type_v2`
    pass


def test_parameters_and_tensor_subclasses(tmp_path: Path) -> None:
    stateful = torch.nn.Parameter(torch.arange(3.0))
    stateful.note = "kept"  # type: ignore[attr-defined]  # -> _rebuild_parameter_with_state
    tensors = {
        "param": torch.nn.Parameter(torch.arange(4.0).reshape(2, 2), requires_grad=False),
        "stateful": stateful,
        "tagged": torch.arange(5.0).as_subclass(Tagged),
    }
    path = save(tensors, tmp_path / "p.pt")
    with PytorchReader(path) as reader:
        assert reader.tensor("param").is_parameter and not reader.tensor("param").requires_grad
        assert reader.tensor("stateful").is_parameter and reader.tensor("stateful").requires_grad
        for name, tensor in torch_load(path).items():
            assert_same(reader.get(name), tensor, name)


def _byteswap(data: bytes, dtype: Any) -> bytes:
    word = dtype.itemsize // 2 if dtype.is_complex else dtype.itemsize
    return np.frombuffer(data, dtype=f"u{word}").byteswap().tobytes() if word > 1 else data


def test_big_endian_zip_is_swapped_like_torch_swaps_it(tmp_path: Path) -> None:
    tensors = {name: sample(name) for name in CLASSIC}
    path = save(tensors, tmp_path / "little.pt")
    order = list(tensors.values())  # storage keys are numbered in pickling order

    def to_big(name: str, data: bytes) -> bytes:
        if name.endswith("/byteorder"):
            return b"big"
        if "/data/" in name and not name.endswith("serialization_id"):
            return _byteswap(data, order[int(name.rpartition("/")[2])].dtype)
        return data

    big = rewrite_zip(path, tmp_path / "big.pt", transform=to_big)
    with PytorchReader(big) as reader:
        assert reader.metadata().byte_order == "big"
        got = {name: t.to_numpy() for name, t in reader.tensors().items()}
    for name, tensor in torch_load(big).items():
        assert_same(got[name], tensor, name)
        assert_same(got[name], tensors[name], name)
