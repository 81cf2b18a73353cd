"""Reading SafeTensors files: the JSON header at open, each tensor (or part of one) when asked.

A file opens only if its header proves consistent: valid UTF-8 JSON without duplicate keys,
known dtypes, lengths that match shape x dtype, and tensors that cover the data buffer exactly
(no overlap, no gap, no tail, nothing past the end). These are the safetensors package's rules; we
also refuse duplicate keys (its JSON parser keeps the last) and say which tensor is at fault.
Unknown descriptor fields are ignored, as the safetensors package ignores them.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from weightstore._bytesource import ByteSource, ReadMode, open_source
from weightstore._reader_base import ContainerReader, parse_shape_and_offsets
from weightstore._render import bounded_repr
from weightstore._slice import TensorSlice, view_as_array
from weightstore.dtypes import DType, from_safetensors
from weightstore.errors import (
    DescriptorError,
    DTypeError,
    HeaderError,
    LimitExceeded,
    MetadataError,
    TruncatedError,
)
from weightstore.safetensors._layout import (
    HEADER_SIZE_FIELD,
    MAX_HEADER_SIZE,
    METADATA_KEY,
    PREFIX_SIZE,
    JsonObject,
    TensorDescriptor,
    decode_header,
    is_text,
)

__all__ = ["SafetensorsReader"]


class SafetensorsReader(ContainerReader[TensorDescriptor]):
    """An open SafeTensors file. Opening reads only the header; tensors are read on access.

    Example:
        >>> with SafetensorsReader.from_file("model.safetensors") as st:  # doctest: +SKIP
        ...     weight = st.get("fc1.weight")             # NumPy view of the mapped file
        ...     rows = st.get_slice("embed.weight")[:100]  # reads 100 rows only
    """

    def __init__(self, source: ByteSource, *, max_header_size: int = MAX_HEADER_SIZE) -> None:
        self._source = source
        self.path = source.name
        self.header_size = self._read_header_size(max_header_size)
        self.data_start = PREFIX_SIZE + self.header_size
        self._metadata, descriptors = _parse_top(self._read_header(), self.path)
        _validate_layout(descriptors, source.size - self.data_start, self.path)
        # In data order, as the file lays them out; `names()` gives them sorted.
        self.descriptors: dict[str, TensorDescriptor] = {d.name: d for d in descriptors}

    # -- constructors ---------------------------------------------------------------------------

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        mode: ReadMode = "mmap",
        max_header_size: int = MAX_HEADER_SIZE,
    ) -> SafetensorsReader:
        """Open a file.

        Args:
            path: the file.
            mode: ``"mmap"`` (default, zero-copy views) or ``"pread"`` (a read per tensor, for
                filesystems where mmap misbehaves).
            max_header_size: refuse larger JSON headers before reading them.
        """
        return cls._from_source(open_source(path, mode), max_header_size=max_header_size)

    # -- header ---------------------------------------------------------------------------------

    def _read_header_size(self, max_header_size: int) -> int:
        if self._source.size < PREFIX_SIZE:
            raise HeaderError(
                f"file is {self._source.size} bytes, shorter than the {PREFIX_SIZE}-byte "
                "header length",
                path=self.path,
            )
        (header_size,) = HEADER_SIZE_FIELD.unpack(
            self._source.read(0, PREFIX_SIZE, "the header length")
        )
        # The limit comes first, as in the safetensors package: a length of exabytes marks a hostile
        # or corrupt file, which a "truncated" message would misdescribe.
        if header_size > max_header_size:
            raise LimitExceeded("header size", header_size, max_header_size, path=self.path)
        return int(header_size)

    def _read_header(self) -> Any:
        block = self._source.read(PREFIX_SIZE, self.header_size, "the JSON header")
        try:
            return decode_header(block)
        except UnicodeDecodeError as err:
            raise MetadataError(
                f"header is not UTF-8: byte {err.start:,} is {block[err.start]:#04x}",
                path=self.path,
            ) from err
        except (ValueError, RecursionError) as err:
            # Python's texts quote no content (a position, "Exceeds the limit (4300 digits)", the
            # recursion depth), and `decode_header`'s own name only NaN or Infinity.
            raise MetadataError(f"header is not valid JSON: {err}", path=self.path) from err

    # -- access ---------------------------------------------------------------------------------

    def get(self, name: str) -> np.ndarray[Any, Any]:
        """One tensor as a NumPy array in its stored dtype.

        A zero-copy view where the source allows it and the tensor is aligned for its dtype; a
        copy of this tensor alone otherwise.

        Raises:
            TensorNotFoundError: no tensor of that name.
            DTypeError: the dtype has no NumPy form (F4, F6_*); use `get_bytes`.
        """
        numpy_dtype = self._numpy_dtype(name)
        return view_as_array(self.get_bytes(name), numpy_dtype, self.descriptor(name).shape)

    def get_slice(self, name: str) -> TensorSlice:
        """A lazily read tensor: index it (``[a:b, ::2, i]``) to read only the part selected.

        Raises:
            TensorNotFoundError: no tensor of that name.
            DTypeError: the dtype has no NumPy form, so its elements cannot be addressed.
        """
        return TensorSlice(self._source, self.data_start, self.descriptor(name))


def _parse_top(top: object, path: str | None) -> tuple[dict[str, str], list[TensorDescriptor]]:
    """Split the header object into metadata and descriptors, refusing repeated keys."""
    if not isinstance(top, JsonObject):
        raise MetadataError("header is not a JSON object", path=path)
    metadata: dict[str, str] | None = None
    descriptors: dict[str, TensorDescriptor] = {}
    for key, value in top:
        if key == METADATA_KEY:
            if metadata is not None:
                raise MetadataError(f"{METADATA_KEY!r} appears twice", path=path)
            metadata = _parse_metadata(value, path)
        elif key in descriptors:
            raise DescriptorError("name appears twice in the header", path=path, tensor=key)
        else:
            descriptors[key] = _parse_descriptor(key, value, path)
    return metadata or {}, sorted(descriptors.values(), key=lambda d: d.data_offsets)


def _parse_metadata(value: object, path: str | None) -> dict[str, str]:
    if value is None:  # the safetensors package reads `null` as "no metadata"
        return {}
    if not isinstance(value, JsonObject):
        raise MetadataError(f"{METADATA_KEY!r} is not a JSON object", path=path)
    metadata: dict[str, str] = {}
    for key, text in value:
        if key in metadata:
            raise MetadataError(f"metadata key {bounded_repr(key)} appears twice", path=path)
        if not is_text(key) or not is_text(text):
            raise MetadataError(
                f"metadata value of {bounded_repr(key)} is {bounded_repr(text)}, not a string; "
                "SafeTensors metadata maps strings to strings",
                path=path,
            )
        metadata[key] = text
    return metadata


def _fields(name: str, value: object, path: str | None) -> dict[str, Any]:
    if not isinstance(value, JsonObject):
        raise DescriptorError("descriptor is not a JSON object", path=path, tensor=name)
    fields: dict[str, Any] = {}
    for key, field in value:
        if key in fields:
            raise DescriptorError(
                f"field {bounded_repr(key)} appears twice", path=path, tensor=name
            )
        fields[key] = field
    return fields


def _parse_descriptor(name: str, value: object, path: str | None) -> TensorDescriptor:
    if not is_text(name):
        raise DescriptorError("name is not valid Unicode", path=path, tensor=name)
    fields = _fields(name, value, path)
    raw_dtype = fields.get("dtype")
    try:
        # Only a string can name a dtype, and only a string reaches from_safetensors, whose own
        # message renders what it refuses in full.
        dtype = from_safetensors(raw_dtype) if isinstance(raw_dtype, str) else None
    except DTypeError:
        dtype = None
    if dtype is None:
        raise DescriptorError(
            f"dtype {bounded_repr(raw_dtype)} is not a SafeTensors dtype", path=path, tensor=name
        )
    shape, (start, end) = parse_shape_and_offsets(fields, path, name, dtype)
    _validate_length(name, dtype, shape, end - start, path)
    return TensorDescriptor(name, dtype, shape, (start, end))


def _validate_length(
    name: str, dtype: DType, shape: tuple[int, ...], nbytes: int, path: str | None
) -> None:
    """Shape x dtype must be exactly the span; packed dtypes must fill whole bytes."""
    numel = 1
    for dim in shape:
        numel *= dim
    bits = numel * dtype.bits
    if bits % 8:
        raise DescriptorError(
            f"shape {list(shape)} of {dtype.name} is {bits:,} bits, not a whole number of bytes",
            path=path,
            tensor=name,
        )
    if bits // 8 != nbytes:
        raise DescriptorError(
            f"data_offsets span {nbytes:,} bytes, but shape {list(shape)} of {dtype.name} "
            f"needs {bits // 8:,}",
            path=path,
            tensor=name,
        )


def _validate_layout(descriptors: list[TensorDescriptor], data_size: int, path: str | None) -> None:
    """Tensors, in offset order, must tile the data buffer: no overlap, gap, overrun or tail."""
    position = 0
    for descriptor in descriptors:
        start, end = descriptor.data_offsets
        if end > data_size:
            raise TruncatedError(
                "tensor data", end - start, max(0, data_size - start),
                path=path, tensor=descriptor.name,
            )  # fmt: skip
        if start < position:
            raise DescriptorError(
                f"data_offsets [{start:,}, {end:,}) overlap the previous tensor, which ends at "
                f"{position:,}",
                path=path,
                tensor=descriptor.name,
            )
        if start > position:
            raise DescriptorError(
                f"data_offsets start at {start:,}, leaving bytes [{position:,}, {start:,}) that "
                "no tensor covers",
                path=path,
                tensor=descriptor.name,
            )
        position = end
    if position < data_size:
        raise DescriptorError(
            f"{data_size - position:,} bytes follow the last tensor; no tensor covers them",
            path=path,
        )
