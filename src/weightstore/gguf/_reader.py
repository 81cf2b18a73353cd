"""Reading GGUF files: the header at open, each tensor (dequantized or as raw blocks) when asked.

A tensor stored in a plain ggml type (F32, F16, BF16, F64, I8..I64) reads as a zero-copy view of
the mapped file, as in the other containers. A quantized one has no NumPy type: `get` gives its
values dequantized (float32 unless another float dtype is asked for), `get_raw` its blocks as
they lie in the file (``uint8``, zero-copy), which is what a GGUF-to-GGUF rewrite copies.
Shapes are row-major (the file's dims reversed), so a ``[4096, 11008]`` GGUF tensor (ggml
order) is an ``(11008, 4096)`` array, as gguf-py gives it.

A big-endian file (GGUF written for s390x) reads too: its plain tensors are byte-swapped into
native order (a copy). Its quantized blocks are refused by `get`: writers disagree on whether
the scales inside blocks are swapped, and a guess would give wrong numbers; `get_raw` still
hands them out.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from weightstore.base._cause import refuse_not_weights
from weightstore.base._lazy import import_on_first_use
from weightstore.base._record import ValueRecord
from weightstore.base._render import bounded_repr
from weightstore.container._format import PROBE_SIZE
from weightstore.container._reader import ContainerReader, validate_shape
from weightstore.container._slice import TensorSlice
from weightstore.dtypes import DType, from_name
from weightstore.errors import DTypeError, HeaderError, MetadataError, SliceError
from weightstore.gguf._header import (
    ArrayHead,
    LazyArray,
    RawInfo,
    decode_array,
    decode_head,
    parse_header,
)
from weightstore.gguf._layout import MAGIC, GgufValue, ValueType
from weightstore.io._open import open_source
from weightstore.io._source import ByteSource, ReadMode
from weightstore.quantized import GgmlType

if TYPE_CHECKING:
    import numpy as np
else:
    np = import_on_first_use("numpy", globals(), "np")  # header-only work never needs NumPy

__all__ = ["GgufReader", "GgufTensorInfo"]

_FLOAT_OUTPUTS: Final = ("F32", "F16", "BF16")  # what a quantized tensor dequantizes to


class GgufTensorInfo(ValueRecord):
    """One tensor as the header describes it.

    Attributes:
        name: the tensor's name.
        ggml: its ggml type (``Q4_K``, ``F16``...).
        dtype: what `GgufReader.get` returns: the plain type's dtype, or F32 for a
            quantized type (the values it dequantizes to).
        shape: row-major, outermost first (the file's dims reversed).
        dims: the file's dims, innermost first (ggml's ``ne``).
        data_offsets: start and end of its bytes, relative to the data start.
    """

    name: str
    ggml: GgmlType
    dtype: DType
    shape: tuple[int, ...]
    dims: tuple[int, ...]
    data_offsets: tuple[int, int]

    @property
    def param_id(self) -> None:
        """GGUF records no parameter ids."""
        return None

    @property
    def nbytes(self) -> int:
        """Bytes the tensor takes in the file."""
        return self.data_offsets[1] - self.data_offsets[0]

    @property
    def quantized(self) -> bool:
        """Whether its elements are packed in blocks (no NumPy type of their own)."""
        return self.ggml.quantized


class GgufReader(ContainerReader[GgufTensorInfo]):
    """An open GGUF file. Opening reads the header (metadata arrays stay unread); tensors are
    read on access.

    Example:
        >>> with GgufReader.from_file("model.gguf") as gguf:  # doctest: +SKIP
        ...     gguf.descriptor("blk.0.attn_q.weight").ggml      # <ggml type Q4_K>
        ...     gguf.get("blk.0.attn_q.weight")                   # float32, dequantized
        ...     gguf.get_raw("blk.0.attn_q.weight")               # uint8 blocks, zero-copy
    """

    def __init__(self, source: ByteSource) -> None:
        self._source = source
        self.path = source.name
        if source.size < 4 or bytes(source.read(0, 4, "the GGUF magic")) != MAGIC:
            self._refuse_not_weights()
        header = parse_header(source)
        self._header = header
        self.version = header.version
        self.byte_order = header.byte_order
        self.alignment = header.alignment
        self.data_start = header.data_start
        self.descriptors = {info.name: _describe(info, self.path) for info in header.infos}
        self._spans = {
            name: (d.dtype, d.shape, *d.data_offsets) for name, d in self.descriptors.items()
        }
        self._plain_little = header.byte_order == "<"
        # String pairs, for what every reader offers (`weightstore.digests`, docs/integrity.md).
        self._metadata = {
            key: value.value
            for key, value in header.kvs.items()
            if isinstance(value, GgufValue) and isinstance(value.value, str)
        }

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        mode: ReadMode = "mmap",
        storage_options: Mapping[str, Any] | None = None,
    ) -> GgufReader:
        """Open a file (or a URL, read by range requests; docs/remote.md).

        Args:
            path: the file.
            mode: ``"mmap"`` (default, zero-copy views) or ``"pread"`` (a read per tensor).
            storage_options: for a URL, what its filesystem is opened with.
        """
        if storage_options is None:
            source = open_source(path, mode)
        else:
            source = open_source(path, mode, storage_options=storage_options)
        return cls._from_source(source)

    def _refuse_not_weights(self) -> None:
        size = self._source.size
        head = bytes(self._source.read(0, min(size, PROBE_SIZE), "the format probe"))
        refuse_not_weights(head, size, self.path)
        raise HeaderError(f"not a GGUF file (starts with {head[:8]!r})", path=self.path)

    # -- what the file says ---------------------------------------------------------------------

    def names(self) -> list[str]:
        """Tensor names in the order of the file's tensor infos (llama.cpp's order)."""
        return list(self.descriptors)

    def metadata(self) -> dict[str, object]:  # type: ignore[override]  # typed, not strings
        """Every metadata pair as Python values (arrays as lists, decoded now); GGUF values are
        typed, so unlike the other containers' these are not all strings."""
        return {key: _plain(value.value) for key, value in self.metadata_typed().items()}

    def metadata_typed(self) -> dict[str, GgufValue]:
        """Every metadata pair with its GGUF type (what a rewrite needs to keep types)."""
        return {key: self.metadata_value(key) for key in self._header.kvs}

    def metadata_keys(self) -> list[str]:
        """The metadata keys, in file order; no value is decoded."""
        return list(self._header.kvs)

    def metadata_type(self, key: str) -> str:
        """A key's GGUF type name (``"uint32"``, ``"array[string]"``), without decoding it."""
        value = self._header.kvs[key]
        if isinstance(value, GgufValue):
            return value.type_name
        return GgufValue(ValueType.ARRAY, None, value.element_type).type_name

    def metadata_length(self, key: str) -> int | None:
        """An array's element count (None for a scalar), without decoding it."""
        value = self._header.kvs[key]
        return value.count if isinstance(value, LazyArray) else None

    def metadata_value(self, key: str) -> GgufValue:
        """One metadata pair, decoded (an array now, from the file).

        Raises:
            KeyError: no such key.
        """
        value = self._header.kvs[key]
        if isinstance(value, GgufValue):
            return value
        items = decode_array(self._source, value, self.byte_order)
        return GgufValue(ValueType.ARRAY, items, value.element_type)

    def stored_encoding(self, name: str) -> str | None:
        """The ggml type name of a quantized tensor, None for a plain one: a store's snapshot
        carries the blocks behind its values (`weightstore.snapshot.StoredBlocks`), so a
        GGUF-to-GGUF save copies them and a load decodes them straight to the model's dtype."""
        ggml = self.descriptor(name).ggml
        return ggml.name if ggml.quantized else None

    def metadata_head(self, key: str, limit: int) -> ArrayHead:
        """An array's element type, its count and its first `limit` elements, decoding no
        more than those (what `weightstore inspect` lists of a vocabulary).

        Raises:
            KeyError: no such key.
            MetadataError: the key holds a scalar (`metadata_value` gives it).
        """
        value = self._header.kvs[key]
        if isinstance(value, GgufValue):
            raise MetadataError(
                f"metadata {key!r} is a {value.type_name}, not an array", path=self.path
            )
        return decode_head(self._source, value, self.byte_order, limit)

    def ggml_type(self, name: str) -> GgmlType:
        """The ggml type tensor `name` is stored in."""
        return self.descriptor(name).ggml

    # -- tensors --------------------------------------------------------------------------------

    def get(self, name: str, dtype: DType | str | None = None) -> np.ndarray[Any, Any]:
        """One tensor as a NumPy array, row-major.

        A plain type reads in its stored dtype (zero-copy where the file is mapped and
        little-endian); a quantized one is dequantized, to float32 or to `dtype` (``F16``,
        ``BF16``), bit-exact with gguf-py's ``quants.dequantize`` before any narrowing.

        Raises:
            TensorNotFoundError: no tensor of that name.
            DTypeError: `dtype` given for a plain tensor, or not a float dtype; a quantized
                type no kernel reads (named); quantized blocks in a big-endian file.
        """
        info = self.descriptor(name)
        if not info.quantized:
            if dtype is not None and _dtype(dtype) != info.dtype:
                raise DTypeError(
                    f"stored as {info.ggml.name}: a plain tensor reads in its own dtype; cast "
                    "the array",
                    path=self.path,
                    tensor=name,
                )
            if self._plain_little:
                return ContainerReader.get(self, name)
            return self._swapped(info)
        return self._dequantized(info, info.shape, self.get_raw(name), dtype)

    def get_raw(self, name: str) -> np.ndarray[Any, Any]:
        """The tensor's bytes as they lie in the file: ``uint8`` of the row-major shape with
        the innermost dim replaced by its row's bytes (gguf-py's shape for quantized data); a
        view where the file is mapped. Checked against its digest where the file has one."""
        info = self.descriptor(name)
        data = self.get_bytes(name)
        row = info.ggml.row_bytes(info.dims[0]) if info.dims else info.ggml.type_size
        shape = (*info.shape[:-1], row) if info.shape else (row,)
        raw: np.ndarray[Any, Any] = np.frombuffer(data, np.uint8).reshape(shape)
        return raw

    def get_slice(self, name: str) -> TensorSlice | BlockSlice:
        """A lazily read tensor: index it (``[a:b, :, i]``) to read only what is selected.
        A quantized tensor reads (and dequantizes) only the rows selected."""
        info = self.descriptor(name)
        if not info.quantized and self._plain_little:
            return TensorSlice(self._source, self.data_start, info, self._whole_checker(name))
        return BlockSlice(self, info)

    def _swapped(self, info: GgufTensorInfo) -> np.ndarray[Any, Any]:
        numpy_dtype = self._numpy_dtype(info.name)
        data = self.get_bytes(info.name)
        stored = np.frombuffer(data, numpy_dtype.newbyteorder(">")).reshape(info.shape)
        native: np.ndarray[Any, Any] = stored.astype(numpy_dtype)
        return native

    def _dequantized(
        self,
        info: GgufTensorInfo,
        shape: tuple[int, ...],
        raw: np.ndarray[Any, Any],
        dtype: DType | str | None,
    ) -> np.ndarray[Any, Any]:
        if not self._plain_little:
            raise DTypeError(
                f"{info.ggml.name} blocks in a big-endian GGUF file: writers disagree on the "
                "byte order of the scales inside blocks, so they are not dequantized; "
                "get_raw() gives the blocks",
                path=self.path,
                tensor=info.name,
            )
        output = from_name("F32") if dtype is None else _dtype(dtype)
        if output.name not in _FLOAT_OUTPUTS:
            raise DTypeError(
                f"a quantized tensor dequantizes to F32, F16 or BF16, not {output.name}",
                path=self.path,
                tensor=info.name,
            )
        from weightstore.quantized._dequantize import dequantize

        blocks = raw.reshape(-1, info.ggml.type_size)
        values = dequantize(blocks, info.ggml, output.numpy, path=self.path, tensor=info.name)
        shaped: np.ndarray[Any, Any] = values.reshape(shape)
        return shaped


class BlockSlice:
    """Part of a quantized (or byte-swapped) tensor: the rows selected are read and decoded,
    then the innermost axis is indexed. Indexes are ints and slices (one ``...`` allowed)."""

    def __init__(self, reader: GgufReader, info: GgufTensorInfo) -> None:
        self._reader, self._info = reader, info

    @property
    def shape(self) -> tuple[int, ...]:
        """The tensor's row-major shape."""
        return self._info.shape

    def __getitem__(self, key: Any) -> np.ndarray[Any, Any]:
        info, reader = self._info, self._reader
        if not info.quantized:
            values = reader.get(info.name)
            try:
                return np.asarray(values[key])
            except (IndexError, TypeError, ValueError) as err:  # NumPy's, for a bad index
                detail = f"index {bounded_repr(key)} does not fit the shape {info.shape}: {err}"
                raise SliceError(detail, path=reader.path, tensor=info.name) from None
        keys = _expanded(key, info.shape, reader.path, info.name)
        if not keys:
            return reader.get(info.name)
        raw = reader.get_raw(info.name)
        outer = [*keys[:-1], slice(None)]
        rows = raw[tuple(outer)]
        shape = (*rows.shape[:-1], info.shape[-1])
        values = reader._dequantized(info, shape, np.ascontiguousarray(rows), None)
        return np.asarray(values[(..., keys[-1])])


def _expanded(key: Any, shape: tuple[int, ...], path: str | None, name: str) -> tuple[Any, ...]:
    """`key` as one int or slice per axis, each valid for its axis, or `SliceError`."""
    ndim = len(shape)
    parts = key if isinstance(key, tuple) else (key,)
    if any(part is Ellipsis for part in parts):
        at = next(i for i, part in enumerate(parts) if part is Ellipsis)
        rest = parts[at + 1 :]
        if any(part is Ellipsis for part in rest):
            raise SliceError("an index can hold one '...'", path=path, tensor=name)
        fill = (slice(None),) * max(0, ndim - len(parts) + 1)
        parts = (*parts[:at], *fill, *rest)
    if len(parts) > ndim:
        raise SliceError(
            f"{len(parts)} indexes for a tensor of {ndim} dims", path=path, tensor=name
        )
    for part in parts:
        if not isinstance(part, slice) and type(part) is not int:
            what = type(part).__name__
            raise SliceError(
                f"a quantized tensor is indexed by ints and slices, not {what}",
                path=path,
                tensor=name,
            )
    for axis, (part, size) in enumerate(zip(parts, shape[: len(parts)], strict=True)):
        if isinstance(part, slice):
            try:
                part.indices(size)  # raises for a zero step or bounds that are not ints
            except (TypeError, ValueError) as err:
                raise SliceError(f"axis {axis}: {err}", path=path, tensor=name) from None
        elif not -size <= part < size:
            raise SliceError(
                f"index {part} is out of range for axis {axis} of size {size}",
                path=path,
                tensor=name,
            )
    return (*parts, *(slice(None),) * (ndim - len(parts)))


def _dtype(dtype: DType | str) -> DType:
    return from_name(dtype) if isinstance(dtype, str) else dtype


def _describe(info: RawInfo, path: str | None) -> GgufTensorInfo:
    dtype = from_name(info.ggml.plain or "F32")
    shape = tuple(reversed(info.dims))
    validate_shape(shape, dtype, path, info.name)
    return GgufTensorInfo(
        info.name, info.ggml, dtype, shape, info.dims, (info.offset, info.offset + info.nbytes)
    )


def _plain(value: object) -> object:
    """A decoded value without its GGUF types (nested arrays become lists)."""
    if isinstance(value, GgufValue):
        return _plain(value.value)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value
