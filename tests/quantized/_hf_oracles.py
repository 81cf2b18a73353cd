"""Shared pieces of the FP8 and MXFP4 tests: torch tensors as NumPy arrays, the comparison
they all make (bit for bit, NaN where the oracle has NaN), and DeepSeek's block rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from tests._optional import need

torch = need("torch")

NUMPY_OF = {
    "float32": np.dtype(np.float32),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float16": np.dtype(np.float16),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "float8_e8m0fnu": np.dtype(ml_dtypes.float8_e8m0fnu),
    "uint8": np.dtype(np.uint8),
}
OUTPUTS = ["float32", "bfloat16", "float16"]


def as_numpy(tensor: Any) -> np.ndarray:
    """A CPU torch tensor as a NumPy array of the same dtype and bytes."""
    name = str(tensor.dtype).removeprefix("torch.")
    unsigned = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[tensor.element_size()]
    raw = tensor.contiguous().view(unsigned).numpy()
    return raw.view(NUMPY_OF[name])


def assert_same_values(ours: np.ndarray, reference: Any) -> None:
    """Bit for bit where the reference is a number; NaN exactly where it is NaN (the NaN
    payloads of torch's and ml_dtypes' 16-bit conversions differ, and mean nothing)."""
    expected = as_numpy(reference) if not isinstance(reference, np.ndarray) else reference
    assert ours.dtype == expected.dtype and ours.shape == expected.shape
    nan_ours = np.isnan(ours.astype(np.float32))
    nan_expected = np.isnan(expected.astype(np.float32))
    assert np.array_equal(nan_ours, nan_expected)
    unsigned = {2: np.uint16, 4: np.uint32}[ours.dtype.itemsize]
    assert np.array_equal(ours.view(unsigned)[~nan_ours], expected.view(unsigned)[~nan_expected])


def deepseek_quantize(weight: Any, block: tuple[int, int] = (128, 128)) -> tuple[Any, Any]:
    """DeepSeek V3's FP8 rule, edge blocks included: each block's scale is its absolute
    maximum over 448, the codes ``weight / scale`` cast to ``float8_e4m3fn``; the scale is
    stored as ``weight_scale_inv`` (what dequantization multiplies by)."""
    *leading, rows, columns = weight.shape
    grid = (-(-rows // block[0]), -(-columns // block[1]))
    padded = torch.zeros(*leading, grid[0] * block[0], grid[1] * block[1])
    padded[..., :rows, :columns] = weight
    tiles = padded.reshape(*leading, grid[0], block[0], grid[1], block[1])
    amax = tiles.abs().amax(dim=(-3, -1)).clamp(min=1e-12)
    scale = (amax / 448.0).to(torch.float32)
    codes = (tiles / scale[..., :, None, :, None]).to(torch.float8_e4m3fn)
    codes = codes.reshape(padded.shape)[..., :rows, :columns].contiguous()
    return codes, scale


def write_hf_checkpoint(directory: Path, tensors: dict[str, Any]) -> None:
    """One SafeTensors file and its index, as torch's Hugging Face DCP reader expects."""
    from safetensors.torch import save_file

    save_file(tensors, str(directory / "model.safetensors"))
    index = {"metadata": {}, "weight_map": dict.fromkeys(tensors, "model.safetensors")}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))


def dcp_dequantized(directory: Path, shapes: dict[str, tuple[int, ...]], dtype: Any) -> dict:
    """torch's `QuantizedHuggingFaceStorageReader` loading `shapes` from `directory`."""
    import warnings

    dcp = need("torch.distributed.checkpoint")
    quantized = need("torch.distributed.checkpoint.quantized_hf_storage")
    state = {name: torch.empty(shape, dtype=dtype) for name, shape in shapes.items()}
    reader = quantized.QuantizedHuggingFaceStorageReader(str(directory), target_dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled ...: single process"
        dcp.load(state, storage_reader=reader, no_dist=True)
    return state
