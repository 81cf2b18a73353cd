"""Every dtype weightstore knows, in one table, with its name in each format.

One row per logical dtype. A row says how wide an element is, what kind of number it holds, and
how burnpack, SafeTensors, NumPy and torch spell it (``None`` where a format cannot hold it).
Every lookup in the package goes through this table, so adding a dtype is adding one row.

torch is never imported here: torch dtypes are named by their attribute on the ``torch`` module
(``"bfloat16"``), which the torch bridge resolves only when torch is installed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from weightstore.base._lazy import import_on_first_use
from weightstore.base._record import ValueRecord, field
from weightstore.errors import DTypeError

if TYPE_CHECKING:
    import ml_dtypes
    import numpy as np

__all__ = [
    "ALL_DTYPES",
    "TORCH_STORAGE_CLASSES",
    "DType",
    "can_cast_exactly",
    "from_burnpack",
    "from_name",
    "from_numpy",
    "from_safetensors",
    "from_torch",
    "from_torch_storage",
    "to_burnpack",
    "to_safetensors",
]


if not TYPE_CHECKING:
    np = import_on_first_use("numpy", globals(), "np")
    ml_dtypes = import_on_first_use("ml_dtypes", globals(), "ml_dtypes")


class DType(ValueRecord):
    """One logical element type.

    Attributes:
        name: canonical weightstore name, the SafeTensors spelling where it has one.
        bits: element width in bits (4 and 6 for packed sub-byte floats).
        kind: ``"f"`` float, ``"i"`` signed int, ``"u"`` unsigned int, ``"b"`` bool,
            ``"c"`` complex, ``"q"`` quantized (opaque bytes).
        numpy: the NumPy dtype of one element, or ``None`` when NumPy cannot hold it.
        burnpack: burnpack CBOR value (``"F32"`` or ``{"Bool": "Native"}``), or ``None``.
        safetensors: SafeTensors header name, or ``None``.
        torch: attribute name on the ``torch`` module, or ``None``.
        numpy_spec: where `numpy` comes from (``"<f4"``, ``"ml_dtypes.bfloat16"``), or ``None``.
    """

    name: str
    bits: int
    kind: str
    burnpack: str | Mapping[str, str] | None
    safetensors: str | None
    torch: str | None
    numpy_spec: str | None = field(repr=False, compare=False)
    # Resolved from `numpy_spec` on first read (`__getattr__` fills the empty slot), so the
    # table costs no NumPy import; from then on it is a plain slot read.
    numpy: np.dtype[Any] | None = field(init=False, repr=False, compare=False)

    if not TYPE_CHECKING:  # hidden from the type checker, which would allow any attribute

        def __getattr__(self, attribute: str) -> Any:
            if attribute != "numpy":
                raise AttributeError(
                    f"{type(self).__name__!r} object has no attribute {attribute!r}"
                )
            resolved = _numpy_dtype(self.numpy_spec)
            self._set("numpy", resolved)
            return resolved

    @property
    def itemsize(self) -> int:
        """Bytes per element; sub-byte dtypes are refused since they have no whole size."""
        if self.bits % 8:
            raise DTypeError(f"dtype {self.name} packs {self.bits}-bit elements")
        return self.bits // 8

    @property
    def numpy_itemsize(self) -> int | None:
        """Bytes per element of `numpy`, or ``None`` when NumPy cannot hold the dtype. NumPy's
        own types are whole-byte and sized by `bits`, so only ml_dtypes rows import anything
        (ml_dtypes, whose older releases lack some types)."""
        spec = self.numpy_spec
        if spec is None:
            return None
        if spec.startswith(_ML_DTYPES_PREFIX):
            resolved = self.numpy
            return None if resolved is None else resolved.itemsize
        return self.bits // 8

    @property
    def is_float(self) -> bool:
        """A floating-point dtype (table kind ``"f"``)."""
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        """Signed or unsigned integer."""
        return self.kind in ("i", "u")

    @property
    def is_bool(self) -> bool:
        """Boolean, however the format stores it."""
        return self.kind == "b"

    def nbytes(self, shape: tuple[int, ...]) -> int:
        """Bytes needed for `shape` elements, packed sub-byte types rounded up to whole bytes."""
        return (math.prod(shape) * self.bits + 7) // 8

    def __repr__(self) -> str:
        return f"DType({self.name})"

    # Table rows are shared singletons, so identity settles nearly every comparison; other
    # instances still compare field by field (as the dataclass did), and equal rows share a name.
    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, DType):
            return NotImplemented
        mine = (self.name, self.bits, self.kind, self.burnpack, self.safetensors, self.torch)
        return mine == (other.name, other.bits, other.kind, other.burnpack, other.safetensors,
                        other.torch)  # fmt: skip

    def __hash__(self) -> int:
        return hash(self.name)


_ML_DTYPES_PREFIX: Final = "ml_dtypes."


def _np(name: str) -> str:
    """A NumPy type code, little-endian as every format stores it."""
    return f"<{name}"


def _ml(name: str) -> str:
    """A scalar type of ml_dtypes (bfloat16, float8 variants); older releases lack some."""
    return f"{_ML_DTYPES_PREFIX}{name}"


def _numpy_dtype(spec: str | None) -> np.dtype[Any] | None:
    """The NumPy dtype a row's `numpy_spec` names, or None (none, or ml_dtypes lacks it)."""
    if spec is None:
        return None
    if spec.startswith(_ML_DTYPES_PREFIX):
        scalar: type | None = getattr(ml_dtypes, spec.removeprefix(_ML_DTYPES_PREFIX), None)
        return None if scalar is None else np.dtype(scalar)
    return np.dtype(spec)


def _row(
    name: str,
    bits: int,
    kind: str,
    numpy: str | None,
    burnpack: str | Mapping[str, str] | None,
    safetensors: str | None,
    torch: str | None,
) -> DType:
    return DType(name, bits, kind, burnpack, safetensors, torch, numpy)


# fmt: off
ALL_DTYPES: Final[tuple[DType, ...]] = (
    #     name         bits kind numpy                  burnpack               safetensors  torch
    _row("F64",        64, "f", _np("f8"),              "F64",                 "F64",       "float64"),
    _row("F32",        32, "f", _np("f4"),              "F32",                 "F32",       "float32"),
    # Burn's Flex32 is stored as plain f32 bytes; it maps back to F32 outside burnpack.
    _row("FLEX32",     32, "f", _np("f4"),              "Flex32",              None,        None),
    _row("F16",        16, "f", _np("f2"),              "F16",                 "F16",       "float16"),
    _row("BF16",       16, "f", _ml("bfloat16"),        "BF16",                "BF16",      "bfloat16"),
    _row("I64",        64, "i", _np("i8"),              "I64",                 "I64",       "int64"),
    _row("I32",        32, "i", _np("i4"),              "I32",                 "I32",       "int32"),
    _row("I16",        16, "i", _np("i2"),              "I16",                 "I16",       "int16"),
    _row("I8",          8, "i", _np("i1"),              "I8",                  "I8",        "int8"),
    _row("U64",        64, "u", _np("u8"),              "U64",                 "U64",       "uint64"),
    _row("U32",        32, "u", _np("u4"),              "U32",                 "U32",       "uint32"),
    _row("U16",        16, "u", _np("u2"),              "U16",                 "U16",       "uint16"),
    _row("U8",          8, "u", _np("u1"),              "U8",                  "U8",        "uint8"),
    _row("BOOL",        8, "b", _np("?"),               {"Bool": "Native"},    "BOOL",      "bool"),
    # Burn can also store bools as u8 or u32 words; NumPy sees the words, nonzero is true.
    _row("BOOL_U8",     8, "b", _np("u1"),              {"Bool": "U8"},        None,        None),
    _row("BOOL_U32",   32, "b", _np("u4"),              {"Bool": "U32"},       None,        None),
    _row("C64",        64, "c", _np("c8"),              None,                  "C64",       "complex64"),
    _row("C128",      128, "c", _np("c16"),             None,                  None,        "complex128"),
    _row("F8_E4M3",     8, "f", _ml("float8_e4m3fn"),   None,                  "F8_E4M3",   "float8_e4m3fn"),
    _row("F8_E5M2",     8, "f", _ml("float8_e5m2"),     None,                  "F8_E5M2",   "float8_e5m2"),
    _row("F8_E4M3FNUZ", 8, "f", _ml("float8_e4m3fnuz"), None,                  "F8_E4M3FNUZ",        "float8_e4m3fnuz"),
    _row("F8_E5M2FNUZ", 8, "f", _ml("float8_e5m2fnuz"), None,                  "F8_E5M2FNUZ",        "float8_e5m2fnuz"),
    _row("F8_E8M0",     8, "f", _ml("float8_e8m0fnu"),  None,                  "F8_E8M0",   "float8_e8m0fnu"),
    # Packed sub-byte floats: SafeTensors lists them; NumPy has no packed array type.
    _row("F4",          4, "f", None,                   None,                  "F4",        None),
    _row("F6_E2M3",     6, "f", None,                   None,                  "F6_E2M3",   None),
    _row("F6_E3M2",     6, "f", None,                   None,                  "F6_E3M2",   None),
    # Burn's quantized tensors: opaque bytes whose scheme travels beside the descriptor.
    _row("QFLOAT",      8, "q", None,                   None,                  None,        None),
)
# fmt: on

_BY_NAME: Final = {d.name: d for d in ALL_DTYPES}
_BY_SAFETENSORS: Final = {d.safetensors: d for d in ALL_DTYPES if d.safetensors}
_BY_BURNPACK_UNIT: Final = {d.burnpack: d for d in ALL_DTYPES if isinstance(d.burnpack, str)}
_BY_BURNPACK_BOOL: Final = {
    d.burnpack["Bool"]: d for d in ALL_DTYPES if isinstance(d.burnpack, Mapping)
}
_BY_TORCH: Final = {d.torch: d for d in ALL_DTYPES if d.torch}
# NumPy lookups prefer the first row holding a NumPy dtype: F32 before FLEX32, BOOL before words.
# Filled on the first `from_numpy`, since its keys are NumPy dtypes.
_BY_NUMPY: Final[dict[np.dtype[Any], DType]] = {}
_ML_DTYPES_INDEXED: Final[list[bool]] = [False]  # whether _BY_NUMPY holds ml_dtypes rows yet


def _fill_numpy_index(with_ml_dtypes: bool) -> dict[np.dtype[Any], DType]:
    """Index rows by NumPy dtype: NumPy's own first, ml_dtypes' only once a lookup misses, so
    ``from_numpy(float32)`` never imports ml_dtypes. The two sets never share a dtype, and
    earlier rows win (F32 over FLEX32, BOOL over Burn's word bools)."""
    _BY_NUMPY.update(
        (d.numpy, d)
        for d in reversed(ALL_DTYPES)
        if (d.numpy_spec or "").startswith(_ML_DTYPES_PREFIX) == with_ml_dtypes
        and d.numpy is not None
        and (d.kind != "b" or d.name == "BOOL")
    )
    _ML_DTYPES_INDEXED[0] = _ML_DTYPES_INDEXED[0] or with_ml_dtypes
    return _BY_NUMPY


# fmt: off
TORCH_STORAGE_CLASSES: Final[Mapping[str, str]] = MappingProxyType({
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
    "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
    "BoolStorage": "bool", "ComplexDoubleStorage": "complex128",
    "ComplexFloatStorage": "complex64", "QInt8Storage": "qint8", "QUInt8Storage": "quint8",
    "QInt32Storage": "qint32", "QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4",
    "UntypedStorage": "uint8",
})
# fmt: on
"""The storage classes torch pickles (``torch.FloatStorage``, ...: every class in torch's
``_storage_classes``) and the torch dtype each holds, in torch's spelling: `from_torch` maps it to
a row, and the quantized ones have none. torch >= 2.1 names no class for its newer dtypes
(uint16, float8, ...): it pickles an ``UntypedStorage`` of bytes and passes the dtype beside it.
"""

QFLOAT: Final = _BY_NAME["QFLOAT"]


def from_name(name: str) -> DType:
    """The row for a canonical weightstore name (``"F32"``, ``"BOOL"``, ...)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise DTypeError(f"unknown dtype name {name!r}") from None


def from_safetensors(name: str) -> DType:
    """The row for a SafeTensors header dtype string."""
    try:
        return _BY_SAFETENSORS[name]
    except (KeyError, TypeError):
        raise DTypeError(f"unknown SafeTensors dtype {name!r}") from None


def from_burnpack(value: object) -> DType:
    """The row for a decoded burnpack dtype: ``"F32"``, ``{"Bool": "U8"}``, ``{"QFloat": ...}``."""
    if isinstance(value, str) and value in _BY_BURNPACK_UNIT:
        return _BY_BURNPACK_UNIT[value]
    if isinstance(value, Mapping) and len(value) == 1:
        ((variant, inner),) = value.items()
        if variant == "Bool" and isinstance(inner, str) and inner in _BY_BURNPACK_BOOL:
            return _BY_BURNPACK_BOOL[inner]
        if variant == "QFloat" and isinstance(inner, Mapping):
            return QFLOAT
    raise DTypeError(f"unknown burnpack dtype {value!r}")


def from_numpy(dtype: np.dtype[Any] | type) -> DType:
    """The row for a NumPy dtype (either byte order)."""
    key = np.dtype(dtype)
    if key.byteorder == ">":
        key = key.newbyteorder("<")
    row = (_BY_NUMPY or _fill_numpy_index(with_ml_dtypes=False)).get(key)
    if row is None and not _ML_DTYPES_INDEXED[0]:
        row = _fill_numpy_index(with_ml_dtypes=True).get(key)
    if row is None:
        raise DTypeError(f"NumPy dtype {key} has no weightstore equivalent")
    return row


def from_torch(name: str) -> DType:
    """The row for a torch dtype given as ``"bfloat16"``, ``"torch.bfloat16"`` or the object."""
    key = str(name).removeprefix("torch.")
    try:
        return _BY_TORCH[key]
    except KeyError:
        raise DTypeError(f"torch dtype {key} has no weightstore equivalent") from None


def from_torch_storage(class_name: str) -> DType:
    """The row for the dtype a torch storage class holds (``"FloatStorage"``: F32).

    Raises:
        DTypeError: a class torch never pickles, or one holding a dtype with no row (quantized).
    """
    torch_name = TORCH_STORAGE_CLASSES.get(class_name)
    if torch_name is None:
        raise DTypeError(f"unknown torch storage class {class_name!r}")
    return from_torch(torch_name)


def to_burnpack(dtype: DType) -> str | Mapping[str, str]:
    """The burnpack CBOR value for `dtype`; QFloat values carry their scheme and are built by
    the burnpack writer."""
    if dtype.burnpack is None:
        raise DTypeError(f"dtype {dtype.name} cannot be stored in burnpack")
    return dtype.burnpack


def to_safetensors(dtype: DType) -> str:
    """The SafeTensors header name for `dtype`."""
    if dtype.safetensors is None:
        raise DTypeError(f"dtype {dtype.name} cannot be stored in SafeTensors")
    return dtype.safetensors


def _float_range(dtype: np.dtype[Any]) -> tuple[int, int, int]:
    info = ml_dtypes.finfo(dtype)  # type: ignore[no-untyped-call]
    return int(info.nmant), int(info.minexp), int(info.maxexp)


def can_cast_exactly(source: DType, target: DType) -> bool:
    """Whether every value of `source` is exactly representable in `target`.

    Loads convert a tensor to the model's dtype only when this holds (f16 -> f32, i32 -> i64,
    bf16 -> f32); anything lossy needs an explicit cast adapter.
    """
    if source == target:
        return True
    if source.numpy is None or target.numpy is None or "q" in (source.kind, target.kind):
        return False
    if source.kind == "b":
        return True  # 0 and 1 fit every numeric type
    if target.kind == "f" and source.kind == "f":
        s_mant, s_min, s_max = _float_range(source.numpy)
        t_mant, t_min, t_max = _float_range(target.numpy)
        return t_mant >= s_mant and t_min <= s_min and t_max >= s_max
    if target.kind == "f" and source.kind in "iu":
        t_mant = _float_range(target.numpy)[0]
        return source.bits - (source.kind == "i") <= t_mant + 1
    return bool(np.can_cast(source.numpy, target.numpy, casting="safe"))
