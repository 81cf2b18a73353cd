"""Stand-ins for torch's tensor rebuild functions: each builds a `LazyTensor` (or refuses).

torch pickles a tensor as a call, ``torch._utils._rebuild_tensor_v2(storage, storage_offset,
size, stride, requires_grad, backward_hooks[, metadata])``, whose storage argument is a
persistent id the file's layout resolves (`storage_from_pid`). The stand-ins here take the same
arguments, check their types, and record them; nothing is read until `LazyTensor.to_numpy`.

The ``TABLE`` at the bottom maps each function's name to its stand-in; `_globals` merges it into
the table of every known global. Quantized tensors are recorded as `QuantizedTensor`s (codes and
parameters, see `_qtensor`). Rebuilds whose result has no NumPy form (sparse,
nested tensors, storage-less wrapper subclasses) build an `UnreadableTensor`, so the file still
opens and the error comes, naming the tensor, only when that tensor is asked for.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from weightstore.base._lazy import import_on_first_use
from weightstore.base._render import bounded_repr
from weightstore.dtypes import TORCH_STORAGE_CLASSES
from weightstore.pytorch_reader._layout import MAX_NDIM
from weightstore.pytorch_reader._objects import (
    Context,
    GlobalRef,
    Malformed,
    PersistentRef,
    StorageClass,
    TorchDevice,
    TorchDType,
    expect_int,
    expect_ints,
    shown_int,
    take,
)
from weightstore.pytorch_reader._qtensor import QuantizedTensor, code_dtype, rebuild_qtensor
from weightstore.pytorch_reader._tensors import (
    LazyTensor,
    StorageRef,
    StorageSource,
    UnreadableTensor,
)

if TYPE_CHECKING:
    import numpy as np
else:
    np = import_on_first_use("numpy", globals(), "np")  # rebuilding tensors never needs NumPy

__all__ = ["TABLE", "storage_class_of", "storage_from_pid"]

StandInFn = Callable[[Context, tuple[object, ...]], object]

_UTILS: Final = "torch._utils"
_TENSOR: Final = "torch._tensor"
_MAX_NUMEL: Final = 2**63 - 1  # torch counts a storage's elements in an int64


def _device_text(value: object) -> str:
    """A device argument (a ``torch.device`` or its string) as the string torch prints."""
    return str(value) if isinstance(value, TorchDevice) else _text(value, "device")


def _text(value: object, what: str) -> str:
    """A str field that Python 2 era files may hold as ASCII bytes."""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if not isinstance(value, str):
        raise Malformed(f"{what} must be a string, not {type(value).__name__}")
    return value


def storage_class_of(value: object) -> StorageClass:
    """The storage class a persistent id names: a storage global, or its name as a string."""
    if isinstance(value, StorageClass):
        return value
    if isinstance(value, GlobalRef):
        value = value.name
    name = _text(value, "storage class")
    return StorageClass(name, TORCH_STORAGE_CLASSES.get(name))


def storage_from_pid(pid: object, source: StorageSource | None) -> StorageRef:
    """A storage persistent id, ``("storage", class, key, location, numel[, view])``, as a
    `StorageRef` into `source`. The optional sixth item is a legacy storage view
    ``(view_key, offset, numel)`` or ``None``."""
    items = take(pid, "storage persistent id", 5, 6)
    kind = _text(items[0], "persistent id kind")
    if kind != "storage":
        raise Malformed(f"persistent id kind must be 'storage', not {bounded_repr(kind)}")
    key = items[2]
    key_text = str(key) if type(key) is int else _text(key, "storage key")
    numel = expect_int(items[4], "storage numel")
    if not 0 <= numel <= _MAX_NUMEL:
        raise Malformed(f"storage {bounded_repr(key_text)} claims {shown_int(numel)} elements")
    view = None
    if len(items) == 6 and items[5] is not None:
        _, offset, size = take(items[5], "storage view", 3)
        view = (expect_int(offset, "view offset"), expect_int(size, "view size"))
    location = _text(items[3], "storage location")
    return StorageRef(key_text, storage_class_of(items[1]), numel, location, source, view)


def _storage_arg(context: Context, value: object, name: str) -> StorageRef:
    if isinstance(value, tuple):  # Burn's hand-made tar files inline the id without BINPERSID
        value = context.persistent_load(value)
    if isinstance(value, PersistentRef):
        value = storage_from_pid(value.pid, None)
    if not isinstance(value, StorageRef):
        raise Malformed(f"{name} expects a storage, not {type(value).__name__}")
    return value


def _metadata_bits(value: object) -> tuple[bool, bool]:
    """torch's tensor metadata dict: ``{"conj": True}`` and/or ``{"neg": True}``."""
    if value is None:
        return False, False
    if not isinstance(value, dict):
        raise Malformed(f"tensor metadata must be a dict, not {type(value).__name__}")
    return value.get("conj") is True, value.get("neg") is True


def _tensor(
    context: Context,
    name: str,
    args: tuple[object, ...],
    torch_dtype: str | None,
    metadata: object = None,
) -> LazyTensor | UnreadableTensor:
    """A tensor viewing ``args = (storage, offset, size, stride, [requires_grad])``."""
    storage = _storage_arg(context, args[0], name)
    offset = expect_int(args[1], f"{name} storage_offset")
    too_many = _too_many_dims(f"{_UTILS}.{name}", args[2])
    if too_many is not None:
        return too_many
    shape = expect_ints(args[2], f"{name} size", MAX_NDIM)
    stride = expect_ints(args[3], f"{name} stride", MAX_NDIM)
    dtype = storage.storage_class.torch_dtype if torch_dtype is None else torch_dtype
    if dtype is None:
        reason = f"storage class {storage.storage_class.name} is not one torch writes"
        return UnreadableTensor(f"{_UTILS}.{name}", reason, dtype_problem=True)
    conj, neg = _metadata_bits(metadata)
    return LazyTensor(
        shape,
        stride,
        offset,
        dtype,
        storage,
        requires_grad=len(args) > 4 and args[4] is True,
        conj=conj,
        neg=neg,
        device=storage.location,
        path=context.path,
        max_expanded_size=context.limits.max_expanded_size,
    )


def _too_many_dims(global_name: str, size: object) -> UnreadableTensor | None:
    """A tensor of more dimensions than NumPy holds, which torch saves and loads: listed, and
    refused with `LimitExceeded` when touched. Only the length is read, so a 16-million-item
    size costs nothing however many tensors share it."""
    if not isinstance(size, tuple | list) or len(size) <= MAX_NDIM:
        return None
    limit = ("number of dimensions", len(size), MAX_NDIM)
    return UnreadableTensor(global_name, f"a tensor of {len(size):,} dimensions", limit=limit)


def _rebuild_tensor(context: Context, args: tuple[object, ...]) -> object:
    return _tensor(context, "_rebuild_tensor", take(args, "_rebuild_tensor", 4), None)


def _rebuild_tensor_v2(context: Context, args: tuple[object, ...]) -> object:
    args = take(args, "_rebuild_tensor_v2", 6, 7)
    metadata = args[6] if len(args) == 7 else None
    return _tensor(context, "_rebuild_tensor_v2", args, None, metadata)


def _rebuild_tensor_v3(context: Context, args: tuple[object, ...]) -> object:
    """torch >= 2.1 writes dtypes without a typed storage class (uint16, float8, ...) this
    way: an untyped (byte) storage, and the dtype as the seventh argument."""
    args = take(args, "_rebuild_tensor_v3", 7, 8)
    dtype = _dtype_arg(args[6], "_rebuild_tensor_v3")
    metadata = args[7] if len(args) == 8 else None
    return _tensor(context, "_rebuild_tensor_v3", args, dtype.name, metadata)


def _rebuild_qtensor(context: Context, args: tuple[object, ...]) -> object:
    """``_rebuild_qtensor(storage, offset, size, stride, quantizer_params, requires_grad,
    hooks)``: the codes as a plain view of the storage, and the parameters, recorded
    (`weightstore.pytorch_reader._qtensor` checks them when the tensor is asked for)."""
    args = take(args, "_rebuild_qtensor", 7)
    storage = _storage_arg(context, args[0], "_rebuild_qtensor")
    stored = storage.storage_class.torch_dtype
    plain = code_dtype(stored)
    if plain is None:  # a float storage, say: refused by name when touched
        return QuantizedTensor(torch_dtype=stored or storage.storage_class.name)
    codes = _tensor(context, "_rebuild_qtensor", args[:4], plain)
    if not isinstance(codes, LazyTensor):
        return codes
    return rebuild_qtensor(args[4], codes.replace(requires_grad=args[5] is True))


def _dtype_arg(value: object, name: str) -> TorchDType:
    if not isinstance(value, TorchDType):
        raise Malformed(f"{name} expects a torch dtype, not {type(value).__name__}")
    return value


def _as_parameter(value: object, requires_grad: object, name: str) -> object:
    if isinstance(value, UnreadableTensor):
        return value
    if not isinstance(value, LazyTensor):
        raise Malformed(f"{name} expects a tensor, not {type(value).__name__}")
    return value.replace(requires_grad=requires_grad is True, is_parameter=True)


def _rebuild_parameter(context: Context, args: tuple[object, ...]) -> object:
    data, requires_grad, _hooks = take(args, "_rebuild_parameter", 3)
    return _as_parameter(data, requires_grad, "_rebuild_parameter")


def _rebuild_parameter_with_state(context: Context, args: tuple[object, ...]) -> object:
    """A Parameter with Python attributes set on it; the attributes are not tensor values."""
    data, requires_grad, _hooks, _state = take(args, "_rebuild_parameter_with_state", 4)
    return _as_parameter(data, requires_grad, "_rebuild_parameter_with_state")


def _rebuild_from_type(context: Context, args: tuple[object, ...]) -> object:
    """``_rebuild_from_type[_v2](func, new_type, args, state)``: a tensor subclass (a
    Parameter, a user subclass) rebuilt by `func`; the values are those of `func`'s tensor."""
    func, new_type, inner, _state = take(args, "_rebuild_from_type_v2", 4)
    if not isinstance(inner, tuple):
        kind = type(inner).__name__
        raise Malformed(f"_rebuild_from_type_v2 arguments must be a tuple, not a {kind}")
    tensor = context.call(func, inner)
    if isinstance(new_type, GlobalRef) and new_type.name == "Parameter":
        return _as_parameter(
            tensor, isinstance(tensor, LazyTensor) and tensor.requires_grad, "_rebuild_from_type_v2"
        )
    return tensor


def _numpy_data(value: object, name: str) -> np.ndarray[Any, Any]:
    if "numpy" not in sys.modules:  # then nothing is a NumPy array
        raise Malformed(f"{name} expects a numeric NumPy array, not {type(value).__name__}")
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "biufc":
        raise Malformed(f"{name} expects a numeric NumPy array, not {type(value).__name__}")
    return value


def _rebuild_device_tensor_from_numpy(context: Context, args: tuple[object, ...]) -> object:
    """Tensors of devices without storages (old XLA saves): the values travel as an array."""
    data, dtype, device, requires_grad = take(args, "_rebuild_device_tensor_from_numpy", 4)
    array = _numpy_data(data, "_rebuild_device_tensor_from_numpy")
    torch_dtype = _dtype_arg(dtype, "_rebuild_device_tensor_from_numpy").name
    return LazyTensor(
        array.shape,
        _c_strides(array.shape),
        0,
        torch_dtype,
        None,
        array,
        requires_grad is True,
        device=_device_text(device),
        path=context.path,
    )


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides: list[int] = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _rebuild_device_tensor_from_cpu_tensor(context: Context, args: tuple[object, ...]) -> object:
    data, dtype, device, _grad = take(args, "_rebuild_device_tensor_from_cpu_tensor", 4)
    if not isinstance(data, LazyTensor):
        kind = type(data).__name__
        raise Malformed(f"_rebuild_device_tensor_from_cpu_tensor expects a tensor, not a {kind}")
    if _dtype_arg(dtype, "_rebuild_device_tensor_from_cpu_tensor").name != data.torch_dtype:
        name = f"{_UTILS}._rebuild_device_tensor_from_cpu_tensor"
        return UnreadableTensor(name, "a dtype conversion on load")
    return data.replace(device=_device_text(device))


def _rebuild_meta_tensor_no_storage(context: Context, args: tuple[object, ...]) -> object:
    """A meta tensor: shape, strides and dtype, no values; `to_numpy` says so."""
    dtype, size, stride, requires_grad = take(args, "_rebuild_meta_tensor_no_storage", 4)
    name = _dtype_arg(dtype, "_rebuild_meta_tensor_no_storage").name
    too_many = _too_many_dims(f"{_UTILS}._rebuild_meta_tensor_no_storage", size)
    if too_many is not None:
        return too_many
    shape = expect_ints(size, "meta tensor size", MAX_NDIM)
    strides = expect_ints(stride, "meta tensor stride", MAX_NDIM)
    return LazyTensor(
        shape, strides, 0, name, None, None, requires_grad is True, device="meta", path=context.path
    )


def _unreadable(name: str, reason: str) -> StandInFn:
    def build(context: Context, args: tuple[object, ...]) -> object:
        return UnreadableTensor(name, reason)

    return build


def _device(context: Context, args: tuple[object, ...]) -> object:
    """``torch.device("cuda:0")`` or ``torch.device("cuda", 0)``."""
    args = take(args, "torch.device", 1, 2)
    kind = _text(args[0], "device type")
    index: int | None = None
    if len(args) == 2 and args[1] is not None:
        index = expect_int(args[1], "device index")
    elif ":" in kind:
        kind, _, digits = kind.partition(":")
        index = int(digits) if digits.isdigit() and len(digits) < 10 else None
    return TorchDevice(kind, index)


def _size(context: Context, args: tuple[object, ...]) -> object:
    """``torch.Size((2, 3))`` is a plain tuple of ints here."""
    (sizes,) = take(args, "torch.Size", 1)
    if isinstance(sizes, tuple | list):  # one list may be passed again and again
        context.spend(len(sizes))
    return expect_ints(sizes, "torch.Size", context.limits.max_container_size)


# fmt: off
TABLE: Final[dict[tuple[str, str], StandInFn]] = {
    (_UTILS, "_rebuild_tensor"): _rebuild_tensor,
    (_UTILS, "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    (_UTILS, "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    (_UTILS, "_rebuild_parameter"): _rebuild_parameter,
    (_UTILS, "_rebuild_parameter_with_state"): _rebuild_parameter_with_state,
    (_UTILS, "_rebuild_qtensor"): _rebuild_qtensor,
    (_UTILS, "_rebuild_device_tensor_from_numpy"): _rebuild_device_tensor_from_numpy,
    (_UTILS, "_rebuild_xla_tensor"): _rebuild_device_tensor_from_numpy,  # its old name
    (_UTILS, "_rebuild_device_tensor_from_cpu_tensor"): _rebuild_device_tensor_from_cpu_tensor,
    (_UTILS, "_rebuild_meta_tensor_no_storage"): _rebuild_meta_tensor_no_storage,
    (_TENSOR, "_rebuild_from_type"): _rebuild_from_type,
    (_TENSOR, "_rebuild_from_type_v2"): _rebuild_from_type,
    ("torch", "device"): _device,
    ("torch", "Size"): _size,
    **{(_UTILS, name): _unreadable(f"{_UTILS}.{name}", reason) for name, reason in (
        ("_rebuild_sparse_tensor", "a sparse tensor"),
        ("_rebuild_sparse_csr_tensor", "a sparse CSR tensor"),
        ("_rebuild_nested_tensor", "a nested tensor"),
        ("_rebuild_wrapper_subclass", "a tensor subclass with no storage"),
    )},
}
# fmt: on
"""The torch functions rebuilt here, by ``(module, name)``, and the stand-in for each."""
