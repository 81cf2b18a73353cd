"""Both directions with the real `safetensors` package: its NumPy and torch loaders and savers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from weightstore import safetensors
from weightstore.dtypes import from_torch
from weightstore.entry import TensorEntry
from weightstore.safetensors import SafetensorsReader

safetensors_numpy = pytest.importorskip("safetensors.numpy")
METADATA = {"format": "np", "note": "caf\u00e9 \u2713"}

# One array per dtype the package's NumPy layer reads and writes, plus the awkward shapes.
NUMPY_ARRAYS: dict[str, np.ndarray[Any, Any]] = {
    "f64": np.linspace(-1, 1, 6).reshape(2, 3),
    "f32": np.arange(12, dtype=np.float32).reshape(3, 2, 2),
    "f16": np.array([0.5, -2.0, np.inf], np.float16),
    "i64": np.array([-(2**63), 2**63 - 1], np.int64),
    "u64": np.array([2**64 - 1, 0], np.uint64),
    "i32": np.array([[1], [-2]], np.int32),
    "u32": np.array([2**32 - 1], np.uint32),
    "i16": np.array([-3, 4, 5], np.int16),
    "u16": np.array([65535], np.uint16),
    "i8": np.array([-128, 127], np.int8),
    "u8": np.arange(5, dtype=np.uint8),
    "bool": np.array([True, False, True]),
    "c64": np.array([1 + 2j, -3.5j], np.complex64),
    "scalar": np.array(3.5, np.float32),
    "scalar_i64": np.array(-7, np.int64),
    "empty": np.zeros((0, 4), np.float32),
    "empty_bool": np.zeros((2, 0), np.bool_),
}


def test_package_numpy_loads_what_we_write(tmp_path: Path) -> None:
    path = tmp_path / "ours.safetensors"
    entries = [TensorEntry.from_array(name, array) for name, array in NUMPY_ARRAYS.items()]
    safetensors.write_file(path, entries, METADATA)
    loaded = safetensors_numpy.load_file(str(path))
    assert sorted(loaded) == sorted(NUMPY_ARRAYS)
    for name, array in NUMPY_ARRAYS.items():
        got = loaded[name]
        assert got.dtype == array.dtype and got.shape == array.shape, name
        assert got.tobytes() == array.tobytes(), name
    from safetensors import safe_open

    with safe_open(str(path), framework="np") as handle:
        assert handle.metadata() == METADATA


def test_we_read_what_package_numpy_writes(tmp_path: Path) -> None:
    path = tmp_path / "theirs.safetensors"
    safetensors_numpy.save_file(NUMPY_ARRAYS, str(path), metadata=METADATA)
    with SafetensorsReader.from_file(path) as reader:
        assert reader.metadata() == METADATA
        assert reader.names() == sorted(NUMPY_ARRAYS)
        for name, array in NUMPY_ARRAYS.items():
            got = reader.get(name)
            assert got.dtype == array.dtype and got.shape == array.shape, name
            assert got.tobytes() == array.tobytes(), name
            assert not got.flags.owndata or got.size == 0  # the package aligns: views


# -- torch: every dtype both sides know -----------------------------------------------------------

TORCH_DTYPES = [
    "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8",
    "bool", "complex64", "float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64",
]  # fmt: skip


def _torch_tensors() -> dict[str, Any]:
    torch = pytest.importorskip("torch")
    generator = torch.Generator().manual_seed(1)
    tensors = {}
    for name in TORCH_DTYPES:
        dtype = getattr(torch, name)
        raw = torch.randint(0, 256, (3, 4 * dtype.itemsize), generator=generator, dtype=torch.uint8)
        if dtype == torch.bool:
            raw = raw % 2
        tensors[name] = raw.view(dtype)  # every bit pattern, NaNs included
    tensors["scalar"] = torch.tensor(2.5, dtype=torch.bfloat16)
    tensors["empty"] = torch.zeros(0, 3, dtype=torch.float8_e4m3fn)
    return tensors


def _torch_bytes(tensor: Any) -> bytes:
    import torch

    return bytes(tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())


def test_package_torch_loads_what_we_write(tmp_path: Path) -> None:
    safetensors_torch = pytest.importorskip("safetensors.torch")
    tensors = _torch_tensors()
    entries = [
        TensorEntry(name, from_torch(str(t.dtype)), tuple(t.shape), _torch_bytes(t))
        for name, t in tensors.items()
    ]
    path = tmp_path / "ours.safetensors"
    safetensors.write_file(path, entries, {"format": "pt"})
    loaded = safetensors_torch.load_file(str(path))
    assert sorted(loaded) == sorted(tensors)
    for name, tensor in tensors.items():
        got = loaded[name]
        assert got.dtype == tensor.dtype and got.shape == tensor.shape, name
        assert _torch_bytes(got) == _torch_bytes(tensor), name


def test_we_read_what_package_torch_writes(tmp_path: Path) -> None:
    safetensors_torch = pytest.importorskip("safetensors.torch")
    import torch

    tensors = _torch_tensors()
    # The package writes F8_E8M0 but its torch loader cannot read it back; we can.
    tensors["e8m0"] = torch.tensor([1.0, 0.25, 64.0]).to(torch.float8_e8m0fnu)
    path = tmp_path / "theirs.safetensors"
    safetensors_torch.save_file(tensors, str(path), metadata={"format": "pt"})
    with SafetensorsReader.from_file(path, mode="pread") as reader:
        assert reader.metadata() == {"format": "pt"}
        for name, tensor in tensors.items():
            descriptor = reader.descriptor(name)
            assert descriptor.dtype == from_torch(str(tensor.dtype)), name
            assert descriptor.shape == tuple(tensor.shape)
            assert bytes(reader.get_bytes(name)) == _torch_bytes(tensor), name
            assert reader.get(name).tobytes() == _torch_bytes(tensor), name
        assert reader.get("e8m0").astype(np.float32).tolist() == [1.0, 0.25, 64.0]
        assert reader.get("scalar").dtype == ml_dtypes.bfloat16
