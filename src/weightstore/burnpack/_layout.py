"""Burnpack byte layout, shared by reader and writer. All integers little-endian.

    0            magic          u32   MAGIC (the bytes "NRUB" on disk)
    4            version        u16   <= FORMAT_VERSION
    6            metadata_size  u32   length of the CBOR map that follows
    10           CBOR metadata, then zero padding up to data_start(metadata_size)
    data_start   tensor bytes; each tensor starts on a TENSOR_ALIGNMENT boundary

The CBOR metadata is the map ``{"tensors": {name: descriptor}, "metadata": {str: str},
"scalars": {str: {"Int"|"UInt"|"Float"|"Bool": value}}}``; the last two are omitted when empty.
A descriptor is ``{"dtype", "shape", "data_offsets": [start, end], "param_id"?}`` in that key
order, offsets relative to data_start. Maps keyed by name are sorted by name; the tensor bytes are
in write order. Burn's encoder (ciborium) writes the shortest integer heads, definite lengths,
and floats in the shortest of half/single/double that holds the value exactly; `encode_metadata`
reproduces it byte for byte. It writes no CBOR tags, and `decode_metadata` refuses every tag
(see `CBOR_TAGS_CBOR2_DECODES`).

Limits, checked before anything is allocated: MAX_METADATA_SIZE, MAX_TENSOR_COUNT,
MAX_TENSOR_SIZE, MAX_CBOR_DEPTH and MAX_FILE_SIZE below; every shape must also fit NumPy
(`_reader_base.MAX_DIMS` and `MAX_ARRAY_SIZE`, shared with SafeTensors).
"""

from __future__ import annotations

import functools
import io
import math
import re
import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from weightstore.base._lazy import import_on_first_use
from weightstore.base._record import ValueRecord
from weightstore.base._render import bounded_repr

# Defined beside the registry record, which needs them without this module; re-exported here.
from weightstore.burnpack._magic import EXTENSION as EXTENSION
from weightstore.burnpack._magic import MAGIC as MAGIC
from weightstore.burnpack._magic import MAGIC_BYTES as MAGIC_BYTES
from weightstore.dtypes import DType, from_name

if TYPE_CHECKING:
    import cbor2
else:
    cbor2 = import_on_first_use("cbor2", globals(), "cbor2")

HEADER: Final = struct.Struct("<IHI")  # magic, version, metadata_size
HEADER_SIZE: Final = HEADER.size  # 10 bytes
FORMAT_VERSION: Final = 1  # newest version this reader accepts (Burn accepts 0 too)
TENSOR_ALIGNMENT: Final = 256  # bytes; keeps mmap views of every dtype aligned

# Checked before anything is allocated. Values are Burn's; changing one is a format decision.
MAX_METADATA_SIZE: Final = 100 * 2**20  # bytes of CBOR
MAX_TENSOR_COUNT: Final = 100_000  # descriptors in one file
MAX_TENSOR_SIZE: Final = 10 * 2**30  # bytes in one tensor
MAX_CBOR_DEPTH: Final = 128  # nesting levels
MAX_FILE_SIZE: Final = 100 * 2**30  # bytes; file loader only
MAX_U32: Final = 2**32 - 1  # metadata_size is a u32
MAX_U64: Final = 2**64 - 1  # shapes, offsets and param ids are u64

SCALAR_KINDS: Final = ("Int", "UInt", "Float", "Bool")

# CBOR tags. Burn's encoder (ciborium over plain serde structs) writes none, and ciborium's
# reader skips a tag and keeps what it wraps, so a tagged item means one thing to Burn and
# another to cbor2. Some of cbor2's meanings are hostile in a file: 28/29 share one value many
# times (a 512-byte file whose shape renders as 4**28 items, or contains itself), 25/256 share
# strings, 2/3 build integers of any length, 5 computes 2 ** exponent, 35 compiles a regex.
# Every tag is refused: these, which cbor2 6.2-6.3 decode themselves, through its
# `semantic_decoders`; any other through its `tag_hook`.
CBOR_TAGS_CBOR2_DECODES: Final = (
    0, 1, 2, 3, 4, 5, 25, 28, 29, 30, 35, 36, 37, 52, 54, 100, 256, 258, 260, 261, 1004, 43000,
    55799,
)  # fmt: skip


def data_start(metadata_size: int) -> int:
    """Offset of the first tensor byte: header plus metadata, rounded up to TENSOR_ALIGNMENT."""
    return align_up(HEADER_SIZE + metadata_size)


def align_up(offset: int) -> int:
    """`offset` rounded up to the next multiple of TENSOR_ALIGNMENT."""
    return -(-offset // TENSOR_ALIGNMENT) * TENSOR_ALIGNMENT


class Scalar(ValueRecord):
    """A typed scalar stored beside the tensors (burnpack ``scalars`` map).

    The kind is kept so a file rewrites to the same bytes: ``UInt(5)`` and ``Int(5)`` differ on
    disk. `of` picks the kind from a plain Python value.
    """

    kind: str
    value: int | float | bool

    def __post_init__(self) -> None:
        valid = {
            "Int": lambda v: type(v) is int and -(2**63) <= v < 2**63,
            "UInt": lambda v: type(v) is int and 0 <= v <= MAX_U64,
            "Float": lambda v: type(v) is float,
            "Bool": lambda v: type(v) is bool,
        }
        check = valid.get(self.kind)
        if check is None or not check(self.value):
            raise ValueError(
                f"not a valid burnpack scalar: {bounded_repr(self.kind)}"
                f"({bounded_repr(self.value)})"
            )

    @classmethod
    def of(cls, value: int | float | bool | Scalar) -> Scalar:
        """The scalar for a plain value: bool, float, int (``Int`` unless it needs ``UInt``)."""
        if isinstance(value, Scalar):
            return value
        if isinstance(value, bool):
            return cls("Bool", value)
        if isinstance(value, float):
            return cls("Float", value)
        if isinstance(value, int):
            return cls("Int" if value < 2**63 else "UInt", value)
        raise TypeError(f"a burnpack scalar is a bool, int or float, not {type(value).__name__}")


class TensorDescriptor(ValueRecord):
    """One tensor's entry in the metadata: where its bytes are and how to read them."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    data_offsets: tuple[int, int]  # relative to data_start, end exclusive
    param_id: int | None = None
    quant_scheme: Mapping[str, Any] | None = None  # QFloat only, verbatim

    @property
    def nbytes(self) -> int:
        """Bytes the tensor spans in the data section."""
        return self.data_offsets[1] - self.data_offsets[0]

    @property
    def logical_dtype(self) -> DType:
        """What the tensor holds as values: its dtype, but F32 for a QFloat tensor, whose bytes
        are codes and scales (`BurnpackReader.get_dequantized` gives the values)."""
        if self.dtype.kind == "q":
            return from_name("F32")
        return self.dtype


class _ShortestFloat(float):
    """Marks a float to be encoded in the shortest exact CBOR width, as ciborium does."""


def _encode_shortest_float(encoder: cbor2.CBOREncoder, value: _ShortestFloat) -> None:
    number = float(value)
    for head, fmt in ((b"\xf9", ">e"), (b"\xfa", ">f")):
        try:
            packed = struct.pack(fmt, number)
        except OverflowError:
            continue
        unpacked = struct.unpack(fmt, packed)[0]
        if unpacked == number or (math.isnan(number) and math.isnan(unpacked)):
            encoder.write(head + packed)
            return
    encoder.write(b"\xfb" + struct.pack(">d", number))


def _descriptor_map(descriptor: TensorDescriptor) -> dict[str, Any]:
    dtype: Any = descriptor.dtype.burnpack
    if descriptor.dtype.kind == "q":
        dtype = {"QFloat": descriptor.quant_scheme}
    fields: dict[str, Any] = {
        "dtype": dtype,
        "shape": list(descriptor.shape),
        "data_offsets": list(descriptor.data_offsets),
    }
    if descriptor.param_id is not None:
        fields["param_id"] = descriptor.param_id
    return fields


def encode_metadata(
    descriptors: list[TensorDescriptor],
    metadata: Mapping[str, str],
    scalars: Mapping[str, Scalar],
) -> bytes:
    """The CBOR metadata block, byte-identical to what Burn writes for the same content."""
    top: dict[str, Any] = {
        "tensors": {d.name: _descriptor_map(d) for d in sorted(descriptors, key=lambda d: d.name)}
    }
    if metadata:
        top["metadata"] = {key: metadata[key] for key in sorted(metadata)}
    if scalars:
        top["scalars"] = {
            key: {
                scalars[key].kind: _ShortestFloat(scalars[key].value)
                if scalars[key].kind == "Float"
                else scalars[key].value
            }
            for key in sorted(scalars)
        }
    if any(scalar.kind == "Float" for scalar in scalars.values()):
        return cbor2.dumps(top, encoders={_ShortestFloat: _encode_shortest_float})
    return cbor2.dumps(top)  # custom encoders slow cbor2 down 2.4x; pass them only when needed


_DUPLICATE_KEY = re.compile(r"[Dd]uplicate map key: '(.*)'")


class CBORTagError(ValueError):
    """The metadata holds a CBOR tag; burnpack metadata holds none (`CBOR_TAGS_CBOR2_DECODES`).

    Attributes:
        tag: the first tag met; for nested tags, the innermost (cbor2 decodes inside out).
    """

    def __init__(self, tag: int) -> None:
        self.tag = tag
        super().__init__(f"CBOR tag {tag} is not allowed in burnpack metadata")


def _refuse_tag(tag: int, value: object, immutable: bool) -> None:
    raise CBORTagError(tag)  # before anything looks at `value`


def _refuse_unknown_tag(tag: cbor2.CBORTag, immutable: bool) -> None:
    raise CBORTagError(tag.tag)


_REFUSE_TAGS: Final = {tag: functools.partial(_refuse_tag, tag) for tag in CBOR_TAGS_CBOR2_DECODES}


def decode_metadata(data: bytes | memoryview) -> Any:
    """Decode the CBOR block with Burn's depth limit, refusing duplicate keys, tags and trailing
    bytes.

    Raises:
        CBORTagError: the block holds a CBOR tag; its meaning is never applied.
        cbor2.CBORDecodeError: the bytes are not one well-formed CBOR item (the reader wraps it).
        ValueError: bytes remain after the item.
    """
    stream = io.BytesIO(data)
    decoder = cbor2.CBORDecoder(
        stream,
        tag_hook=_refuse_unknown_tag,
        semantic_decoders=_REFUSE_TAGS,
        max_depth=MAX_CBOR_DEPTH,
        allow_duplicate_keys=False,
        strict_hashable_types=True,
    )
    try:
        value = decoder.decode()
    except cbor2.CBORDecodeError as err:
        if isinstance(err.__cause__, CBORTagError):  # cbor2 wraps what a hook raises
            raise err.__cause__ from None
        raise
    if stream.tell() != len(stream.getbuffer()):
        raise ValueError(f"{len(stream.getbuffer()) - stream.tell():,} bytes follow the CBOR map")
    return value


def duplicate_key_in(error: Exception) -> str | None:
    """The key named by cbor2's duplicate-key error, if that is what `error` is."""
    match = _DUPLICATE_KEY.search(str(error))
    return match.group(1) if match else None
