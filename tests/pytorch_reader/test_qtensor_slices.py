"""`PytorchReader.get_dequantized_part`: a box of a torch quantized tensor, equal bit for bit to
the whole tensor's values cut to it (and to torch's ``.dequantize()`` cut to it), built from the
box's codes and its channels' parameters, with an allocation about the box's size."""

from __future__ import annotations

import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from weightstore.errors import QuantizedTensorError, SliceError
from weightstore.pytorch_reader import PytorchReader

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # torch deprecates qint types

BOXES = [
    (slice(0, 7),),
    (slice(3, 11), slice(5, 17)),
    (slice(None), slice(20, 40)),
    (slice(12, 12), slice(None)),
    (slice(1, 30, 3), slice(None, None, -2)),
]


def save(tensors: dict[str, Any], path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save(tensors, path)
    return path


def float_qparams(values: Any) -> Any:
    observer = torch.ao.quantization.PerChannelMinMaxObserver(
        ch_axis=0, dtype=torch.quint8, qscheme=torch.per_channel_affine_float_qparams
    )
    observer(values)
    scales, zeros = observer.calculate_qparams()
    return torch.quantize_per_channel(values, scales, zeros, 0, torch.quint8)


def quantized_tensors() -> dict[str, Any]:
    generator = torch.Generator().manual_seed(11)
    values = torch.randn(33, 40, generator=generator) * 4
    scales = torch.rand(40, generator=generator, dtype=torch.float64) / 10 + 0.01
    zeros = torch.randint(-5, 5, (40,), generator=generator)
    row_scales = torch.rand(33, generator=generator, dtype=torch.float64) / 10 + 0.01
    return {
        "tensor_qint8": torch.quantize_per_tensor(values, 0.037, 3, torch.qint8),
        "tensor_quint8": torch.quantize_per_tensor(values, 0.05, 128, torch.quint8),
        "tensor_qint32": torch.quantize_per_tensor(values * 1e6, 0.001, -7, torch.qint32),
        "channel_axis1": torch.quantize_per_channel(values, scales, zeros, 1, torch.qint8),
        "channel_axis0": torch.quantize_per_channel(
            values, row_scales, torch.zeros(33, dtype=torch.int64), 0, torch.quint8
        ),
        "float_qparams": float_qparams(values),
        "transposed": torch.quantize_per_tensor(values, 0.02, -1, torch.qint8).t(),
    }


@pytest.mark.parametrize("dtype", ["F32", "BF16", "F16", "F64"])
def test_every_box_equals_the_whole_cut_and_torch_cut(tmp_path: Path, dtype: str) -> None:
    tensors = quantized_tensors()
    path = save(tensors, tmp_path / "q.pt")
    with PytorchReader(path) as reader:
        for name, tensor in tensors.items():
            whole = reader.get_dequantized(name, dtype)
            for box in BOXES:
                part = reader.get_dequantized_part(name, box, dtype)
                assert part.dtype == whole.dtype and part.flags.c_contiguous
                cut = np.ascontiguousarray(whole[box])
                np.testing.assert_array_equal(part.view(np.uint8), cut.view(np.uint8))
                if dtype == "F32":
                    expected = np.ascontiguousarray(tensor.dequantize().numpy()[box])
                    np.testing.assert_array_equal(part.view(np.uint32), expected.view(np.uint32))


def test_a_legacy_file_and_pread_mode_cut_the_same(tmp_path: Path) -> None:
    tensors = quantized_tensors()
    legacy = tmp_path / "legacy.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save(tensors, legacy, _use_new_zipfile_serialization=False)
    box = (slice(4, 20), slice(8, 32))
    for path, mode in ((legacy, "mmap"), (save(tensors, tmp_path / "q.pt"), "pread")):
        with PytorchReader(path, mode=mode) as reader:
            for name, tensor in tensors.items():
                part = reader.get_dequantized_part(name, box)
                np.testing.assert_array_equal(part, tensor.dequantize().numpy()[box])


def peak_bytes(read: Any) -> tuple[np.ndarray[Any, Any], int]:
    """What `read()` returns and the most memory NumPy held meanwhile."""
    tracemalloc.start()
    try:
        result = read()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


@pytest.mark.parametrize("scheme", ["per_tensor", "per_channel"])
def test_a_quarter_of_the_rows_allocates_about_a_quarter(tmp_path: Path, scheme: str) -> None:
    """Only the box's codes are converted: the peak is a fraction of a whole dequantize's
    (per channel both carry float64 temporaries of at most 2**20 elements)."""
    values = torch.randn(4096, 4096, generator=torch.Generator().manual_seed(2))
    if scheme == "per_tensor":
        tensor = torch.quantize_per_tensor(values, 0.02, 3, torch.qint8)
    else:
        scales = torch.full((4096,), 0.02, dtype=torch.float64)
        zeros = torch.zeros(4096, dtype=torch.int64)
        tensor = torch.quantize_per_channel(values, scales, zeros, 0, torch.qint8)
    path = save({"w": tensor}, tmp_path / "big.pt")
    with PytorchReader(path) as reader:
        reader.quantized_info("w")  # the per-channel parameters, parsed once
        rows = (slice(1024, 2048),)
        part, part_peak = peak_bytes(lambda: reader.get_dequantized_part("w", rows))
        cut, whole_peak = peak_bytes(lambda: reader.get_dequantized("w")[rows].copy())
    np.testing.assert_array_equal(part, cut)
    assert part.nbytes == 4096 * 4096 * 4 // 4
    assert part_peak < 0.5 * whole_peak, f"part peak {part_peak:,}, whole {whole_peak:,}"


def test_an_index_that_is_not_a_tuple_of_slices_is_refused_by_name(tmp_path: Path) -> None:
    tensor = torch.quantize_per_tensor(torch.ones(4, 4), 0.5, 1, torch.quint8)
    path = save({"q": tensor, "plain": torch.ones(3)}, tmp_path / "q.pt")
    with PytorchReader(path) as reader:
        for bad in [(0, slice(None)), slice(0, 2), (slice(None),) * 3, (slice(0, 2, 0),)]:
            with pytest.raises(SliceError) as caught:
                reader.get_dequantized_part("q", bad)  # type: ignore[arg-type]
            assert caught.value.tensor == "q" and caught.value.path == str(path)
        with pytest.raises(QuantizedTensorError):
            reader.get_dequantized_part("plain", (slice(0, 2),))
