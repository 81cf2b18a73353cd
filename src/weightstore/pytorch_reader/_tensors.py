"""Lazy tensors: what a rebuild call described, turned into NumPy arrays only when asked.

A `LazyTensor` is a storage reference plus the view torch would put on it: offset, shape and
strides in elements of the tensor's dtype. `to_numpy` proves that the view fits the storage,
then returns

* a zero-copy view of the mapped file for a contiguous, aligned, little-endian tensor, or
* a C-ordered copy for anything else: strided, transposed, expanded (stride 0), channels-last,
  big-endian (byte-swapped), misaligned, or carrying torch's conjugate/negative bits.

Burn reads every tensor as if contiguous, pads short storages with zeros and fills missing ones
with zeros. Here a view that reaches past its storage, a storage whose size disagrees with its
claim, or a storage that is not there is an error naming the tensor; values are never invented.

`validate` also refuses, naming the tensor, what torch holds and NumPy cannot: more than
`MAX_NDIM` dimensions, or a shape whose byte count passes ssize_t (`MAX_ARRAY_SIZE`; zero-element
shapes included, as NumPy counts them). A view that repeats its storage's elements (stride 0)
may not copy out more than ``max_expanded_size`` bytes beyond what the storage holds, and the
negative bit is refused on the dtypes torch itself cannot negate. A size-1 dimension never steps,
so its stride, which may be anything up to 2**63 - 1 in torch, is never used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Protocol

from weightstore.base._lazy import import_on_first_use
from weightstore.base._record import Record
from weightstore.base._render import bounded_repr
from weightstore.container._slice import _InvalidIndex, normalize_key, plan_reads
from weightstore.dtypes import DType, from_torch
from weightstore.errors import (
    DescriptorError,
    DTypeError,
    LimitExceeded,
    MissingStorageError,
    SliceError,
    UnsupportedObjectError,
)
from weightstore.pytorch_reader._layout import (
    MAX_ARRAY_SIZE,
    MAX_EXPANDED_SIZE,
    MAX_NDIM,
)
from weightstore.pytorch_reader._objects import StorageClass, clip, shown_int, torch_itemsize

if TYPE_CHECKING:
    import numpy as np

    from weightstore.container._slice import Selection
else:
    np = import_on_first_use("numpy", globals(), "np")  # listing tensors never needs NumPy

__all__ = [
    "NO_NEGATION",
    "LazyTensor",
    "StorageRef",
    "StorageSource",
    "TensorSlice",
    "UnreadableTensor",
    "validate_shape",
    "validate_view",
]

_MAX_INDEX = 2**63 - 1  # torch's sizes, strides and offsets are int64

NO_NEGATION: Final = frozenset({
    "bool", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
    "float8_e5m2fnuz", "float8_e8m0fnu",
})  # fmt: skip
"""Dtypes torch 2.13 has no negation for: ``torch.load`` keeps their negative bit and fails
(``"neg_cpu" not implemented for 'Bool'``) on first touch; so do we, naming the tensor."""


class StorageSource(Protocol):
    """Where a file's storages live; each layout (`_archive`) provides one."""

    @property
    def path(self) -> str | None:
        """The file, for error messages."""
        ...

    @property
    def byte_order(self) -> str:
        """``"little"`` or ``"big"``: the order of the storage bytes as stored."""
        ...

    def has_storage(self, key: str) -> bool:
        """Whether the file holds a storage of that key (its size is checked on read)."""
        ...

    def storage_bytes(self, key: str, nbytes: int, tensor: str | None) -> memoryview:
        """The storage's bytes, read once and cached; `DescriptorError` when the file holds
        other than `nbytes` of them, `MissingStorageError` when it holds none."""
        ...

    def release(self, key: str) -> None:
        """Let the storage's mapped pages leave the process's resident memory (a streaming
        pass is done with it); a no-op where its bytes are not a view of the mapped file."""
        ...


class StorageRef(Record):
    """One storage a tensor views: its key, class, element count, and the file holding it.

    Attributes:
        key: the storage's key (``"0"``: the zip entry ``data/0``).
        storage_class: the class the pickle named; fixes the element width.
        numel: elements of the whole (root) storage, as the pickle claims.
        location: the device it was saved from (``"cpu"``, ``"cuda:0"``); read onto the CPU.
        source: the file's storages, or ``None`` when nothing can resolve the key.
        view: ``(offset, numel)`` of a legacy storage view inside the root, in elements.
    """

    key: str
    storage_class: StorageClass
    numel: int
    location: str
    source: StorageSource | None
    view: tuple[int, int] | None

    def __init__(
        self,
        key: str,
        storage_class: StorageClass,
        numel: int,
        location: str = "cpu",
        source: StorageSource | None = None,
        view: tuple[int, int] | None = None,
    ) -> None:
        set_field = self._set
        set_field("key", key)
        set_field("storage_class", storage_class)
        set_field("numel", numel)
        set_field("location", location)
        set_field("source", source)
        set_field("view", view)

    def itemsize(self, path: str | None, tensor: str | None) -> int:
        """Bytes per element of the storage; `DTypeError` for a class torch never wrote."""
        size = self.storage_class.itemsize
        if size is None:
            raise DTypeError(
                f"storage class {self.storage_class.name} is not one torch writes",
                path=path,
                tensor=tensor,
            )
        return size

    def require(self, path: str | None, tensor: str | None) -> StorageSource:
        """The source holding this storage; `MissingStorageError` when none does."""
        if self.source is None or not self.source.has_storage(self.key):
            raise MissingStorageError(self.key, path=path, tensor=tensor)
        return self.source

    def read(self, path: str | None, tensor: str | None) -> memoryview:
        """The bytes this reference covers (the view's window of the root storage)."""
        source = self.require(path, tensor)
        itemsize = self.itemsize(path, tensor)
        data = source.storage_bytes(self.key, self.numel * itemsize, tensor)
        if self.view is None:
            return data
        offset, numel = self.view
        if offset < 0 or numel < 0 or offset + numel > self.numel:
            raise DescriptorError(
                f"storage view [{shown_int(offset)}, {shown_int(offset + numel)}) lies outside "
                f"storage {bounded_repr(self.key)} of {shown_int(self.numel)} elements",
                path=path,
                tensor=tensor,
            )
        return data[offset * itemsize : (offset + numel) * itemsize]

    def window_nbytes(self, path: str | None, tensor: str | None) -> int:
        """Bytes this reference covers: the view's, else the whole storage's."""
        numel = self.numel if self.view is None else self.view[1]
        return numel * self.itemsize(path, tensor)


class UnreadableTensor(Record):
    """A tensor built by a rebuild function we cannot represent (quantized, sparse, nested,
    wrapper subclasses) or of a storage class torch never wrote; touching it raises."""

    global_name: str
    reason: str
    dtype_problem: bool
    limit: tuple[str, int, int] | None

    def __init__(
        self,
        global_name: str,
        reason: str,
        dtype_problem: bool = False,
        limit: tuple[str, int, int] | None = None,
    ) -> None:
        self._set("global_name", global_name)
        self._set("reason", reason)
        self._set("dtype_problem", dtype_problem)
        self._set("limit", limit)

    def error(
        self, path: str | None, tensor: str | None
    ) -> DTypeError | UnsupportedObjectError | LimitExceeded:
        """The error touching this tensor raises, naming `path` and `tensor`: `LimitExceeded`
        for a tensor over a limit (`limit` is what, found and limit), else by its reason."""
        if self.limit is not None:
            return LimitExceeded(*self.limit, path=path, tensor=tensor)
        if self.dtype_problem:
            return DTypeError(
                f"{self.reason} (built by {self.global_name})", path=path, tensor=tensor
            )
        return UnsupportedObjectError(self.global_name, self.reason, path=path, tensor=tensor)

    def __repr__(self) -> str:
        return f"<unreadable tensor: {self.reason}>"


class LazyTensor(Record):
    """A tensor in a PyTorch file: its dtype and shape known, its values read on `to_numpy`.

    Attributes:
        shape: sizes, as torch.load would give them.
        stride: element strides into the storage.
        storage_offset: first element, in elements of `torch_dtype`.
        torch_dtype: canonical torch dtype name (``"bfloat16"``); `dtype` maps it.
        storage: where the values live; ``None`` for meta tensors and in-memory arrays.
        array: the values, for tensors the file rebuilt from a NumPy array.
        requires_grad: as saved. is_parameter: rebuilt as an ``nn.Parameter``.
        conj, neg: torch's lazy conjugate / negation bits, applied by `to_numpy`.
        device: the device it was saved from (``"meta"`` tensors carry no values).
        name: the dotted name the reader gave it; ``None`` outside a reader's listing.
        path: the file, for error messages.
        max_expanded_size: the reader's limit on the bytes an expanded view copies out beyond
            its storage's (see `validate`).
    """

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    torch_dtype: str
    storage: StorageRef | None
    array: np.ndarray[Any, Any] | None
    requires_grad: bool
    is_parameter: bool
    conj: bool
    neg: bool
    device: str
    name: str | None
    path: str | None
    max_expanded_size: int

    def __init__(
        self,
        shape: tuple[int, ...],
        stride: tuple[int, ...],
        storage_offset: int,
        torch_dtype: str,
        storage: StorageRef | None = None,
        array: np.ndarray[Any, Any] | None = None,
        requires_grad: bool = False,
        is_parameter: bool = False,
        conj: bool = False,
        neg: bool = False,
        device: str = "cpu",
        name: str | None = None,
        path: str | None = None,
        max_expanded_size: int = MAX_EXPANDED_SIZE,
    ) -> None:
        super().__init__(
            shape, stride, storage_offset, torch_dtype, storage, array, requires_grad,
            is_parameter, conj, neg, device, name, path, max_expanded_size,
        )  # fmt: skip

    @property
    def dtype(self) -> DType:
        """The weightstore dtype; `DTypeError` naming the tensor when it has none."""
        try:
            return from_torch(self.torch_dtype)
        except DTypeError as err:
            raise DTypeError(err.detail, path=self.path, tensor=self.name) from None

    @property
    def numel(self) -> int:
        """Elements of the tensor: the product of `shape`."""
        count = 1
        for size in self.shape:
            count *= size
        return count

    @property
    def param_id(self) -> None:
        """PyTorch checkpoints record no parameter ids (burnpack does); the reader protocol's."""
        return None

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor's elements (not of its storage)."""
        return self.numel * torch_itemsize(self.torch_dtype)

    def with_name(self, name: str) -> LazyTensor:
        """A copy named `name`, so that its errors name the tensor."""
        return self.replace(name=name)

    def validate(self) -> None:
        """Prove the tensor readable without reading it: dtype known, shape one NumPy can hold,
        storage present, view inside the storage, copy within ``max_expanded_size``; raises the
        error `to_numpy` would. A meta tensor passes (its shape and dtype are real); only its
        `to_numpy` fails.

        Raises:
            DTypeError: NumPy has no such dtype, or torch cannot apply its negative bit.
            LimitExceeded: more than `MAX_NDIM` dimensions, a shape past `MAX_ARRAY_SIZE`
                bytes, or an expanded view past ``max_expanded_size``.
            MissingStorageError, DescriptorError: as `to_numpy`.
        """
        itemsize = self._numpy_itemsize()  # first: a dtype NumPy lacks is the error to give
        where = {"path": self.path, "tensor": self.name}
        validate_shape(self.shape, itemsize, **where)
        if self.neg and self.torch_dtype in NO_NEGATION:
            raise DTypeError(
                f"torch's negative bit is set on a {self.torch_dtype} tensor, which torch "
                "cannot negate either (it fails on first touch)",
                **where,
            )
        if self.array is not None or (self.storage is None and self.device == "meta"):
            return
        storage = self._storage()
        storage.require(self.path, self.name)
        window = storage.window_nbytes(self.path, self.name)
        validate_view(self.shape, self.stride, self.storage_offset, window // itemsize, **where)
        nbytes = self.numel * itemsize  # past `window` only by repeating elements
        if nbytes > window and nbytes > self.max_expanded_size:
            raise LimitExceeded(
                "bytes of a view that repeats its storage's elements",
                nbytes,
                self.max_expanded_size,
                **where,
            )

    def to_numpy(self) -> np.ndarray[Any, Any]:
        """The values `torch.load` gives, as a NumPy array (a view of the file when possible).

        Raises:
            DTypeError: NumPy cannot hold the dtype (complex32, quantized, sub-byte).
            MissingStorageError: the storage is not in the file.
            DescriptorError: the view reaches outside its storage, the storage's size
                disagrees with the pickle, or the tensor is a meta tensor with no values.
        """
        self.validate()
        np_dtype = self.numpy_dtype
        if self.array is not None:
            return self._finish(self.array.astype(np_dtype).reshape(self.shape))
        storage = self._storage()
        data = storage.read(self.path, self.name)
        swap = storage.source is not None and storage.source.byte_order == "big"
        return self._finish(_view(data, np_dtype, self, swap))

    def read_part(self, selection: list[Selection]) -> np.ndarray[Any, Any] | None:
        """The part of the tensor `selection` (`normalize_key`'s) picks, reading only its
        bytes; None where that is not possible or gains nothing (see
        ``ZipStorages.storage_runs``: a mapped, compressed or legacy file), or when the tensor
        is not a plain C-ordered view of one storage. Then `to_numpy` and NumPy's indexing
        give the same values.

        Raises:
            The errors of `validate`.
        """
        storage = self.storage
        runs_of = getattr(storage.source, "storage_runs", None) if storage else None
        if storage is None or runs_of is None or storage.view is not None or self.numel == 0:
            return None
        if self.array is not None or not _is_contiguous(self.shape, self.stride):
            return None
        self.validate()
        np_dtype = self.numpy_dtype
        itemsize = np_dtype.itemsize
        plan = plan_reads(selection, self.shape, itemsize)
        if not plan.runs:
            return np.empty(plan.result_shape, np_dtype)
        base = self.storage_offset * itemsize
        nbytes = storage.numel * storage.itemsize(self.path, self.name)
        runs = [(base + offset, size) for offset, size in plan.runs]
        gathered = runs_of(storage.key, nbytes, runs, self.name)
        if gathered is None:
            return None
        if storage.source is not None and storage.source.byte_order == "big" and itemsize > 1:
            values = _byteswapped(gathered.view(f"V{itemsize}"), np_dtype)
        else:
            values = gathered.view(np_dtype)
        part = values.reshape(plan.gathered_shape)[plan.within].reshape(plan.result_shape)
        return self._finish(part if part.flags.c_contiguous else np.ascontiguousarray(part))

    @property
    def numpy_dtype(self) -> np.dtype[Any]:
        """The NumPy dtype `to_numpy` returns; `DTypeError` naming the tensor when NumPy has
        none (complex32, quantized, sub-byte)."""
        np_dtype = self.dtype.numpy
        if np_dtype is None:
            raise DTypeError(
                f"dtype {self.torch_dtype} has no NumPy equivalent",
                path=self.path,
                tensor=self.name,
            )
        return np_dtype

    def _numpy_itemsize(self) -> int:
        """`numpy_dtype`'s itemsize and errors, without importing NumPy for NumPy's own types
        (listing a checkpoint needs no NumPy)."""
        itemsize = self.dtype.numpy_itemsize
        if itemsize is None:
            return self.numpy_dtype.itemsize  # raises the DTypeError naming the tensor
        return itemsize

    def _storage(self) -> StorageRef:
        if self.storage is None:
            detail = "a meta tensor has shape and dtype but no values"
            if self.device != "meta":
                detail = "tensor has no storage to read its values from"
            raise DescriptorError(detail, path=self.path, tensor=self.name)
        return self.storage

    def _finish(self, array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        if self.conj:
            array = np.conj(array)
        if self.neg:
            array = np.negative(array)
        return array

    def __repr__(self) -> str:
        where = f" {bounded_repr(self.name, limit=80)}" if self.name else ""
        shape = bounded_repr(list(self.shape), limit=200, max_nodes=MAX_NDIM + 1)
        return f"<tensor{where} {self.torch_dtype} {shape}>"


class TensorSlice:
    """A tensor to index like a NumPy array: ``reader.get_slice("embed.weight")[:100, ::2]``.

    In a file read by pread or at a URL, indexing a C-ordered stored tensor reads only the
    selected bytes (`LazyTensor.read_part`). Otherwise it reads the whole tensor
    (`LazyTensor.to_numpy`: for a contiguous stored tensor a view of the mapped file, so only
    the pages the selection touches are read; for a strided or compressed one, a copy of all
    of it), then selects with NumPy's rules. The result is always an array, 0-d when every axis
    is an int.
    """

    __slots__ = ("_tensor",)

    def __init__(self, tensor: LazyTensor) -> None:
        self._tensor = tensor

    @property
    def shape(self) -> tuple[int, ...]:
        """The whole tensor's shape."""
        return self._tensor.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        """The NumPy dtype of the arrays indexing returns."""
        return self._tensor.numpy_dtype

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __getitem__(self, key: object) -> np.ndarray[Any, Any]:
        """The selected part as an array.

        Raises:
            SliceError: an index NumPy refuses for this shape; checked before anything is read.
            MissingStorageError, DescriptorError: as `LazyTensor.to_numpy`.
        """
        index: Any = key
        try:  # a zero-stride stand-in of the same shape checks the index without reading
            np.broadcast_to(np.empty((), np.uint8), self.shape)[index]
        except (IndexError, TypeError, ValueError) as err:  # a zero step, a str slice bound
            detail = clip(str(err))  # NumPy's text may quote the index
            raise SliceError(detail, path=self._tensor.path, tensor=self._tensor.name) from None
        try:
            selection = normalize_key(key, self.shape)
        except _InvalidIndex:  # an index only NumPy's own indexing takes (a list, None)
            selection = None
        part = None if selection is None else self._tensor.read_part(selection)
        if part is not None:
            return part
        return np.asarray(self._tensor.to_numpy()[index])

    def __repr__(self) -> str:
        return f"<slice of {self._tensor!r}>"


def validate_shape(
    shape: tuple[int, ...], itemsize: int, *, path: str | None, tensor: str | None
) -> None:
    """Refuse a shape NumPy cannot make an array of (`itemsize`-byte elements): more than
    `MAX_NDIM` dimensions, a negative size or one past 2**63 - 1, or a byte count past
    `MAX_ARRAY_SIZE`, counted as NumPy counts it (itemsize times every non-zero size).

    Raises:
        LimitExceeded: too many dimensions, or too many bytes.
        DescriptorError: a size that is negative or past int64.
    """
    if len(shape) > MAX_NDIM:
        raise LimitExceeded("number of dimensions", len(shape), MAX_NDIM, path=path, tensor=tensor)
    if min(shape, default=0) < 0 or max(shape, default=0) > _MAX_INDEX:
        raise DescriptorError(
            f"shape {bounded_repr(list(shape))} has a size that is negative or over 2**63 - 1",
            path=path,
            tensor=tensor,
        )
    size = itemsize
    for dim in shape:  # at most MAX_NDIM factors below 2**63: the product stays small
        size *= dim or 1
    if size > MAX_ARRAY_SIZE:
        raise LimitExceeded(
            "bytes of the shape, as NumPy counts them (zero sizes skipped)",
            size,
            MAX_ARRAY_SIZE,
            path=path,
            tensor=tensor,
        )


def validate_view(
    shape: tuple[int, ...],
    stride: tuple[int, ...],
    offset: int,
    capacity: int,
    *,
    path: str | None,
    tensor: str | None,
) -> None:
    """Refuse a view torch would refuse or that reaches past `capacity` elements. The shape is
    checked as `validate_shape` checks it for one-byte elements; strides of size-1 dimensions
    are never used, so any non-negative int64 passes for them.

    Raises:
        DescriptorError: strides that do not match the shape, a negative or over-int64 stride
            or offset, or a view that reaches past the storage.
        LimitExceeded: as `validate_shape`.
    """
    validate_shape(shape, 1, path=path, tensor=tensor)
    if len(stride) != len(shape):
        raise DescriptorError(
            f"shape {bounded_repr(list(shape))} has {len(shape)} dimensions but stride "
            f"{bounded_repr(list(stride))} has {len(stride)}",
            path=path,
            tensor=tensor,
        )
    if not 0 <= offset <= _MAX_INDEX or not all(0 <= step <= _MAX_INDEX for step in stride):
        raise DescriptorError(
            f"offset {shown_int(offset)} or stride {bounded_repr(list(stride))} is negative "
            "or over 2**63 - 1",
            path=path,
            tensor=tensor,
        )
    if 0 in shape:
        return  # torch checks no storage bounds for an empty view, nor do we
    last = offset + sum((size - 1) * step for size, step in zip(shape, stride, strict=True))
    if last >= capacity:
        raise DescriptorError(
            f"view reaches element {shown_int(last)} of a storage holding "
            f"{shown_int(capacity)} elements",
            path=path,
            tensor=tensor,
        )


def _is_contiguous(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    expected = 1
    for size, step in zip(reversed(shape), reversed(stride), strict=True):
        if size != 1 and step != expected:
            return False
        expected *= size
    return True


def _byte_strides(
    shape: tuple[int, ...], stride: tuple[int, ...], itemsize: int
) -> tuple[int, ...]:
    """NumPy's strides for a validated view with elements: a size-1 dimension gets the
    contiguous stride, whatever the file says (torch accepts 2**63 - 1 there; NumPy's byte
    stride would overflow ssize_t), and every other stride is under the storage's size."""
    strides: list[int] = []
    contiguous = itemsize
    for size, step in zip(reversed(shape), reversed(stride), strict=True):
        strides.append(contiguous if size == 1 else step * itemsize)
        contiguous *= size
    return tuple(reversed(strides))


def _view(
    data: memoryview, np_dtype: np.dtype[Any], tensor: LazyTensor, swap: bool
) -> np.ndarray[Any, Any]:
    """The tensor's elements over `data`: a view when that is exact, else a C-ordered copy."""
    itemsize = np_dtype.itemsize
    if tensor.numel == 0:
        return np.empty(tensor.shape, dtype=np_dtype)
    swap = swap and itemsize > 1
    byte_strides = _byte_strides(tensor.shape, tensor.stride, itemsize)
    opaque = np.dtype(f"V{itemsize}") if swap else np_dtype
    # Over np.frombuffer's byte array, never the memoryview itself: that array holds a buffer
    # export of the mapping, which keeps a closed reader's file mapped while this view lives;
    # given the memoryview, NumPy keeps the bare mmap and no export (`_bytesource` says why).
    view: np.ndarray[Any, Any] = np.ndarray(
        tensor.shape,
        opaque,
        buffer=np.frombuffer(data, dtype=np.uint8),
        offset=tensor.storage_offset * itemsize,
        strides=byte_strides,
    )
    if not swap and view.flags.aligned and _is_contiguous(tensor.shape, tensor.stride):
        return view
    copy = view.copy(order="C")  # not ascontiguousarray, which turns a 0-d array 1-d
    return _byteswapped(copy, np_dtype) if swap else copy


def _byteswapped(array: np.ndarray[Any, Any], np_dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """Big-endian elements of `np_dtype` (held as opaque bytes) in native order. Swapped through
    unsigned words, since ml_dtypes types (bf16, fp8) cannot be byte-order flagged; a complex
    number swaps each half."""
    word = np_dtype.itemsize // 2 if np_dtype.kind == "c" else np_dtype.itemsize
    flat = array.reshape(-1).view(np.dtype(f"u{word}"))
    swapped: np.ndarray[Any, Any] = flat.byteswap().view(np_dtype).reshape(array.shape)
    return swapped
