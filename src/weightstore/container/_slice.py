"""Partial tensor reads: ``reader.get_slice(name)[a:b, :, i]`` without reading the whole tensor.

An index expression is first normalized against the shape (ints, slices with any step, one
``...``), exactly as NumPy reads it; then a `ReadPlan` lists the byte runs to fetch. Call the
innermost axis that is not taken whole the split axis; every axis inside it is read whole. For
each selected index of the axes outside it, the plan reads one contiguous run:

- the span from the lowest to the highest selected index of the split axis, when its step is
  1 or -1 (nothing extra is read) or when it is the last axis (single elements are too small to
  read one by one; the step is applied in memory), or else
- each selected index of the split axis on its own (a step over whole rows skips them).

Runs that touch are merged into one read. So ``[2:5]`` is one read of three rows, ``[::2]`` one
read per even row, ``[:, 3]`` one element per row. Only the mmap and in-memory sources can hand
back a single-run slice as a view; everything else is one copy.

The `safetensors` package ignores steps; NumPy's own slicing of the full tensor is the contract
here, and a property test holds it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from weightstore.base._lazy import import_on_first_use
from weightstore.base._render import bounded_repr
from weightstore.dtypes import DType
from weightstore.errors import DTypeError, SliceError
from weightstore.io._source import ByteSource, read_runs

if TYPE_CHECKING:
    import numpy as np
else:
    np = import_on_first_use("numpy", globals(), "np")  # header-only work never needs NumPy

__all__ = [
    "ReadPlan",
    "SliceableDescriptor",
    "TensorSlice",
    "normalize_key",
    "plan_reads",
    "view_as_array",
]


class SliceableDescriptor(Protocol):
    """What slicing needs to know of a tensor: its name, dtype, shape and byte span."""

    @property
    def name(self) -> str:
        """The tensor's name, for errors."""
        ...

    @property
    def dtype(self) -> DType:
        """The stored element type."""
        ...

    @property
    def shape(self) -> tuple[int, ...]:
        """Dimensions, outermost first."""
        ...

    @property
    def data_offsets(self) -> tuple[int, int]:
        """Start and end of the tensor's bytes, relative to the data start."""
        ...


Selection = int | range  # an int removes its axis from the result, a range keeps it


class _InvalidIndex(Exception):
    """An index that cannot select from the shape; `TensorSlice` adds the file and tensor."""


def view_as_array(
    data: memoryview, dtype: np.dtype[Any], shape: tuple[int, ...]
) -> np.ndarray[Any, Any]:
    """`data` as an array, a view when its address suits the dtype, else a copy.

    A foreign writer may have placed a tensor at an offset that is not a multiple of its element
    size; NumPy can view it but every operation on it would be slow or, in C extensions,
    undefined. Copying that one tensor keeps the rest zero-copy.
    """
    array = np.frombuffer(data, dtype=dtype).reshape(shape)
    if not array.flags.aligned:
        copied: np.ndarray[Any, Any] = array.copy()
        return copied
    return array


def normalize_key(key: object, shape: tuple[int, ...]) -> list[Selection]:
    """One `Selection` per axis of `shape`; a missing trailing index selects the whole axis.

    Raises:
        _InvalidIndex: more indices than axes, two ellipses, an unsupported index kind, or an
            integer out of range. Slices clamp, as in NumPy, and never raise for range.
    """
    items = key if isinstance(key, tuple) else (key,)
    ellipses = sum(1 for item in items if item is Ellipsis)
    if ellipses > 1:
        raise _InvalidIndex("an index can hold only one ellipsis ('...')")
    explicit = len(items) - ellipses
    if explicit > len(shape):
        raise _InvalidIndex(f"{explicit} indices given for {len(shape)} dimensions")
    expanded: list[object] = []
    for item in items:
        if item is Ellipsis:
            expanded.extend([slice(None)] * (len(shape) - explicit))
        else:
            expanded.append(item)
    expanded.extend([slice(None)] * (len(shape) - len(expanded)))
    return [
        _normalize_one(item, size, axis)
        for axis, (item, size) in enumerate(zip(expanded, shape, strict=True))
    ]


def _normalize_one(item: object, size: int, axis: int) -> Selection:
    if isinstance(item, slice):
        try:
            return range(*item.indices(size))
        except (TypeError, ValueError) as err:  # a zero step, or bounds that are not integers
            raise _InvalidIndex(f"slice {_show(item)} on axis {axis}: {err}") from None
    # NumPy reads a bool as a mask and None as a new axis; both change the result's rank in ways
    # a byte-range reader cannot, so they are refused rather than misread as integers.
    if item is None or isinstance(item, (bool, np.bool_)):
        raise _InvalidIndex(
            f"index {_show(item)} on axis {axis} is not supported; use ints and slices"
        )
    try:
        index = operator.index(item)  # type: ignore[arg-type]
    except TypeError:
        raise _InvalidIndex(
            f"index {_show(item)} on axis {axis} is not an integer, a slice or '...'"
        ) from None
    if not -size <= index < size:
        raise _InvalidIndex(
            f"index {_show(index)} is out of range for axis {axis} with size {size:,}"
        )
    return index % size


def _show(item: object) -> str:
    """An index as a message shows it, bounded: a caller's int may have 5,000 digits, which
    `str()` refuses to print, or a list a million items."""
    return bounded_repr(item, leaf=_index_leaf)


def _index_leaf(value: object) -> str | None:
    if isinstance(value, slice):
        parts = (bounded_repr(part) for part in (value.start, value.stop, value.step))
        return f"slice({', '.join(parts)})"  # bounded_repr cuts the whole to its limit
    if isinstance(value, (np.integer, np.bool_, np.floating)):
        return repr(value)  # a NumPy scalar's repr is short
    return None


class ReadPlan:
    """The byte runs one selection needs, and how to turn their bytes into the result.

    A plain class, not a dataclass: every reader imports this module, and a slotted dataclass
    costs ~0.4 ms to create, which the first load of a process would pay.

    Attributes:
        runs: ``(offset, size)`` pairs in bytes from the tensor's first byte, in result order.
        gathered_shape: the shape of the runs' bytes laid end to end.
        within: the index that takes the result out of the gathered array (steps and offsets in
            the innermost partial axis).
        result_shape: the shape NumPy gives the same selection.
    """

    __slots__ = ("gathered_shape", "result_shape", "runs", "within")

    def __init__(
        self,
        runs: tuple[tuple[int, int], ...],
        gathered_shape: tuple[int, ...],
        within: tuple[slice, ...],
        result_shape: tuple[int, ...],
    ) -> None:
        self.runs, self.gathered_shape = runs, gathered_shape
        self.within, self.result_shape = within, result_shape

    def __repr__(self) -> str:
        return (
            f"ReadPlan(runs={self.runs!r}, gathered_shape={self.gathered_shape!r}, "
            f"within={self.within!r}, result_shape={self.result_shape!r})"
        )


def _is_whole(selected: range, size: int) -> bool:
    return selected.start == 0 and selected.step == 1 and len(selected) == size


def plan_reads(selection: list[Selection], shape: tuple[int, ...], itemsize: int) -> ReadPlan:
    """The runs to read for `selection` (from `normalize_key`) of a C-order tensor."""
    ranges = [range(s, s + 1) if isinstance(s, int) else s for s in selection]
    result_shape = tuple(len(s) for s in selection if isinstance(s, range))
    if any(len(selected) == 0 for selected in ranges):
        return ReadPlan((), (0,), (), result_shape)
    partial = [axis for axis, r in enumerate(ranges) if not _is_whole(r, shape[axis])]
    if not partial:
        numel = int(np.prod(shape, dtype=np.int64))
        return ReadPlan(((0, numel * itemsize),), shape, (), result_shape)
    split = partial[-1]  # every axis after it is read whole
    strides = [int(np.prod(shape[axis + 1 :], dtype=np.int64)) for axis in range(len(shape))]
    chosen = ranges[split]
    within: tuple[slice, ...] = ()
    if abs(chosen.step) > 1 and strides[split] > 1:
        # Stepping over whole rows: each selected row is its own run, nothing in between.
        outer, base, block = split + 1, 0, strides[split]
        gathered = (*(len(r) for r in ranges[: split + 1]), *shape[split + 1 :])
    else:
        # Single elements or consecutive rows: read the span once, apply the step in memory.
        low, high = min(chosen), max(chosen)
        outer, base, block = split, low * strides[split], (high - low + 1) * strides[split]
        within = (*(slice(None),) * split, _relative_slice(chosen, low))
        gathered = (*(len(r) for r in ranges[:split]), high - low + 1, *shape[split + 1 :])
    starts = np.array(base, dtype=np.int64)
    for axis in range(outer):
        starts = starts[..., None] + np.asarray(ranges[axis], dtype=np.int64) * strides[axis]
    runs = _merge_runs(starts.reshape(-1), block, itemsize)
    return ReadPlan(runs, gathered, within, result_shape)


def _relative_slice(chosen: range, low: int) -> slice:
    """`chosen` as a slice of the span that starts at index `low`."""
    start = chosen.start - low
    stop: int | None = start + chosen.step * len(chosen)
    if stop is not None and stop < 0:  # a negative step running down to the span's first index
        stop = None
    return slice(start, stop, chosen.step)


def _merge_runs(
    starts: np.ndarray[Any, np.dtype[np.int64]], block: int, itemsize: int
) -> tuple[tuple[int, int], ...]:
    """Runs of `block` elements at `starts`, merging each into the previous when they touch."""
    breaks = np.flatnonzero(np.diff(starts) != block) + 1
    firsts = np.concatenate(([0], breaks))
    lasts = np.concatenate((breaks - 1, [len(starts) - 1]))
    return tuple(
        (int(starts[first]) * itemsize, int(starts[last] - starts[first] + block) * itemsize)
        for first, last in zip(firsts, lasts, strict=True)
    )


class TensorSlice:
    """A tensor not yet read; index it to read the selected part (see the module docstring).

    Example:
        >>> rows = reader.get_slice("embed.weight")[1000:2000]  # doctest: +SKIP
    """

    def __init__(
        self,
        source: ByteSource,
        data_start: int,
        descriptor: SliceableDescriptor,
        before_read: Callable[[], None] | None = None,
    ) -> None:
        numpy_dtype = descriptor.dtype.numpy
        if numpy_dtype is None:
            raise DTypeError(
                f"dtype {descriptor.dtype.name} has no NumPy form and cannot be sliced; "
                "use get_bytes()",
                path=source.name,
                tensor=descriptor.name,
            )
        self._source = source
        self._start = data_start + descriptor.data_offsets[0]
        self._numpy_dtype: np.dtype[Any] = numpy_dtype
        self.descriptor = descriptor
        # Run before the first read: a tensor with a digest has its whole bytes checked once
        # (docs/integrity.md), since a part cannot be checked against the whole's digest.
        self._before_read = before_read

    @property
    def shape(self) -> tuple[int, ...]:
        """The whole tensor's dimensions, before any index is applied."""
        return self.descriptor.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        """The NumPy dtype of the arrays that indexing returns."""
        return self._numpy_dtype

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __getitem__(self, key: object) -> np.ndarray[Any, Any]:
        """The selected part as an array; always an array, also when every axis is an int.

        Raises:
            SliceError: see `normalize_key`; nothing has been read when it is raised.
        """
        try:
            selection = normalize_key(key, self.shape)
        except _InvalidIndex as err:
            raise SliceError(
                str(err), path=self._source.name, tensor=self.descriptor.name
            ) from None
        plan = plan_reads(selection, self.shape, self._numpy_dtype.itemsize)
        if self._before_read is not None:
            self._before_read()
            self._before_read = None
        return self._read(plan)

    def _read(self, plan: ReadPlan) -> np.ndarray[Any, Any]:
        if not plan.runs:
            return np.empty(plan.result_shape, self._numpy_dtype)
        name = self.descriptor.name
        if len(plan.runs) == 1:
            offset, size = plan.runs[0]
            data = self._source.read(self._start + offset, size, "tensor data", name)
            gathered = view_as_array(data, self._numpy_dtype, plan.gathered_shape)
        else:  # one plan for all runs: a remote source merges and fetches them concurrently
            runs = [(self._start + offset, size) for offset, size in plan.runs]
            buffer = read_runs(self._source, runs, "tensor data", name)
            gathered = buffer.view(self._numpy_dtype).reshape(plan.gathered_shape)
        result = gathered[plan.within].reshape(plan.result_shape)
        # A step leaves a strided view over the whole span; keep only the selected elements.
        return result if result.flags.c_contiguous else np.ascontiguousarray(result)
