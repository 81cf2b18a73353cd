"""A reader's tensors with each quantized tensor as one entry: `QuantizedView`.

SafeTensors, burnpack and PyTorch files hold a quantized tensor as several stored tensors
(FP8 codes and their block scales), or as one tensor no plain dtype describes (torch's
``_rebuild_qtensor``, Burn's ``QFloat``). The view puts both behind one question, "what is the
entry named ``x``", so that a store, ``inspect`` or ``diff`` can list a group as one row with
its parts under it, and dequantize it on request. It reads through the reader it is given
(headers, a group's parts, an int-pack group's tiny ``weight_shape``) and opens no file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np

from weightstore.container._format import TensorReader
from weightstore.dtypes import DType, from_name, from_numpy
from weightstore.errors import DTypeError
from weightstore.quantized._group import QuantizedGroup
from weightstore.quantized._hf_slice import SLICED_LAYOUTS, slice_group

__all__ = ["CANDIDATE_DTYPES", "QuantizedView", "stored_infos"]

CANDIDATE_DTYPES: Final = frozenset({"F8_E4M3", "F8_E5M2", "F8_E8M0", "U8", "I32", "I8", "QFLOAT"})
"""Stored dtypes some group's codes have: a file holding none of them has no group, so
recognition is skipped without looking at names (a bf16 checkpoint pays one set lookup per
tensor)."""

ONE_PART_LAYOUTS: Final = frozenset({"torch-affine", "burn"})
"""Layouts stored as one tensor whose reader dequantizes it (and a box of it, by
``get_dequantized_part``), its scales inside it or in its pickle."""

OUTPUT_DTYPES: Final = ("F32", "BF16", "F16")
"""What a group dequantizes to."""


def stored_infos(reader: TensorReader) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Stored name -> (weightstore dtype name, shape), in file order, from the header alone."""
    infos = getattr(reader, "tensor_infos", None)
    if infos is not None:
        return {name: (dtype.name, tuple(shape)) for name, dtype, shape, _ in infos()}
    any_reader: Any = reader
    is_quantized = getattr(reader, "is_quantized", None)  # torch's quantized tensors
    found: dict[str, tuple[str, tuple[int, ...]]] = {}
    for name in reader.names_in_file_order():
        if is_quantized is not None and is_quantized(name):
            info = any_reader.quantized_info(name)
            found[name] = (from_numpy(np.dtype(info.code_dtype)).name, tuple(info.shape))
        else:
            descriptor = reader.descriptor(name)
            found[name] = (descriptor.dtype.name, tuple(descriptor.shape))
    return found


class QuantizedView:
    """The entries of `reader`: plain tensors, and quantized tensors as one entry each.

    Groups are recognised from names, dtypes and shapes and, when given, the checkpoint's
    ``quantization_config`` (`recognise`); torch quantized tensors and Burn ``QFloat``
    tensors are groups of one part (layouts ``torch-affine`` and ``burn``). Parts stay
    readable one by one through `get`.

    Raises (at construction):
        QuantizedLayoutError: a group whose parts disagree, naming both tensors (an int-pack
            group's ``weight_shape`` that disagrees with its codes included).
    """

    __slots__ = ("_by_part", "_config", "_entries", "_groups", "_path", "_reader", "_stored")

    def __init__(
        self,
        reader: TensorReader,
        quantization_config: Mapping[str, object] | None = None,
        *,
        path: str | None = None,
        infos: Mapping[str, tuple[str, tuple[int, ...]]] | None = None,
    ) -> None:
        self._reader = reader
        self._path = path
        self._config = quantization_config
        header = stored_infos(reader) if infos is None else dict(infos)
        groups: dict[str, QuantizedGroup] = {}
        natives = hasattr(reader, "is_quantized")
        if natives or any(dtype in CANDIDATE_DTYPES for dtype, _ in header.values()):
            groups = self._recognise(header, quantization_config)
        self._groups = groups
        self._by_part = {part: group for group in groups.values() for part in group.parts}
        entries: list[str] = []
        for name in header:
            group = self._by_part.get(name)
            if group is None:
                entries.append(name)
            elif name == group.codes:
                entries.append(group.name)
        self._entries = entries
        self._stored = list(header)

    def _recognise(
        self,
        header: dict[str, tuple[str, tuple[int, ...]]],
        config: Mapping[str, object] | None,
    ) -> dict[str, QuantizedGroup]:
        from weightstore.quantized._hf_int import IntPackGroup, resolve_int_pack
        from weightstore.quantized._hf_recognise import recognise

        native = {name: self._native(name, info) for name, info in header.items()}
        found = {name: group for name, group in native.items() if group is not None}
        rest = {name: info for name, info in header.items() if name not in found}
        recognised, _ = recognise(rest, config, path=self._path)
        for group in recognised:
            if isinstance(group, IntPackGroup) and (not group.num_bits or not group.logical_shape):
                shape_part = group.companions["shape"]
                infos = {part: header[part] for part in group.parts}
                group = resolve_int_pack(group, self._reader.get(shape_part), infos)
            found[group.codes] = group
        ordered = [found[name] for name in header if name in found]
        return {group.name: group for group in ordered}

    def _native(self, name: str, info: tuple[str, tuple[int, ...]]) -> QuantizedGroup | None:
        """A torch quantized tensor or a Burn QFloat tensor as a group of one, else None."""
        reader: Any = self._reader
        is_quantized = getattr(reader, "is_quantized", None)
        if is_quantized is not None and is_quantized(name):
            quantized = reader.quantized_info(name)
            return QuantizedGroup(
                name=name, layout="torch-affine", codes=name, companions={},
                logical_shape=tuple(quantized.shape), block=(),
                rule=f"torch quantized tensor ({quantized.scheme})",
            )  # fmt: skip
        if info[0] == "QFLOAT" and hasattr(reader, "quant_scheme"):
            scheme = reader.quant_scheme(name)
            block = tuple(scheme.block) if scheme.block else ()
            return QuantizedGroup(
                name=name, layout="burn", codes=name, companions={}, logical_shape=info[1],
                block=block, rule=f"burn QFloat ({scheme.value}, {scheme.store})",
            )  # fmt: skip
        return None

    # -- what is here -------------------------------------------------------------------------

    @property
    def reader(self) -> TensorReader:
        """The reader the view reads through."""
        return self._reader

    @property
    def quantization_config(self) -> Mapping[str, object] | None:
        """The ``quantization_config`` the groups were recognised by, or None."""
        return self._config

    def names(self) -> list[str]:
        """Every entry in file order: plain tensors, and each group once, under its logical
        name, where its codes are."""
        return list(self._entries)

    def stored_names(self) -> list[str]:
        """Every stored tensor in file order, each part of a group included."""
        return list(self._stored)

    def groups(self) -> list[QuantizedGroup]:
        """The quantized groups, in the file order of their codes."""
        return list(self._groups.values())

    def group(self, name: str) -> QuantizedGroup | None:
        """The group whose logical name is `name`, or None."""
        return self._groups.get(name)

    def group_of(self, part: str) -> QuantizedGroup | None:
        """The group stored tensor `part` belongs to, or None (a plain tensor)."""
        return self._by_part.get(part)

    def descriptor(self, name: str) -> Any:
        """What entry `name` is: its `QuantizedGroup` (layout, logical shape, block, parts,
        rule) for a group, else the reader's own descriptor."""
        group = self._groups.get(name)
        return group if group is not None else self._reader.descriptor(name)

    def get(self, name: str) -> np.ndarray[Any, Any]:
        """A stored tensor as the reader gives it: a plain tensor or one part of a group."""
        array: np.ndarray[Any, Any] = self._reader.get(name)
        return array

    def dequantized(self, name: str, dtype: DType | str = "F32") -> np.ndarray[Any, Any]:
        """Group `name`'s values in `dtype` (F32, BF16 or F16), decoded straight to it: a
        16-bit output never holds a float32 copy of the tensor.

        Raises:
            TensorNotFoundError: no group has that name (the reader's error, for a plain one).
            DTypeError: `dtype` is another dtype.
            QuantizedLayoutError: parts that disagree, found before the output is allocated
                (the readers' own `DescriptorError` for a torch or Burn tensor).
        """
        group, output = self._decoded(name, dtype)
        reader: Any = self._reader
        if group.layout in ONE_PART_LAYOUTS:
            values: np.ndarray[Any, Any] = reader.get_dequantized(name, output)
            return values
        from weightstore.quantized._hf_dequantize import dequantize_group

        parts = {part: reader.get(part) for part in group.parts}
        return dequantize_group(group, parts, output.numpy)

    def dequantized_part(
        self, name: str, index: Any, dtype: DType | str = "F32"
    ) -> np.ndarray[Any, Any]:
        """``dequantized(name, dtype)[index]``, reading only the codes and scales of the
        blocks that enclose a box of slices (`slice_group`, or the reader's
        ``get_dequantized_part`` for a torch or Burn tensor), so that a rank or a device
        holding a slice reads about its share. Any other index dequantizes the whole tensor
        and cuts the part out of it.

        Raises:
            As `dequantized`.
        """
        from weightstore.quantized._hf_dequantize import dequantize_group

        group, output = self._decoded(name, dtype)
        box = _box(index, group.logical_shape)
        if box is not None and group.layout in ONE_PART_LAYOUTS:
            one_part: Any = self._reader  # a BurnpackReader or a PytorchReader
            index = tuple(slice(*b) for b in box)
            values: np.ndarray[Any, Any] = one_part.get_dequantized_part(name, index, output)
            return values
        if box is None or group.layout not in SLICED_LAYOUTS:
            return np.ascontiguousarray(self.dequantized(name, output)[index])
        if any(start == stop for start, stop in box):
            return np.empty(tuple(stop - start for start, stop in box), output.numpy)
        reader = self._reader
        shapes = {part: tuple(reader.descriptor(part).shape) for part in group.parts}
        cut = slice_group(group, shapes, box, enclose=True)
        parts = {
            part: reader.get(part) if key is None else np.asarray(reader.get_slice(part)[key])
            for part, key in cut.parts.items()
        }
        parts.update({name: np.asarray(values, np.int64) for name, values in cut.derived})
        values = dequantize_group(cut.group, parts, output.numpy)
        if values.shape == tuple(s.stop - s.start for s in cut.keep):
            return values
        return np.ascontiguousarray(values[cut.keep])

    def _decoded(self, name: str, dtype: DType | str) -> tuple[QuantizedGroup, DType]:
        """Group `name` and the output dtype, checked (the errors of `dequantized`)."""
        output = from_name(dtype) if isinstance(dtype, str) else dtype
        if output.name not in OUTPUT_DTYPES or output.numpy is None:
            raise DTypeError(
                f"a quantized tensor dequantizes to F32, BF16 or F16, not {output.name}",
                path=self._path,
                tensor=name,
            )
        group = self._groups.get(name)
        if group is None:
            self._reader.descriptor(name)  # the reader's own error for a name it lacks
            raise DTypeError(
                "is no quantized tensor: read it with get", path=self._path, tensor=name
            )
        return group, output


def _box(index: Any, shape: tuple[int, ...]) -> tuple[tuple[int, int], ...] | None:
    """`index` as (start, stop) per dim of `shape` when it is slices of step 1 (fewer than
    the dims: the rest whole); None for anything else (ints, steps, arrays)."""
    parts = index if isinstance(index, tuple) else (index,)
    if len(parts) > len(shape) or not all(isinstance(part, slice) for part in parts):
        return None
    box = []
    padded = (*parts, *(slice(None),) * (len(shape) - len(parts)))
    for part, size in zip(padded, shape, strict=True):
        start, stop, step = part.indices(size)
        if step != 1:
            return None
        box.append((start, max(start, stop)))
    return tuple(box)
