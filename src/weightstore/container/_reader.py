"""What every container reader shares: shape checks, name lookup, raw byte ranges, closing.

Burnpack and SafeTensors readers differ in how they parse headers and build arrays; checking a
descriptor's shape and offsets, looking a tensor up by name, slicing its bytes out of the source
and releasing the file are the same and live here once. The shape check holds NumPy's limits
(MAX_DIMS, MAX_ARRAY_SIZE), so a header that opens never fails later inside NumPy.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeVar, cast

from weightstore.base._lazy import import_on_first_use
from weightstore.base._render import bounded_repr
from weightstore.dtypes import DType
from weightstore.errors import DescriptorError, DTypeError, LimitExceeded, TensorNotFoundError
from weightstore.io._digest import DigestCheck
from weightstore.io._source import ByteSource, MemorySource, MmapSource

if TYPE_CHECKING:
    import numpy as np
else:
    np = import_on_first_use("numpy", globals(), "np")  # header-only work never needs NumPy

__all__ = [
    "MAX_ARRAY_SIZE",
    "MAX_DIMS",
    "MAX_U64",
    "ContainerReader",
    "Span",
    "is_u64",
    "parse_shape_and_offsets",
    "spans_of",
    "validate_shape",
]

MAX_U64: Final = 2**64 - 1  # both headers store shapes and offsets as u64 (Rust usize)

# NumPy's own limits, shared by every format whose tensors become arrays. A shape past them
# passes every length check (a zero-element tensor spans 0 bytes whatever its dims), then fails
# inside NumPy at first touch with a bare ValueError; so both are checked at open. Neither is
# a reader option: no file can raise what NumPy can hold.
# Plain constants, not asked of NumPy, so header-only work never imports it (pyproject pins
# numpy>=2.0, whose limits these are).
MAX_DIMS: Final = 64  # NumPy 2's NPY_MAXDIMS
# ssize_t (np.intp): NumPy refuses a dim, an element count or a byte count past it. It multiplies
# itemsize by every non-zero dim, so a zero-element (2**61, 0) float32 tensor is "too big" too.
MAX_ARRAY_SIZE: Final = sys.maxsize  # ssize_t max, = np.iinfo(np.intp).max


def is_u64(value: object) -> bool:
    """A plain `int` (not a bool) that fits a u64."""
    return type(value) is int and 0 <= value <= MAX_U64


def parse_shape_and_offsets(
    fields: Mapping[str, Any], path: str | None, name: str, dtype: DType
) -> tuple[tuple[int, ...], tuple[int, int]]:
    """A descriptor's ``shape`` and ``data_offsets``, checked as both formats require: a list
    of u64 that NumPy can hold as a `dtype` array (`validate_shape`), and a pair of u64 whose
    end is not before its start.

    Raises:
        DescriptorError: either field is malformed; names the tensor.
        LimitExceeded: the shape has too many dims or is too large for NumPy.
    """
    shape = fields.get("shape")
    if not isinstance(shape, list) or not all(is_u64(dim) for dim in shape):
        raise DescriptorError(
            f"shape {bounded_repr(shape)} is not a list of non-negative integers",
            path=path,
            tensor=name,
        )
    validate_shape(shape, dtype, path, name)
    offsets = fields.get("data_offsets")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(map(is_u64, offsets)):
        raise DescriptorError(
            f"data_offsets {bounded_repr(offsets)} is not a pair of non-negative integers",
            path=path,
            tensor=name,
        )
    start, end = offsets
    if end < start:
        raise DescriptorError(
            f"data_offsets end {end:,} is before start {start:,}", path=path, tensor=name
        )
    return tuple(shape), (start, end)


def validate_shape(shape: Sequence[int], dtype: DType, path: str | None, name: str) -> None:
    """Refuse a shape of non-negative ints that NumPy cannot make a `dtype` array of: more than
    MAX_DIMS dims, or an itemsize times non-zero dims past MAX_ARRAY_SIZE.

    Packed sub-byte dtypes, which NumPy lacks, count one byte per element: the same rule holds
    for every dtype, so every shape a reader accepts can be reshaped and sliced.

    Raises:
        LimitExceeded: either limit is passed; `what` is ``"dimension count"`` or the size.
    """
    if len(shape) > MAX_DIMS:
        raise LimitExceeded("dimension count", len(shape), MAX_DIMS, path=path, tensor=name)
    size = -(-dtype.bits // 8)  # bytes per element, sub-byte dtypes rounded up
    for dim in shape:  # at most MAX_DIMS factors of at most 64 bits: the product stays small
        size *= dim or 1
    if size > MAX_ARRAY_SIZE:
        raise LimitExceeded(
            "shape size in bytes, as NumPy counts it (zero dims skipped)",
            size,
            MAX_ARRAY_SIZE,
            path=path,
            tensor=name,
        )


class _Descriptor(Protocol):
    @property
    def dtype(self) -> DType: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def data_offsets(self) -> tuple[int, int]: ...


_VIEWING_SOURCES: Final = frozenset({MemorySource, MmapSource})  # sources with `array`

Span = tuple[DType, tuple[int, ...], int, int]
"""What reading one tensor needs: dtype, shape, and start and end relative to the data start.
Readers keep one per tensor beside the descriptors, as a plain tuple, so opening a header of
20,000 tensors need not build 20,000 descriptor objects (`descriptors` may build them lazily)."""


def spans_of(descriptors: Mapping[str, _Descriptor]) -> dict[str, Span]:
    """Each descriptor's `Span`, in the same order."""
    return {name: (d.dtype, d.shape, *d.data_offsets) for name, d in descriptors.items()}


DescriptorT = TypeVar("DescriptorT", bound=_Descriptor)
ReaderT = TypeVar("ReaderT", bound="ContainerReader")  # type: ignore[type-arg]


_FILE_CHUNK: Final = 16 * 2**20  # bytes hashed per read of a whole file (`file_digest`)
_UNREAD: Final = object()  # `ContainerReader._digests` before the metadata was looked at


class ContainerReader(Generic[DescriptorT]):
    """Base of the container readers; subclasses set these attributes when opening."""

    _source: ByteSource
    path: str | None
    data_start: int  # absolute offset that descriptors' data_offsets are relative to
    descriptors: Mapping[str, DescriptorT]
    _spans: dict[str, Span]  # the descriptors' spans, in the same order
    _metadata: dict[str, str]
    # Digests the file carries (docs/integrity.md): parsed on the first read, None when the
    # file has none or checking is off (`check_digests(False)`); `_UNREAD` until then.
    _digests: DigestCheck | object | None = _UNREAD

    def __init__(self, source: ByteSource, **limits: int) -> None:
        raise NotImplementedError  # each format parses its own header

    @classmethod
    def _from_source(cls: type[ReaderT], source: ByteSource, **limits: int) -> ReaderT:
        """Open `source`, closing it again if the header is refused."""
        try:
            return cls(source, **limits)
        except BaseException:
            source.close()
            raise

    @classmethod
    def from_bytes(
        cls: type[ReaderT], data: bytes | bytearray | memoryview, *, copy: bool = True,
        **limits: int,
    ) -> ReaderT:  # fmt: skip
        """Read a file held in memory.

        Mutable buffers are copied first unless `copy` is false, so later writes by the caller
        cannot change tensors already handed out. `bytes` are never copied.
        """
        if copy and not isinstance(data, bytes):
            data = bytes(data)
        return cls._from_source(MemorySource(data), **limits)

    @classmethod
    def from_static(
        cls: type[ReaderT], buffer: bytes | bytearray | memoryview, **limits: int
    ) -> ReaderT:
        """Read a buffer in place: every tensor is a view into `buffer`, nothing is copied."""
        return cls._from_source(MemorySource(buffer), **limits)

    def metadata(self) -> dict[str, str]:
        """The file's user metadata (string pairs); a copy, so changing it changes nothing."""
        return dict(self._metadata)

    def check_digests(self, enabled: bool = True) -> None:
        """Turn checking the file's digests as tensors are read on (the default) or off."""
        self._digests = _UNREAD if enabled else None

    def digest_check(self) -> DigestCheck | None:
        """The file's digests and what was checked, or None (no digests, or checking off).

        Raises:
            DigestError: a ``weightstore.digests`` value that is not the documented JSON.
        """
        check = self._digests
        if check is _UNREAD:
            check = self._digests = DigestCheck.of(self._metadata, self.path)
        return cast("DigestCheck | None", check)

    def verify_digests(self, names: Iterable[str] | None = None) -> list[str]:
        """Check the bytes of `names` (every tensor by default) against their digests, each
        once per open reader; the names that carry no digest, sorted (all when checking is off
        or the file has none).

        Raises:
            DigestMismatchError: the first tensor whose bytes differ.
        """
        wanted = self.names() if names is None else list(names)
        check = self.digest_check()
        if check is None:
            return sorted(wanted)
        for name in wanted:
            if check.wants(name):
                self._check_bytes(check, name)
        return check.missing(wanted)

    def file_digest(self, algorithm: str) -> str:
        """The digest of the whole file's bytes (a set's shard digests), read in chunks."""
        from weightstore.io._digest import new_hasher

        hasher = new_hasher(algorithm)
        source, position = self._source, 0
        while position < source.size:
            size = min(_FILE_CHUNK, source.size - position)
            hasher.update(source.read(position, size, "file data"))
            position += size
        return hasher.hexdigest()

    def _check_bytes(self, check: DigestCheck, name: str) -> None:
        """Hash tensor `name`'s stored bytes (a view where the source maps them)."""
        _, _, start, end = self._spans[name]
        data = self._source.read(self.data_start + start, end - start, "tensor data", name)
        check.check(name, data)

    def _whole_checker(self, name: str) -> Callable[[], None] | None:
        """What a slice of `name` calls before its first read: the whole tensor checked once."""
        check = self.digest_check()
        if check is None or not check.wants(name):
            return None
        return lambda: self._check_bytes(check, name) if check.wants(name) else None

    def names(self) -> list[str]:
        """Tensor names, sorted."""
        return sorted(self.descriptors)

    def names_in_file_order(self) -> list[str]:
        """Tensor names in the order their bytes lie in the file: reading tensors in this order
        streams through the file, which matters on a cold cache (1.75x faster than name order
        for a 312 MiB burnpack file in our benchmark)."""
        spans = self._spans
        return sorted(spans, key=lambda name: spans[name][2:])

    def tensor_infos(self) -> list[tuple[str, DType, tuple[int, ...], int | None]]:
        """Name, dtype, shape and param id of every tensor, in file order: what a snapshot
        needs, from the spans, without building a descriptor object per tensor."""
        spans = self._spans
        return [(name, *spans[name][:2], None) for name in self.names_in_file_order()]

    def __contains__(self, name: object) -> bool:
        return name in self.descriptors

    def __len__(self) -> int:
        return len(self.descriptors)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def descriptor(self, name: str) -> DescriptorT:
        """The header's entry for tensor `name` (dtype, shape, byte span); reads no data.

        Raises:
            TensorNotFoundError: no tensor of that name.
        """
        try:
            return self.descriptors[name]
        except KeyError:
            raise TensorNotFoundError(name, path=self.path, known=len(self.descriptors)) from None

    def _numpy_dtype(self, name: str) -> np.dtype[Any]:
        """The NumPy dtype tensor `name` reads as; `DTypeError` for dtypes NumPy lacks."""
        dtype = self.descriptor(name).dtype
        if dtype.numpy is None:
            what = f"dtype {dtype.name} has no NumPy form; use get_bytes()"
            raise DTypeError(what, path=self.path, tensor=name)
        return dtype.numpy

    def get(self, name: str) -> np.ndarray[Any, Any]:
        """One tensor as a NumPy array in its stored dtype.

        A zero-copy view where the source maps the file (or views a buffer) and the tensor is
        aligned for its dtype; a copy of this tensor alone otherwise (see
        `_slice.view_as_array`).

        Raises:
            TensorNotFoundError: no tensor of that name.
            DTypeError: the dtype has no NumPy form (F4, F6_*, QFloat); use `get_bytes`.
        """
        # The per-tensor path of every load: one `Span` lookup, and no check the header parse
        # already proved (length = shape x dtype, inside the data).
        span = self._spans.get(name)
        numpy_dtype = None if span is None else span[0].numpy
        if span is None or numpy_dtype is None:
            numpy_dtype = self._numpy_dtype(name)  # raises the error that says which
            span = self._spans[name]
        _, shape, start, end = span
        source = self._source
        check = self._digests
        if check is not None:  # digests: checked before the array is handed out
            check = self.digest_check()
        if type(source) in _VIEWING_SOURCES:  # not isinstance: a Protocol check costs 1.5 us
            if check is not None and check.wants(name):
                self._check_bytes(check, name)
            array = cast(MemorySource, source).array(
                self.data_start + start, end - start, numpy_dtype, shape, name
            )
        else:
            data = source.read(self.data_start + start, end - start, "tensor data", name)
            if check is not None and check.wants(name):
                check.check(name, data)
            array = np.frombuffer(data, numpy_dtype).reshape(shape)
        if array.flags.aligned:
            return array
        copied: np.ndarray[Any, Any] = array.copy()
        return copied

    def plan_reads(self, names: Iterable[str]) -> None:
        """Announce that `names` will be read whole (`get`), so a remote source fetches them
        in merged, concurrent batches (`weightstore.io._remote_source`); nothing for a local file.
        Names the file lacks are ignored."""
        plan = getattr(self._source, "plan", None)
        if plan is None:
            return
        spans, start = self._spans, self.data_start
        plan([(start + spans[n][2], spans[n][3] - spans[n][2]) for n in names if n in spans])

    def get_bytes(self, name: str) -> memoryview:
        """The raw bytes of one tensor: a view for mmap and memory sources, a copy for pread;
        checked against the tensor's digest, where it has one, before they are returned."""
        start, end = self.descriptor(name).data_offsets
        data = self._source.read(self.data_start + start, end - start, "tensor data", name)
        check = self.digest_check()
        if check is not None:
            check.check(name, data)
        return data

    def close(self) -> None:
        """Release the file; arrays already handed out stay valid."""
        self._source.close()

    def __enter__(self: ReaderT) -> ReaderT:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
