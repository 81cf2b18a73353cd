"""`diff` over quantized tensors: a group is one entry, compared by its parts or its values.

SafeTensors, burnpack and PyTorch files store a quantized tensor as several tensors (FP8 codes
and scales, an MXFP4 pair) or as one no dtype describes (a torch quantized tensor, Burn's
``QFloat``); `weightstore.stores._groups.source_view` tells which, as it does for a load.
`diff` matches such a tensor by its logical name, on either side:

* a group on both sides of one layout whose parts hold the same bytes, role by role, is
  equal without being dequantized ("identical parts");
* otherwise both sides' values are compared in float32 (a group dequantized, a plain tensor
  as stored) with the usual statistics and tolerances, and the report names what each side
  stores (``fp8-block vs BF16``): so a quantized checkpoint diffs against its float original.

A group counts as different only when its values differ beyond the tolerance; what each side
stores is reported either way. Torch quantized tensors and Burn ``QFloat`` are compared by
their values (their scales are not tensors to compare byte for byte).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from weightstore.base._record import ValueRecord
from weightstore.cli._compare import Difference, compare_arrays
from weightstore.cli._errors import about
from weightstore.container._format import TensorReader
from weightstore.quantized import QuantizedGroup

if TYPE_CHECKING:
    from weightstore.quantized._view import QuantizedView

__all__ = ["Entries", "QuantizedDiff", "compare_entry", "entries_of"]

_NATIVE: Final = frozenset({"torch-affine", "burn"})  # one stored tensor whose scales are not
_CHUNK_SIZE: Final = 16 * 2**20  # bytes of two parts compared at once


class QuantizedDiff(ValueRecord):
    """A name that is quantized on at least one side, compared.

    Attributes:
        name: the logical name.
        a, b: what each side stores: a group's layout (``fp8-block``) or a plain dtype.
        identical: both are groups of one layout whose parts hold the same bytes.
        values: how the float32 values differ; None when `identical` (not dequantized).
    """

    name: str
    a: str
    b: str
    identical: bool
    values: Difference | None

    @property
    def differing(self) -> bool:
        """Whether the values differ beyond the tolerance."""
        return self.values is not None and self.values.differing > 0


class Entries:
    """One file's entries: plain tensors, and each quantized group under its logical name."""

    __slots__ = ("path", "reader", "view")

    def __init__(self, path: str, reader: TensorReader, view: QuantizedView | None) -> None:
        self.path, self.reader, self.view = path, reader, view

    def names(self) -> set[str]:
        """Every entry's name: a group once, by its logical name."""
        return set(self.view.names()) if self.view is not None else set(self.reader.names())

    def group(self, name: str) -> QuantizedGroup | None:
        """The group named `name`, or None for a plain tensor."""
        return self.view.group(name) if self.view is not None else None

    def shape(self, name: str) -> tuple[int, ...]:
        """The logical shape of entry `name`."""
        group = self.group(name)
        return (
            group.logical_shape if group is not None else tuple(self.reader.descriptor(name).shape)
        )

    def stored(self, name: str, plain_type: Callable[[Any], str]) -> str:
        """What entry `name` is stored as: a group's layout, or `plain_type` of its descriptor."""
        group = self.group(name)
        return group.layout if group is not None else plain_type(self.reader.descriptor(name))

    def values(self, name: str) -> np.ndarray[Any, Any]:
        """Entry `name`'s values: a group dequantized to float32, a plain tensor as read."""
        with about(self.path):
            if self.group(name) is not None:
                assert self.view is not None
                return self.view.dequantized(name, "F32")
            array: np.ndarray[Any, Any] = self.reader.get(name)
            return array


def entries_of(path: str, reader: TensorReader) -> Entries:
    """`reader`'s entries, its quantized groups recognised as a load recognises them (from the
    ``config.json`` beside a local file, or by names, dtypes and shapes); a format that
    decodes its own quantized tensors (GGUF) has none."""
    from weightstore.stores._groups import source_view

    with about(path):
        view = source_view(reader, path)
    return Entries(path, reader, view if view is not None and view.groups() else None)


def compare_entry(
    name: str,
    a: Entries,
    b: Entries,
    plain_type: Callable[[Any], str],
    tolerance: tuple[float, float],
    advance: Callable[[int], None],
) -> QuantizedDiff:
    """Compare entry `name`, a group on one side at least, of one logical shape on both."""
    group_a, group_b = a.group(name), b.group(name)
    stored_a, stored_b = a.stored(name, plain_type), b.stored(name, plain_type)
    if group_a is not None and group_b is not None and _same_parts(a, b, group_a, group_b):
        advance(4 * math.prod(group_a.logical_shape))
        return QuantizedDiff(name, stored_a, stored_b, True, None)
    atol, rtol = tolerance
    found = compare_arrays(a.values(name), b.values(name), atol=atol, rtol=rtol, advance=advance)
    return QuantizedDiff(name, stored_a, stored_b, False, found)


def _same_parts(a: Entries, b: Entries, group_a: QuantizedGroup, group_b: QuantizedGroup) -> bool:
    """Whether two groups of one layout hold the same bytes in every part, role by role."""
    if group_a.layout != group_b.layout or group_a.layout in _NATIVE:
        return False
    roles_a = {"codes": group_a.codes, **group_a.companions}
    roles_b = {"codes": group_b.codes, **group_b.companions}
    if roles_a.keys() != roles_b.keys():
        return False
    for role, part_a in roles_a.items():
        with about(a.path):
            array_a = a.reader.get(part_a)
        with about(b.path):
            array_b = b.reader.get(roles_b[role])
        if array_a.dtype != array_b.dtype or array_a.shape != array_b.shape:
            return False
        if not _same_bytes(array_a, array_b):
            return False
    return True


def _same_bytes(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> bool:
    """Whether two arrays of one dtype and shape hold the same bytes, a chunk at a time."""
    flat_a = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    flat_b = np.ascontiguousarray(b).reshape(-1).view(np.uint8)
    for start in range(0, flat_a.size, _CHUNK_SIZE):
        stop = start + _CHUNK_SIZE
        if not np.array_equal(flat_a[start:stop], flat_b[start:stop]):
            return False
    return True
