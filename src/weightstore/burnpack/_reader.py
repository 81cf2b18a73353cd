"""Reading burnpack files: the header and metadata at open, each tensor when asked for.

Validation is Burn's plus what Burn leaves out (see `_validate_layout`): we check the data
section's exact length (Burn's check can miss up to 255 missing bytes), byte lengths against
shape and dtype, overlaps, and trailing bytes that no descriptor claims. A file either opens
with every descriptor proven consistent, or fails at open with an error naming the tensor.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import cbor2

from weightstore.base._boxes import box_ranges
from weightstore.base._cause import refuse_not_weights
from weightstore.base._lazy import import_on_first_use
from weightstore.base._render import MAX_REPR_SIZE, bounded_repr
from weightstore.burnpack._layout import (
    EXTENSION,
    FORMAT_VERSION,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    MAGIC_BYTES,
    MAX_FILE_SIZE,
    MAX_METADATA_SIZE,
    MAX_TENSOR_COUNT,
    MAX_TENSOR_SIZE,
    SCALAR_KINDS,
    CBORTagError,
    Scalar,
    TensorDescriptor,
    data_start,
    decode_metadata,
    duplicate_key_in,
)
from weightstore.container._format import PROBE_SIZE, path_for_read
from weightstore.container._reader import ContainerReader, is_u64, parse_shape_and_offsets, spans_of
from weightstore.container._slice import TensorSlice
from weightstore.dtypes import DType, from_burnpack, from_name
from weightstore.errors import (
    DescriptorError,
    DTypeError,
    FileMissingError,
    HeaderError,
    LimitExceeded,
    MetadataError,
    TruncatedError,
    UnsupportedVersionError,
)
from weightstore.io import is_url
from weightstore.io._open import open_source
from weightstore.io._source import ByteSource, ReadMode

if TYPE_CHECKING:
    import numpy as np

    from weightstore.quantized._burn_qfloat import BurnQuantScheme
else:
    np = import_on_first_use("numpy", globals(), "np")  # header-only work never needs NumPy

__all__ = ["BurnpackReader"]


class BurnpackReader(ContainerReader[TensorDescriptor]):
    """An open burnpack container. Opening reads only the header; tensors are read on access.

    Example:
        >>> with BurnpackReader.from_file("model.bpk") as pack:  # doctest: +SKIP
        ...     weight = pack.get("fc1.weight")          # NumPy view of the mapped file
    """

    def __init__(
        self,
        source: ByteSource,
        *,
        max_metadata_size: int = MAX_METADATA_SIZE,
        max_tensor_count: int = MAX_TENSOR_COUNT,
        max_tensor_size: int = MAX_TENSOR_SIZE,
    ) -> None:
        self._source = source
        self.path = source.name
        self.version, metadata_size = self._read_header(max_metadata_size)
        self.data_start = data_start(metadata_size)
        top = self._read_metadata(metadata_size)
        self._metadata: dict[str, str] = _parse_string_map(top.get("metadata"), self.path)
        self.scalars: dict[str, Scalar] = _parse_scalars(top.get("scalars"), self.path)
        self.descriptors: dict[str, TensorDescriptor] = _parse_descriptors(
            top, self.path, max_tensor_count, max_tensor_size
        )
        self._validate_layout()
        self._spans = spans_of(self.descriptors)

    def tensor_infos(self) -> list[tuple[str, DType, tuple[int, ...], int | None]]:
        """The base's, with each tensor's param id (burnpack stores one)."""
        descriptors = self.descriptors
        return [
            (name, d.dtype, d.shape, d.param_id)
            for name in self.names_in_file_order()
            for d in (descriptors[name],)
        ]

    # -- constructors ---------------------------------------------------------------------------

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        mode: ReadMode = "mmap",
        max_file_size: int = MAX_FILE_SIZE,
        storage_options: Mapping[str, Any] | None = None,
        **limits: int,
    ) -> BurnpackReader:
        """Open a file; `.bpk` is appended when the path has no extension and does not exist.

        Args:
            path: the file, or a URL (read by range requests; docs/remote.md).
            mode: ``"mmap"`` (default, zero-copy views) or ``"pread"`` (a read per tensor).
            max_file_size: refuse larger files before mapping them.
            storage_options: for a URL, what its filesystem is opened with.
            limits: ``max_metadata_size``, ``max_tensor_count``, ``max_tensor_size``.
        """
        filename = path_for_read(path, EXTENSION)
        if is_url(filename):
            filename, source = _open_url(os.fspath(path), filename, storage_options)
        elif storage_options is None:
            source = open_source(filename, mode)
        else:
            source = open_source(filename, mode, storage_options=storage_options)
        if source.size > max_file_size:
            source.close()
            raise LimitExceeded("file size", source.size, max_file_size, path=filename)
        return cls._from_source(source, **limits)

    # -- header and metadata --------------------------------------------------------------------

    def _read_header(self, max_metadata_size: int) -> tuple[int, int]:
        if self._source.size < HEADER_SIZE:
            self._refuse_not_weights()
            raise HeaderError(
                f"file is {self._source.size} bytes, shorter than the {HEADER_SIZE}-byte header",
                path=self.path,
            )
        magic, version, metadata_size = HEADER.unpack(
            self._source.read(0, HEADER_SIZE, "the header")
        )
        if magic != MAGIC:
            self._refuse_not_weights()
            raise HeaderError(
                f"magic number is {magic:#010x}, expected {MAGIC:#010x}; not a burnpack file",
                path=self.path,
            )
        if version > FORMAT_VERSION:
            raise UnsupportedVersionError(version, FORMAT_VERSION, path=self.path)
        if metadata_size > max_metadata_size:
            raise LimitExceeded("metadata size", metadata_size, max_metadata_size, path=self.path)
        return version, metadata_size

    def _refuse_not_weights(self) -> None:
        """Name what the file is when it is no weights at all (`refuse_not_weights`)."""
        size = self._source.size
        head = bytes(self._source.read(0, min(size, PROBE_SIZE), "the format probe"))
        if not head.startswith(MAGIC_BYTES):  # a cut burnpack file is a damaged one
            refuse_not_weights(head, size, self.path)

    def _read_metadata(self, metadata_size: int) -> dict[str, Any]:
        block = self._source.read(HEADER_SIZE, metadata_size, "the CBOR metadata")
        try:
            top = decode_metadata(block)
        except CBORTagError as err:
            raise MetadataError(
                f"metadata holds CBOR tag {err.tag}; burnpack metadata has no tags (Burn writes "
                "none, and cbor2 would give this one a meaning Burn does not)",
                path=self.path,
            ) from err
        except (cbor2.CBORDecodeError, ValueError, RecursionError) as err:
            duplicate = duplicate_key_in(err)
            if duplicate is not None:
                raise DescriptorError(
                    "name appears twice", path=self.path, tensor=duplicate
                ) from err
            raise MetadataError(
                f"metadata is not valid CBOR: {_clip(err)}", path=self.path
            ) from err
        if not isinstance(top, dict) or not isinstance(top.get("tensors"), dict):
            raise MetadataError("metadata is not a map with a 'tensors' map", path=self.path)
        return top

    def _validate_layout(self) -> None:
        """Descriptors must tile the data section: no overlap, no gap at the end, no tail."""
        spans = sorted(
            (d.data_offsets for d in self.descriptors.values() if d.nbytes),
        )
        by_span = {d.data_offsets: d.name for d in self.descriptors.values() if d.nbytes}
        previous_end = 0
        for start, end in spans:
            if start < previous_end:
                raise DescriptorError(
                    f"data_offsets [{start:,}, {end:,}) overlap another tensor's bytes",
                    path=self.path,
                    tensor=by_span[(start, end)],
                )
            previous_end = end
        expected = self.data_start + max(
            (d.data_offsets[1] for d in self.descriptors.values()), default=0
        )
        if self._source.size < expected:
            last = max(self.descriptors.values(), key=lambda d: d.data_offsets[1], default=None)
            raise TruncatedError(
                "the data section", expected, self._source.size,
                path=self.path, tensor=last.name if last else None,
            )  # fmt: skip
        if self._source.size > expected:
            raise DescriptorError(
                f"{self._source.size - expected:,} bytes follow the last tensor; no descriptor "
                "claims them",
                path=self.path,
            )

    # -- access ---------------------------------------------------------------------------------

    def get(self, name: str) -> np.ndarray[Any, Any]:
        """One tensor as a NumPy array in its stored dtype, a zero-copy view where possible.

        Bools stored as u8/u32 words come back as ``bool`` arrays (a copy). A QFloat tensor
        raises `DTypeError` (its bytes are codes and scales, not values of one dtype):
        `get_dequantized` gives its values, `get_bytes` its stored bytes.
        """
        array = ContainerReader.get(self, name)
        if array.dtype != np.bool_ and self.descriptors[name].dtype.kind == "b":
            words: np.ndarray[Any, Any] = np.not_equal(array, 0)
            return words
        return array

    def quant_scheme(self, name: str) -> BurnQuantScheme:
        """The decoded `QuantScheme` of QFloat tensor `name` (value, store, levels, block).

        Raises:
            TensorNotFoundError: no tensor of that name.
            DTypeError: the tensor is not QFloat.
            DescriptorError: the scheme is malformed.
        """
        from weightstore.quantized._burn_qfloat import parse_burn_scheme

        descriptor = self.descriptor(name)
        if descriptor.quant_scheme is None:
            raise DTypeError(
                f"stored as {descriptor.dtype.name}, not QFloat; it has no quantization scheme",
                path=self.path,
                tensor=name,
            )
        return parse_burn_scheme(descriptor.quant_scheme, path=self.path, tensor=name)

    def get_dequantized(self, name: str, dtype: DType | str = "F32") -> np.ndarray[Any, Any]:
        """QFloat tensor `name` dequantized to `dtype` (``F32``, ``F16`` or ``BF16``; the
        narrower ones rounded from float32 a chunk at a time), in its logical shape.

        Symmetric Q8S/Q4S/Q2S (and Q8F/Q4F/Q2F), per tensor or per block, one or two scale
        levels, Native, PackedNative or PackedU32 stores: ``x = scale * q`` as docs/burnpack.md
        gives it. `get` of a QFloat tensor still raises `DTypeError`; `get_bytes` gives the
        stored bytes.

        Raises:
            TensorNotFoundError: no tensor of that name.
            DTypeError: not QFloat; a scheme not dequantized (float values, lookup mode,
                UE8M0 scales); `dtype` not F32, F16 or BF16.
            DescriptorError: a malformed scheme; a byte length other than the scheme and shape
                give (checked before anything is read); non-finite scales.
        """
        from weightstore.quantized._burn_qfloat import check_burn_qfloat, dequantize_burn_qfloat

        output = self._dequantized_dtype(name, dtype)
        scheme = self.quant_scheme(name)
        descriptor = self.descriptors[name]
        check_burn_qfloat(scheme, descriptor.shape, descriptor.nbytes, path=self.path, tensor=name)
        data = self.get_bytes(name)
        return dequantize_burn_qfloat(
            data, descriptor.shape, scheme, output, path=self.path, tensor=name
        )

    def get_dequantized_part(
        self, name: str, index: tuple[slice, ...], dtype: DType | str = "F32"
    ) -> np.ndarray[Any, Any]:
        """``get_dequantized(name, dtype)[index]`` bit for bit, reading only the codes and
        scales of the blocks (and packed words) around the box `index` selects, so that a rank
        holding a slice reads about its share. `index` is a tuple of slices, at most one per
        dim; only the scales read are checked to be finite.

        Raises:
            SliceError: `index` is not such a tuple.
            The errors of `get_dequantized`.
        """
        from weightstore.quantized._burn_qfloat import (
            check_burn_qfloat,
            dequantize_burn_part,
            plan_burn_part,
        )

        output = self._dequantized_dtype(name, dtype)
        scheme = self.quant_scheme(name)
        descriptor = self.descriptors[name]
        shape = descriptor.shape
        check_burn_qfloat(scheme, shape, descriptor.nbytes, path=self.path, tensor=name)
        ranges = box_ranges(index, shape, path=self.path, tensor=name)
        if not shape:
            return self.get_dequantized(name, dtype)
        if any(len(kept) == 0 for kept in ranges):
            return np.empty(tuple(len(kept) for kept in ranges), output)
        part = plan_burn_part(scheme, shape, ranges)
        check = self._whole_checker(name)
        if check is not None:
            check()  # a digest covers the whole tensor's bytes; checked once, as get_slice does
        start = descriptor.data_offsets[0]
        codes = self._region(name, part.codes_dtype, part.codes_shape, start, part.codes_box)
        scales = self._region(
            name, part.scales_dtype, part.scales_grid, start + part.scales_at, part.scales_box
        )
        global_scale = None
        if part.global_at is not None:
            at, size = self.data_start + start + part.global_at, descriptor.nbytes - part.global_at
            global_scale = self._source.read(at, size, "scale", name)
        return dequantize_burn_part(
            part,
            scheme,
            codes,
            memoryview(scales.tobytes()),  # a few bytes per block
            global_scale,
            output,
            path=self.path,
            tensor=name,
        )

    def _region(
        self,
        name: str,
        dtype: str,
        shape: tuple[int, ...],
        offset: int,
        box: tuple[tuple[int, int], ...],
    ) -> np.ndarray[Any, Any]:
        """Box `box` of an array of `shape` and `dtype` at `offset` inside tensor `name`'s
        bytes (its codes or its scales), read by the runs `TensorSlice` plans."""
        element = from_name(dtype)
        end = offset + math.prod(shape) * element.itemsize
        region = _Region(name, element, shape, (offset, end))
        return TensorSlice(self._source, self.data_start, region)[
            tuple(slice(low, high) for low, high in box)
        ]

    def _dequantized_dtype(self, name: str, dtype: DType | str) -> np.dtype[Any]:
        """The output dtype, F32, F16 or BF16, or the `DTypeError` of `get_dequantized`."""
        output = from_name(dtype) if isinstance(dtype, str) else dtype
        if output.name not in ("F32", "F16", "BF16") or output.numpy is None:
            raise DTypeError(
                f"a QFloat tensor dequantizes to F32, F16 or BF16, not {output.name}",
                path=self.path,
                tensor=name,
            )
        return output.numpy

    def get_slice(self, name: str) -> TensorSlice:
        """A lazily read tensor: index it (``[a:b, ::2, i]``) to read only the part selected.

        Bools stored as u8/u32 words come back as the stored words, not as ``bool``.

        Raises:
            TensorNotFoundError: no tensor of that name.
            DTypeError: the dtype has no NumPy form, so its elements cannot be addressed.
        """
        descriptor = self.descriptor(name)
        return TensorSlice(self._source, self.data_start, descriptor, self._whole_checker(name))


class _Region(NamedTuple):
    """A part of a QFloat tensor's bytes (its codes or scales) as `TensorSlice` reads one."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    data_offsets: tuple[int, int]


def _parse_string_map(value: object, path: str | None) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise MetadataError("'metadata' is not a map of strings to strings", path=path)
    return dict(value)


def _parse_scalars(value: object, path: str | None) -> dict[str, Scalar]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MetadataError("'scalars' is not a map", path=path)
    scalars = {}
    for key, entry in value.items():
        try:
            ((kind, inner),) = entry.items()
            if kind not in SCALAR_KINDS or not isinstance(key, str):
                raise ValueError(kind)
            scalars[key] = Scalar(kind, inner)
        except (AttributeError, ValueError) as err:
            raise MetadataError(
                f"scalar {bounded_repr(key)} is malformed: {bounded_repr(entry)}", path=path
            ) from err
    return scalars


def _parse_descriptors(
    top: Mapping[str, Any], path: str | None, max_count: int, max_tensor_size: int
) -> dict[str, TensorDescriptor]:
    tensors = top["tensors"]
    if len(tensors) > max_count:
        raise LimitExceeded("tensor count", len(tensors), max_count, path=path)
    return {
        name: _parse_descriptor(name, fields, path, max_tensor_size)
        for name, fields in tensors.items()
    }


def _parse_descriptor(
    name: object, fields: object, path: str | None, max_tensor_size: int
) -> TensorDescriptor:
    if not isinstance(name, str):
        raise DescriptorError(f"tensor name {bounded_repr(name)} is not a text string", path=path)

    def fail(what: str) -> DescriptorError:
        return DescriptorError(what, path=path, tensor=name)

    if not isinstance(fields, dict):
        raise fail(f"descriptor is {type(fields).__name__}, not a map")
    dtype = _parse_dtype(fields.get("dtype"))
    if dtype is None:
        raise fail(f"dtype {bounded_repr(fields.get('dtype'))} is not a burnpack dtype")
    shape, (start, end) = parse_shape_and_offsets(fields, path, name, dtype)
    if end - start > max_tensor_size:
        raise LimitExceeded("tensor size", end - start, max_tensor_size, path=path, tensor=name)
    param_id = fields.get("param_id")
    if param_id is not None and not is_u64(param_id):
        raise fail(f"param_id {bounded_repr(param_id)} is not a u64")
    scheme = fields["dtype"]["QFloat"] if dtype.kind == "q" else None
    # QFloat lengths follow the quantization scheme's packing, which Burn's writer does not
    # check either; they are bounded by the layout checks only.
    if scheme is None and dtype.nbytes(shape) != end - start:
        raise fail(
            f"data_offsets span {end - start:,} bytes, but shape {list(shape)} of {dtype.name} "
            f"needs {dtype.nbytes(shape):,}"
        )
    return TensorDescriptor(name, dtype, shape, (start, end), param_id, scheme)


def _clip(err: BaseException) -> str:
    """A decoder's message, cut to MAX_REPR_SIZE: cbor2 may quote what it refused."""
    text = str(err)
    return text if len(text) <= MAX_REPR_SIZE else text[: MAX_REPR_SIZE - 3] + "..."


def _parse_dtype(value: object) -> DType | None:
    """The dtype a descriptor names, or ``None``. Only the forms a burnpack dtype takes (a text
    string, or a one-entry map to a string or map: ``"F32"``, ``{"Bool": "U8"}``,
    ``{"QFloat": {...}}``) reach `from_burnpack`, whose own message renders what it refuses in
    full."""
    shaped = isinstance(value, str) or (
        isinstance(value, dict)
        and len(value) == 1
        and all(isinstance(inner, (str, dict)) for inner in value.values())
    )
    try:
        return from_burnpack(value) if shaped else None
    except DTypeError:
        return None


def _open_url(
    given: str, filename: str, storage_options: Mapping[str, Any] | None
) -> tuple[str, ByteSource]:
    """Open a URL under Burn's extension rule: `filename` is `given` with ``.bpk`` added when
    it has no extension; `given` is tried first, since only a request tells whether it
    exists."""
    if filename != given:
        try:
            return given, open_source(given, storage_options=storage_options)
        except FileMissingError:
            pass
    return filename, open_source(filename, storage_options=storage_options)
