"""torch's quantized tensors: integer codes on a storage, and the affine parameters that make
them values.

``torch.save`` pickles a quantized tensor as ``torch._utils._rebuild_qtensor(storage, offset,
size, stride, quantizer_params, requires_grad, hooks)``: the storage is a ``QInt8Storage``,
``QUInt8Storage`` or ``QInt32Storage`` of codes, and ``quantizer_params`` is
``(torch.per_tensor_affine, scale, zero_point)`` or ``(torch.per_channel_affine, scales,
zero_points, axis)`` with scales and zero points as tensors. torch writes
``per_channel_affine`` for ``per_channel_affine_float_qparams`` tensors too, and tells them apart
on load by the zero points' dtype (floating there, int64 otherwise); so does this module.

The rebuild stand-in (`rebuild_qtensor`) only records; the checks run when a tensor is asked
for, naming it (`QuantizedTensor.info`): the storage class, the view, the scale's finiteness, the
zero point against the code dtype's range, the axis and the parameter lengths. Values come as
torch's CPU ``.dequantize()`` computes them, bit for bit (`dequantize`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Final

from weightstore.base._boxes import box_ranges, range_slice
from weightstore.base._lazy import import_on_first_use
from weightstore.base._record import Record
from weightstore.base._render import bounded_repr
from weightstore.errors import DescriptorError, DTypeError, QuantizedTensorError
from weightstore.pytorch_reader._objects import GlobalRef
from weightstore.pytorch_reader._tensors import LazyTensor, UnreadableTensor

if TYPE_CHECKING:
    import numpy as np
else:
    np = import_on_first_use("numpy", globals(), "np")  # recording a tensor needs no NumPy

__all__ = ["QSCHEMES", "QuantizedInfo", "QuantizedTensor", "rebuild_qtensor"]

QSCHEMES: Final = ("per_tensor_affine", "per_channel_affine", "per_channel_affine_float_qparams")
"""The qschemes read: those ``torch.save`` writes (the symmetric ones it refuses to save)."""

_GLOBAL: Final = "torch._utils._rebuild_qtensor"
# Quantized dtype -> (the plain dtype of its codes, smallest code, largest code).
_CODES: Final[dict[str, tuple[str, int, int]]] = {
    "qint8": ("int8", -(2**7), 2**7 - 1),
    "quint8": ("uint8", 0, 2**8 - 1),
    "qint32": ("int32", -(2**31), 2**31 - 1),
}
_QUANTIZED_OF: Final = {plain: quantized for quantized, (plain, _, _) in _CODES.items()}
_FLOATS: Final = frozenset({"float16", "bfloat16", "float32", "float64"})
_CHUNK: Final = 1 << 20  # codes dequantized at a time per channel scheme: bounds the f64 temporary


class QuantizedInfo(Record):
    """A quantized tensor's scheme and parameters, checked (`PytorchReader.quantized_info`).

    Attributes:
        scheme: one of `QSCHEMES`.
        torch_dtype: ``"qint8"``, ``"quint8"`` or ``"qint32"``.
        code_dtype: the plain dtype of the codes: ``"int8"``, ``"uint8"`` or ``"int32"``.
        shape: the logical shape (that of the codes and of the dequantized values).
        scale, zero_point: the per-tensor parameters (``None`` per channel).
        scales, zero_points: the per-channel parameters, one per index of `axis` (float64 and
            int64, or float32 and float32 for ``per_channel_affine_float_qparams``).
        axis: the channel axis (``None`` per tensor).
    """

    scheme: str
    torch_dtype: str
    code_dtype: str
    shape: tuple[int, ...]
    scale: float | None = None
    zero_point: int | None = None
    scales: np.ndarray[Any, Any] | None = None
    zero_points: np.ndarray[Any, Any] | None = None
    axis: int | None = None


class QuantizedTensor(UnreadableTensor):
    """A ``_rebuild_qtensor`` call, recorded: listed like any tensor, refused by `get` (its
    `error` is `QuantizedTensorError`), read by `info`, `codes_array` and `dequantize`.

    Attributes:
        codes: the codes as a plain int8/uint8/int32 view of the storage (shape, strides and
            offset as saved); ``None`` when the storage class holds no quantized dtype.
        torch_dtype: the storage class's dtype (``"qint8"``; anything else is refused).
        scheme: the qscheme as torch loads it (see the module docstring).
        scale, zero_point: per-tensor parameters as pickled (checked by `info`).
        scales, zero_points: per-channel parameters as pickled: tensors, or lists.
        axis: per-channel axis as pickled.
        problem: why the call cannot be a quantized tensor, found while recording.
    """

    codes: LazyTensor | None = None
    torch_dtype: str = ""
    scheme: str = ""
    scale: object = None
    zero_point: object = None
    scales: object = None
    zero_points: object = None
    axis: object = None
    problem: str | None = None

    def __init__(
        self,
        global_name: str = _GLOBAL,
        reason: str = "a quantized tensor",
        dtype_problem: bool = False,
        limit: tuple[str, int, int] | None = None,
        codes: LazyTensor | None = None,
        torch_dtype: str = "",
        scheme: str = "",
        scale: object = None,
        zero_point: object = None,
        scales: object = None,
        zero_points: object = None,
        axis: object = None,
        problem: str | None = None,
    ) -> None:
        super().__init__(global_name, reason, dtype_problem, limit)
        for field, value in (
            ("codes", codes), ("torch_dtype", torch_dtype), ("scheme", scheme),
            ("scale", scale), ("zero_point", zero_point), ("scales", scales),
            ("zero_points", zero_points), ("axis", axis), ("problem", problem),
        ):  # fmt: skip
            self._set(field, value)

    @property
    def shape(self) -> tuple[int, ...]:
        """The logical shape; ``()`` when the call recorded no codes."""
        return () if self.codes is None else self.codes.shape

    def error(self, path: str | None, tensor: str | None) -> QuantizedTensorError:
        """What `get` raises: the tensor is quantized, named with its scheme and dtype."""
        return QuantizedTensorError(
            self.scheme or "unknown", self.torch_dtype, path=path, tensor=tensor
        )

    def info(self, path: str | None, tensor: str | None) -> QuantizedInfo:
        """The checked scheme and parameters; reads the per-channel parameters (small).

        Raises:
            DescriptorError: a parameter torch would refuse or could not dequantize with.
            DTypeError: a storage class that holds no quantized dtype.
            MissingStorageError, DescriptorError, LimitExceeded: as `LazyTensor.validate`
                for the codes' view.
        """
        where = {"path": path, "tensor": tensor}
        if self.problem is not None:
            raise DescriptorError(f"{_GLOBAL}: {self.problem}", **where)
        if self.codes is None or self.torch_dtype not in _CODES:
            raise DTypeError(
                f"a quantized tensor's storage holds {self.torch_dtype or 'no known dtype'}, "
                "not qint8, quint8 or qint32 (QInt8Storage, QUInt8Storage, QInt32Storage)",
                **where,
            )
        codes = self.codes.replace(name=tensor, path=path)
        codes.validate()
        code_dtype, low, high = _CODES[self.torch_dtype]
        common = (self.scheme, self.torch_dtype, code_dtype, codes.shape)
        if self.scheme == "per_tensor_affine":
            scale = _finite_scale(self.scale, where)
            zero_point = _zero_point(self.zero_point, low, high, where)
            return QuantizedInfo(*common, scale=scale, zero_point=zero_point)
        axis = _axis(self.axis, len(codes.shape), where)
        channels = codes.shape[axis]
        floating = self.scheme == "per_channel_affine_float_qparams"
        scales = _parameter(self.scales, "scales", channels, axis, where)
        zero_points = _parameter(self.zero_points, "zero points", channels, axis, where)
        if not floating:
            scales = scales.astype(np.float64)
            if zero_points.dtype.kind == "f":
                raise DescriptorError("per_channel_affine zero points must be integers", **where)
            zero_points = zero_points.astype(np.int64)
            bad = (zero_points < low) | (zero_points > high)
        else:
            scales = scales.astype(np.float32)
            zero_points = zero_points.astype(np.float32)
            bad = ~np.isfinite(zero_points)
        infinite = np.flatnonzero(~np.isfinite(scales))
        if infinite.size:
            index = int(infinite[0])
            raise DescriptorError(
                f"per-channel scale {index:,} is {scales[index].item()!r}, not a finite "
                f"{scales.dtype}",
                **where,
            )
        if bad.any():
            found = zero_points[bad][0].item()
            raise DescriptorError(
                f"zero point {found!r} lies outside {self.torch_dtype}'s range [{low}, {high}]"
                if not floating
                else f"zero point {found!r} is not finite",
                **where,
            )
        return QuantizedInfo(*common, scales=scales, zero_points=zero_points, axis=axis)

    def codes_array(
        self, path: str | None, tensor: str | None, info: QuantizedInfo | None = None
    ) -> np.ndarray[Any, Any]:
        """The codes as an int8/uint8/int32 array of the logical shape (strides honoured),
        after the checks of `info` (skipped when its result is given)."""
        if info is None:
            self.info(path, tensor)
        assert self.codes is not None  # info refuses a call without codes
        return self.codes.replace(name=tensor, path=path).to_numpy()

    def __repr__(self) -> str:
        return f"<quantized tensor {self.torch_dtype} {self.scheme} {list(self.shape)}>"


def dequantize(
    info: QuantizedInfo, codes: np.ndarray[Any, Any], dtype: np.dtype[Any]
) -> np.ndarray[Any, Any]:
    """`codes` as values, as torch's CPU ``.dequantize()`` computes them (float32, bit for
    bit), then cast to `dtype`:

    * per tensor: ``float(code - zero_point) * float(scale)``: the difference in int32,
      wrapping as torch's does for qint32 codes, the product in float32 (torch's kernel rounds
      the double scale to float32 first);
    * per channel, integer zero points: ``float(code) - zero_point`` in float32, times the
      float64 scale in float64, rounded to float32;
    * per channel, float qparams: ``(float(code) - zero_point) * scale`` in float32.
    """
    if info.scheme == "per_tensor_affine":
        assert info.scale is not None and info.zero_point is not None
        # In int32, wrapping as torch's kernel wraps (a qint32 code minus its zero point).
        shifted = np.subtract(codes, np.int32(info.zero_point), dtype=np.int32)
        values: np.ndarray[Any, Any] = np.asarray(shifted, dtype=np.float32)
        values *= np.float32(info.scale)
    else:
        assert info.scales is not None and info.zero_points is not None and info.axis is not None
        values = codes.astype(np.float32)
        view = [1] * codes.ndim
        view[info.axis] = -1
        scales = info.scales.reshape(view)
        values -= info.zero_points.astype(np.float32).reshape(view)
        if info.scheme == "per_channel_affine_float_qparams":
            values *= scales
        else:
            _times_in_float64(values, scales, info.axis)
    return values if dtype == np.float32 else values.astype(dtype)


def part_of(
    info: QuantizedInfo,
    index: object,
    *,
    path: str | None = None,
    tensor: str | None = None,
) -> tuple[QuantizedInfo, tuple[slice, ...]]:
    """The parameters of the part of a quantized tensor that `index` (a tuple of slices, at
    most one per dim) selects, and that index checked: the part's shape, and per channel the
    scales and zero points of the channels it keeps, so `dequantize` of the part's codes is
    the whole tensor's values cut to `index`, bit for bit.

    Raises:
        SliceError: `index` is not such a tuple.
    """
    ranges = box_ranges(index, info.shape, path=path, tensor=tensor)
    key = tuple(range_slice(kept) for kept in ranges)
    part = info.replace(shape=tuple(len(kept) for kept in ranges))
    if info.axis is None:
        return part, key
    assert info.scales is not None and info.zero_points is not None
    channels = key[info.axis]
    return part.replace(scales=info.scales[channels], zero_points=info.zero_points[channels]), key


def _times_in_float64(
    values: np.ndarray[Any, Any], scales: np.ndarray[Any, Any], axis: int
) -> None:
    """``values *= scales`` with the product taken in float64 and rounded once to float32, in
    slices of the first axis so that the float64 temporary stays small."""
    if values.ndim == 0 or values.size == 0:
        return
    rows = max(1, _CHUNK // max(1, values[0].size))
    for start in range(0, values.shape[0], rows):
        part = scales[start : start + rows] if axis == 0 else scales
        chunk = values[start : start + rows]
        chunk[...] = chunk.astype(np.float64) * part


def _finite_scale(value: object, where: dict[str, str | None]) -> float:
    if isinstance(value, bool) or not isinstance(value, float | int):
        raise DescriptorError(f"scale must be a float, not {type(value).__name__}", **where)
    scale = float(value)
    if not math.isfinite(scale) or abs(scale) > 3.4028234663852886e38:  # float32's largest
        raise DescriptorError(f"scale {bounded_repr(value)} is not a finite float32", **where)
    return scale


def _zero_point(value: object, low: int, high: int, where: dict[str, str | None]) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DescriptorError(f"zero point must be an int, not {type(value).__name__}", **where)
    if not low <= value <= high:
        raise DescriptorError(
            f"zero point {bounded_repr(value)} lies outside the codes' range [{low}, {high}]",
            **where,
        )
    return value


def _axis(value: object, ndim: int, where: dict[str, str | None]) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DescriptorError(f"axis must be an int, not {type(value).__name__}", **where)
    if not 0 <= value < ndim:
        raise DescriptorError(
            f"axis {bounded_repr(value)} is out of range for a {ndim}-dimensional tensor", **where
        )
    return value


def _parameter(
    value: object, what: str, channels: int, axis: int, where: dict[str, str | None]
) -> np.ndarray[Any, Any]:
    """Per-channel scales or zero points as a 1-D array of `channels` numbers: from a tensor
    (read through its own checks) or a list (as old torch wrote them)."""
    if isinstance(value, LazyTensor):
        if value.shape != (channels,):
            raise DescriptorError(
                f"per-channel {what} have shape {bounded_repr(list(value.shape))}, but axis "
                f"{axis} has {channels:,} channels",
                **where,
            )
        array = value.replace(name=f"{where['tensor']} ({what})", path=where["path"]).to_numpy()
    elif isinstance(value, list) and all(
        isinstance(item, float | int) and not isinstance(item, bool) for item in value
    ):
        if len(value) != channels:
            raise DescriptorError(
                f"per-channel {what} hold {len(value):,} values, but axis {axis} has "
                f"{channels:,} channels",
                **where,
            )
        array = np.asarray(value)
    else:
        raise DescriptorError(
            f"per-channel {what} must be a tensor, not {type(value).__name__}", **where
        )
    if array.dtype.kind not in "iuf":
        raise DescriptorError(f"per-channel {what} must be numbers, not {array.dtype}", **where)
    return array


def rebuild_qtensor(params: object, codes: LazyTensor) -> QuantizedTensor:
    """What ``_rebuild_qtensor`` builds from its quantizer params, given the codes' plain view
    (built by the caller from the first four arguments, with the code dtype)."""
    torch_dtype = _QUANTIZED_OF[codes.torch_dtype]
    if not isinstance(params, tuple) or not params:
        kind = type(params).__name__
        problem = f"quantizer params must be a non-empty tuple, not {kind}"
        return QuantizedTensor(codes=codes, torch_dtype=torch_dtype, problem=problem)
    scheme = params[0]
    name = scheme.name if isinstance(scheme, GlobalRef) and scheme.module == "torch" else ""
    if name == QSCHEMES[0] and len(params) == 3:
        _, scale, zero_point = params
        return QuantizedTensor(
            codes=codes, torch_dtype=torch_dtype, scheme=name, scale=scale, zero_point=zero_point
        )
    if name in QSCHEMES[1:] and len(params) == 4:
        _, scales, zero_points, axis = params
        floating = name == QSCHEMES[2] or _floating(zero_points)
        return QuantizedTensor(
            codes=codes,
            torch_dtype=torch_dtype,
            scheme=QSCHEMES[2] if floating else QSCHEMES[1],
            scales=scales,
            zero_points=zero_points,
            axis=axis,
        )
    shown = bounded_repr(scheme, limit=80)
    problem = f"qscheme {shown} with {len(params) - 1} parameters is not one torch saves"
    return QuantizedTensor(codes=codes, torch_dtype=torch_dtype, scheme=name, problem=problem)


def _floating(zero_points: object) -> bool:
    """torch's test for a float-qparams tensor, which it saves as ``per_channel_affine``."""
    return isinstance(zero_points, LazyTensor) and zero_points.torch_dtype in _FLOATS


def code_dtype(torch_dtype: str | None) -> str | None:
    """The plain dtype of a quantized dtype's codes (``"qint8"`` -> ``"int8"``), else ``None``."""
    entry = _CODES.get(torch_dtype or "")
    return None if entry is None else entry[0]
