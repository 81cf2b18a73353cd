"""torch's quantized tensors (`_qtensor.py`): files real torch writes, read without torch and
compared with torch's ``int_repr()`` and ``.dequantize()`` bit for bit; hand-made hostile
calls refused by typed errors naming the file and the tensor."""

from __future__ import annotations

import struct
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.pytorch_reader._support import (
    op_call,
    op_dict,
    op_global,
    op_int,
    op_list,
    op_storage,
    op_str,
    op_tensor,
    op_tuple,
    pickle_of,
    write_zip,
)
from weightstore.errors import (
    DescriptorError,
    DTypeError,
    QuantizedTensorError,
    TensorNotFoundError,
    UnsupportedObjectError,
)
from weightstore.pytorch_reader import PytorchReader

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # torch deprecates qint types


def save(tensors: dict[str, Any], path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save(tensors, path)
    return path


def bits(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.ascontiguousarray(array).view(np.uint32)


def assert_like_torch(reader: PytorchReader, name: str, tensor: Any) -> None:
    codes = reader.quantized_codes(name)
    assert codes.dtype == tensor.int_repr().numpy().dtype
    np.testing.assert_array_equal(codes, tensor.int_repr().numpy())
    values = reader.get_dequantized(name)
    expected = tensor.dequantize().numpy()
    assert values.dtype == np.float32 and values.shape == expected.shape
    np.testing.assert_array_equal(bits(values), bits(expected))


QDTYPES = ["qint8", "quint8", "qint32"]


@pytest.mark.parametrize("qdtype", QDTYPES)
def test_per_tensor_affine_matches_torch_bit_for_bit(tmp_path: Path, qdtype: str) -> None:
    generator = torch.Generator().manual_seed(1)
    values = torch.randn(257, 3, generator=generator) * 40  # a vector tail of odd length
    zero = {"qint8": -7, "quint8": 131, "qint32": 12345}[qdtype]
    tensors = {
        f"s{index}": torch.quantize_per_tensor(values, scale, zero, getattr(torch, qdtype))
        for index, scale in enumerate((0.1, 0.0123456789, 1 / 3, 2.5e-7))
    }
    path = save(tensors, tmp_path / "q.pt")
    with PytorchReader(path) as reader:
        assert reader.names() == list(tensors)
        for name, tensor in tensors.items():
            assert reader.is_quantized(name)
            info = reader.quantized_info(name)
            assert (info.scheme, info.torch_dtype, info.shape) == (
                "per_tensor_affine",
                qdtype,
                (257, 3),
            )
            assert info.scale == tensor.q_scale() and info.zero_point == zero
            assert info.scales is None and info.axis is None
            assert_like_torch(reader, name, tensor)


def test_qint32_codes_past_float32_precision_dequantize_like_torch(tmp_path: Path) -> None:
    """torch subtracts the zero point in int32 (wrapping), then converts: not float - float."""
    codes = torch.tensor([2**31 - 1, -(2**31), 2**24 + 1, -(2**24) - 3, 16777217, 5])
    tensors = {
        "big": torch._make_per_tensor_quantized_tensor(codes.int(), 0.37, 1000),
        "scalar": torch._make_per_tensor_quantized_tensor(codes[1:2].int().reshape(()), 0.5, 9),
        "channel": torch._make_per_channel_quantized_tensor(
            codes.int().reshape(2, 3), torch.tensor([0.3, 7.1], dtype=torch.float64),
            torch.tensor([1000, -(2**31)]), 0,
        ),
    }  # fmt: skip
    path = save(tensors, tmp_path / "q.pt")
    with PytorchReader(path) as reader, warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning from the wrap
        for name, tensor in tensors.items():
            assert_like_torch(reader, name, tensor)


@pytest.mark.parametrize("qdtype", QDTYPES)
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_per_channel_affine_matches_torch_on_every_axis(
    tmp_path: Path, qdtype: str, axis: int
) -> None:
    generator = torch.Generator().manual_seed(axis)
    values = torch.randn(5, 7, 9, generator=generator) * 6
    channels = values.shape[axis]
    scales = torch.rand(channels, dtype=torch.float64, generator=generator) / 7 + 0.003
    zeros = torch.randint(-4, 5, (channels,), generator=generator)
    if qdtype == "quint8":
        zeros += 128
    tensor = torch.quantize_per_channel(values, scales, zeros, axis, getattr(torch, qdtype))
    path = save({"w": tensor}, tmp_path / "q.pt")
    with PytorchReader(path) as reader:
        info = reader.quantized_info("w")
        assert (info.scheme, info.axis, info.scale) == ("per_channel_affine", axis, None)
        assert info.scales is not None and info.zero_points is not None
        np.testing.assert_array_equal(info.scales, tensor.q_per_channel_scales().numpy())
        np.testing.assert_array_equal(info.zero_points, zeros.numpy())
        assert_like_torch(reader, "w", tensor)


def test_per_channel_float_qparams_are_told_apart_as_torch_does(tmp_path: Path) -> None:
    """torch saves them as ``per_channel_affine`` and recognises them by float zero points."""
    observer = torch.ao.quantization.PerChannelMinMaxObserver(
        ch_axis=0, dtype=torch.quint8, qscheme=torch.per_channel_affine_float_qparams
    )
    values = torch.randn(33, 40, generator=torch.Generator().manual_seed(3))
    observer(values)
    scales, zeros = observer.calculate_qparams()
    tensor = torch.quantize_per_channel(values, scales, zeros, 0, torch.quint8)
    assert tensor.qscheme() == torch.per_channel_affine_float_qparams
    path = save({"embedding": tensor}, tmp_path / "q.pt")
    with PytorchReader(path) as reader:
        info = reader.quantized_info("embedding")
        assert info.scheme == "per_channel_affine_float_qparams"
        assert info.zero_points is not None and info.zero_points.dtype == np.float32
        assert_like_torch(reader, "embedding", tensor)


def test_strided_and_offset_codes_are_read_as_torch_views_them(tmp_path: Path) -> None:
    """Per tensor only: torch refuses to set strides on a per-channel tensor when loading."""
    base = torch.quantize_per_tensor(torch.randn(8, 6) * 3, 0.05, 4, torch.qint8)
    tensors = {
        "transposed": base.t(),
        "sliced": base[2:, 1::2],
    }
    assert not tensors["sliced"].is_contiguous() and tensors["sliced"].storage_offset() > 0
    path = save(tensors, tmp_path / "q.pt")
    with PytorchReader(path) as reader:
        for name, tensor in tensors.items():
            assert_like_torch(reader, name, tensor)


def test_legacy_files_hold_quantized_tensors_too(tmp_path: Path) -> None:
    tensors = {
        "per_tensor": torch.quantize_per_tensor(torch.randn(4, 5), 0.1, 3, torch.qint32).t(),
        "per_channel": torch.quantize_per_channel(
            torch.randn(4, 5), torch.rand(5, dtype=torch.float64) + 0.1,
            torch.arange(5), 1, torch.quint8,
        ),
    }  # fmt: skip
    path = tmp_path / "legacy.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save(tensors, path, _use_new_zipfile_serialization=False)
    with PytorchReader(path) as reader:
        assert reader.metadata().format == "legacy"
        for name, tensor in tensors.items():
            assert_like_torch(reader, name, tensor)


def test_ao_quantized_linear_state_dict(tmp_path: Path) -> None:
    linear = torch.ao.nn.quantized.Linear(4, 3)
    weight = torch.quantize_per_channel(
        torch.randn(3, 4), torch.tensor([0.1, 0.2, 0.05], dtype=torch.float64),
        torch.tensor([0, 1, -2]), 0, torch.qint8,
    )  # fmt: skip
    linear.set_weight_bias(weight, torch.tensor([0.5, -1.0, 2.0]))
    path = save(linear.state_dict(), tmp_path / "linear.pt")
    with PytorchReader(path) as reader:
        assert reader.names() == [
            "scale",
            "zero_point",
            "_packed_params._packed_params.0",
            "_packed_params._packed_params.1",
        ]
        assert reader.is_quantized("_packed_params._packed_params.0")
        assert not reader.is_quantized("_packed_params._packed_params.1")
        assert_like_torch(reader, "_packed_params._packed_params.0", linear.weight())
        assert reader.get("_packed_params._packed_params.1").tolist() == [0.5, -1.0, 2.0]


def test_get_and_descriptor_refuse_with_the_scheme_and_the_way_to_read(tmp_path: Path) -> None:
    tensors = {
        "q": torch.quantize_per_tensor(torch.ones(3), 0.5, 1, torch.quint8),
        "f": torch.ones(2),
    }
    path = save(tensors, tmp_path / "q.pt")
    with PytorchReader(path) as reader:
        for read in (reader.get, reader.descriptor, reader.tensor, reader.get_slice):
            with pytest.raises(QuantizedTensorError) as caught:
                read("q")
            error = caught.value
            assert isinstance(error, UnsupportedObjectError)
            assert (error.path, error.tensor) == (str(path), "q")
            assert (error.scheme, error.torch_dtype) == ("per_tensor_affine", "quint8")
            assert error.global_name == "torch._utils._rebuild_qtensor"
            assert "get_dequantized" in str(error)
        with pytest.raises(QuantizedTensorError, match="not a quantized tensor") as plain:
            reader.get_dequantized("f")
        assert plain.value.scheme == "none"
        with pytest.raises(TensorNotFoundError):
            reader.quantized_info("nothing")
        assert reader.get_dequantized("q").tolist() == [1.0, 1.0, 1.0]


def test_get_dequantized_casts_from_torchs_float32(tmp_path: Path) -> None:
    tensor = torch.quantize_per_tensor(torch.randn(50), 0.013, 2, torch.qint8)
    path = save({"q": tensor}, tmp_path / "q.pt")
    with PytorchReader(path) as reader:
        half = reader.get_dequantized("q", "F16")
        assert half.dtype == np.float16
        np.testing.assert_array_equal(half, tensor.dequantize().numpy().astype(np.float16))
        with pytest.raises(DTypeError) as caught:
            reader.get_dequantized("q", "I32")
        assert caught.value.tensor == "q"
        with pytest.raises(DTypeError) as unknown:
            reader.get_dequantized("q", "float32")  # weightstore names, as burnpack's method
        assert (unknown.value.path, unknown.value.tensor) == (str(path), "q")


def test_reading_quantized_tensors_never_imports_torch(tmp_path: Path) -> None:
    per_channel = torch.quantize_per_channel(
        torch.randn(3, 2), torch.ones(3, dtype=torch.float64), torch.zeros(3).long(), 0, torch.qint8
    )
    path = save({"q": per_channel}, tmp_path / "q.pt")
    script = (
        "import sys; from weightstore.pytorch_reader import PytorchReader\n"
        f"r = PytorchReader({str(path)!r}); r.get_dequantized('q'); r.quantized_codes('q')\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=Path(__file__).parents[2])


# -- hostile calls, assembled by hand ------------------------------------------------------------


def op_float(value: float) -> bytes:
    return b"G" + struct.pack(">d", value)


def qtensor_file(
    path: Path,
    params: bytes,
    *,
    cls: str = "QInt8Storage",
    size: tuple[int, ...] = (2, 3),
    extra: dict[str, bytes] | None = None,
) -> Path:
    call = op_call(
        op_global("torch._utils", "_rebuild_qtensor"),
        op_storage("0", 6, cls),
        op_int(0),
        op_tuple(*map(op_int, size)),
        op_tuple(*map(op_int, (size[1], 1) if len(size) == 2 else (1,))),
        params,
        b"\x89",
        op_call(op_global("collections", "OrderedDict")),
    )
    itemsize = {"QInt8Storage": 1, "QUInt8Storage": 1, "QInt32Storage": 4, "FloatStorage": 4}
    storages = {"0": bytes(range(6 * itemsize[cls])), **(extra or {})}
    return write_zip(path, pickle_of(op_dict([(op_str("w"), call)])), storages)


def per_tensor(scale: float, zero_point: int) -> bytes:
    return op_tuple(op_global("torch", "per_tensor_affine"), op_float(scale), op_int(zero_point))


def per_channel(
    channels: int, axis: int, zero_points: list[int] | None = None
) -> tuple[bytes, dict[str, bytes]]:
    zeros = zero_points if zero_points is not None else [0] * channels
    params = op_tuple(
        op_global("torch", "per_channel_affine"),
        op_tensor(op_storage("1", channels, "DoubleStorage"), 0, (channels,), (1,)),
        op_tensor(op_storage("2", len(zeros), "LongStorage"), 0, (len(zeros),), (1,)),
        op_int(axis),
    )
    storages = {
        "1": np.full(channels, 0.5, np.float64).tobytes(),
        "2": np.array(zeros, np.int64).tobytes(),
    }
    return params, storages


def test_a_well_formed_hand_made_call_reads(tmp_path: Path) -> None:
    path = qtensor_file(tmp_path / "ok.pt", per_tensor(0.5, -1))
    params, extra = per_channel(3, 1, [1, 2, 3])
    other = qtensor_file(tmp_path / "pc.pt", params, extra=extra)
    with PytorchReader(path) as reader:
        assert reader.get_dequantized("w").tolist() == [[0.5, 1, 1.5], [2, 2.5, 3]]
    with PytorchReader(other) as reader:
        assert reader.get_dequantized("w").tolist() == [[-0.5, -0.5, -0.5], [1, 1, 1]]


HOSTILE = {
    "nan scale": (per_tensor(float("nan"), 0), "not a finite float32"),
    "infinite scale": (per_tensor(float("inf"), 0), "not a finite float32"),
    "scale past float32": (per_tensor(1e300, 0), "not a finite float32"),
    "zero point over int8": (per_tensor(0.1, 128), r"outside the codes' range \[-128, 127\]"),
    "zero point under int8": (per_tensor(0.1, -129), "outside the codes' range"),
    "unknown scheme": (
        op_tuple(op_global("torch", "per_tensor_symmetric"), op_float(1.0), op_int(0)),
        "is not one torch saves",
    ),
    "params not a tuple": (op_list(), "must be a non-empty tuple"),
    "scale a string": (
        op_tuple(op_global("torch", "per_tensor_affine"), op_str("x"), op_int(0)),
        "scale must be a float",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_per_tensor_params_are_refused_by_name(tmp_path: Path, case: str) -> None:
    params, message = HOSTILE[case]
    path = qtensor_file(tmp_path / "bad.pt", params)
    with PytorchReader(path) as reader:
        assert reader.names() == ["w"]  # the file opens; the tensor is refused when read
        for read in (reader.quantized_info, reader.quantized_codes, reader.get_dequantized):
            with pytest.raises(DescriptorError, match=message) as caught:
                read("w")
            assert (caught.value.path, caught.value.tensor) == (str(path), "w")


@pytest.mark.parametrize(
    ("channels", "axis", "zeros", "message"),
    [
        (2, 1, None, "have shape \\[2\\], but axis 1 has 3 channels"),
        (2, 2, None, "axis 2 is out of range for a 2-dimensional tensor"),
        (2, -1, None, "axis -1 is out of range"),
        (3, 1, [0, 0], "zero points have shape \\[2\\]"),
        (2, 0, [0, 300], "zero point 300 lies outside qint8's range"),
    ],
)
def test_hostile_per_channel_params_are_refused_by_name(
    tmp_path: Path, channels: int, axis: int, zeros: list[int] | None, message: str
) -> None:
    params, extra = per_channel(channels, axis, zeros)
    path = qtensor_file(tmp_path / "bad.pt", params, extra=extra)
    with PytorchReader(path) as reader:
        with pytest.raises(DescriptorError, match=message) as caught:
            reader.get_dequantized("w")
        assert (caught.value.path, caught.value.tensor) == (str(path), "w")


def test_non_finite_per_channel_scale_is_refused(tmp_path: Path) -> None:
    params, extra = per_channel(2, 0)
    extra["1"] = np.array([0.5, np.inf]).tobytes()
    path = qtensor_file(tmp_path / "bad.pt", params, extra=extra)
    with PytorchReader(path) as reader, pytest.raises(DescriptorError, match="scale 1 is inf"):
        reader.quantized_info("w")


def test_a_float_storage_is_refused_as_no_quantized_dtype(tmp_path: Path) -> None:
    path = qtensor_file(tmp_path / "bad.pt", per_tensor(0.1, 0), cls="FloatStorage")
    with PytorchReader(path) as reader:
        with pytest.raises(DTypeError, match="holds float32, not qint8") as caught:
            reader.get_dequantized("w")
        assert (caught.value.path, caught.value.tensor) == (str(path), "w")
        with pytest.raises(QuantizedTensorError):
            reader.get("w")


def test_codes_past_their_storage_are_refused(tmp_path: Path) -> None:
    path = qtensor_file(tmp_path / "bad.pt", per_tensor(0.1, 0), size=(3, 3))
    with (
        PytorchReader(path) as reader,
        pytest.raises(DescriptorError, match="view reaches") as caught,
    ):
        reader.quantized_codes("w")
    assert caught.value.tensor == "w"


def test_per_channel_params_as_lists_read_as_old_torch_wrote_them(tmp_path: Path) -> None:
    scheme = op_global("torch", "per_channel_affine")
    params = op_tuple(
        scheme, op_list(op_float(0.5), op_float(2.0)), op_list(op_int(1), op_int(0)), op_int(0)
    )
    path = qtensor_file(tmp_path / "lists.pt", params)
    short = op_tuple(scheme, op_list(op_float(0.5)), op_list(op_int(1)), op_int(0))
    other = qtensor_file(tmp_path / "short.pt", short)
    with PytorchReader(path) as reader:
        assert reader.get_dequantized("w").tolist() == [[-0.5, 0.0, 0.5], [6.0, 8.0, 10.0]]
    with PytorchReader(other) as reader, pytest.raises(DescriptorError, match="hold 1 values"):
        reader.quantized_info("w")
