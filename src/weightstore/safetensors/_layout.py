"""SafeTensors byte layout, shared by reader and writer. Integers little-endian.

    0         header_size   u64   N, the length of the JSON header that follows
    8         JSON header   N bytes of UTF-8: one object, padded with spaces (0x20)
    8 + N     data buffer   every tensor's bytes, C order, little-endian, no gaps, no tail

The header maps each tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}``, with
offsets relative to the start of the data buffer and `end` exclusive; the optional key
``__metadata__`` maps strings to strings. The data buffer must be covered exactly: tensors sorted
by offset start where the previous one ended, and the last one ends at the end of the file.

What the `safetensors` package (0.8) writes, and `encode_header` reproduces byte for byte:

- ``__metadata__`` first (absent when the caller passed none, ``{}`` when passed empty), then the
  tensors in data order; compact JSON (``,`` and ``:`` without spaces), non-ASCII text as raw
  UTF-8, control characters escaped as ``\\n`` or ``\\u001f``.
- Tensors in the data buffer sorted by dtype rank descending (`DTYPE_RANK`, the declaration
  order of its Rust ``Dtype`` enum, which is by alignment), then by name. With an 8-aligned data
  start, every tensor then starts on a multiple of its own element size.
- The header padded with spaces to a multiple of DATA_ALIGNMENT, so the data starts 8-aligned.

One departure: the package's metadata map is a Rust ``HashMap``, so its key order changes from
run to run; we write metadata keys sorted, which is one of the orders it may produce.

A reader SHOULD NOT assume a foreign writer aligned anything; see `_slice.view_as_array`.

Limits, checked before anything is allocated: MAX_HEADER_SIZE below, and NumPy's, shared with
burnpack (`_reader_base.MAX_DIMS` dims, sizes within `MAX_ARRAY_SIZE`). The safetensors package
checks only that shape products fit a u64; a shape between the two opens there and not here.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from weightstore.base._record import ValueRecord

if TYPE_CHECKING:  # annotations only: the registry lists this format without the dtype table
    from weightstore.dtypes import DType

HEADER_SIZE_FIELD: Final = struct.Struct("<Q")  # the u64 header length N
PREFIX_SIZE: Final = HEADER_SIZE_FIELD.size  # 8 bytes before the JSON
DATA_ALIGNMENT: Final = 8  # bytes; the writer pads the JSON so the data buffer starts aligned
METADATA_KEY: Final = "__metadata__"  # the one header key that is not a tensor
EXTENSION: Final = "safetensors"  # the usual suffix; never appended to a path
PADDING: Final = b" "  # JSON whitespace, so a padded header still parses

# Checked before anything is allocated. The value is the safetensors package's MAX_HEADER_SIZE;
# a header larger than this is refused by every other reader too.
MAX_HEADER_SIZE: Final = 100_000_000  # bytes of JSON
MAX_U64: Final = 2**64 - 1  # shapes and offsets are u64 (usize) in the safetensors package

# The safetensors package's Rust `Dtype` enum in declaration order, lowest rank first. Its
# writer sorts by this rank descending; within one element size the order is not alphabetical
# (I64 before F64), so byte-identical output needs the enum's order, not the size. The FNUZ
# names are the package's; they take effect once the dtype table gives them a SafeTensors name.
DTYPE_RANK: Final[tuple[str, ...]] = (
    "BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
    "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64",
    "F64", "I64", "U64",
)  # fmt: skip
_RANK_OF: Final = {name: rank for rank, name in enumerate(DTYPE_RANK)}


class TensorDescriptor(ValueRecord):
    """One tensor's header entry: its dtype, shape and where its bytes lie in the data buffer.

    Immutable and compared field by field (a `ValueRecord`: this module loads with the format
    registry, and generating a dataclass costs more at import than it saves).
    """

    name: str
    dtype: DType
    shape: tuple[int, ...]
    data_offsets: tuple[int, int]  # relative to the data buffer, end exclusive

    def __init__(
        self, name: str, dtype: DType, shape: tuple[int, ...], data_offsets: tuple[int, int]
    ) -> None:
        self._set("name", name)
        self._set("dtype", dtype)
        self._set("shape", shape)
        self._set("data_offsets", data_offsets)

    @property
    def nbytes(self) -> int:
        """Bytes the tensor spans in the data buffer."""
        return self.data_offsets[1] - self.data_offsets[0]

    @property
    def param_id(self) -> None:
        """SafeTensors records no parameter ids (burnpack does); part of the reader protocol."""
        return None


class JsonObject(tuple[tuple[str, Any], ...]):
    """A decoded JSON object kept as its (key, value) pairs in file order, duplicates included.

    `json` would silently keep the last of two equal keys; keeping the pairs lets the reader
    refuse the duplicate and say at which level (tensor name, descriptor field, metadata key)
    it occurs.
    """


def is_text(value: object) -> bool:
    """A `str` that encodes to UTF-8. JSON escapes and Python strings can hold lone surrogates,
    which no UTF-8 header can carry."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def padded_header_size(json_size: int) -> int:
    """The header length N for `json_size` bytes of JSON: rounded up to DATA_ALIGNMENT."""
    return -(-json_size // DATA_ALIGNMENT) * DATA_ALIGNMENT


def write_rank(dtype: DType, name: str) -> tuple[int, str]:
    """Sort key giving the package's tensor order: dtype rank descending, then name.

    Python compares `str` by code point, which is the byte order of their UTF-8 that Rust uses.
    """
    assert dtype.safetensors is not None, "callers refuse dtypes SafeTensors cannot hold"
    return -_RANK_OF[dtype.safetensors], name


def encode_header(
    descriptors: Sequence[TensorDescriptor], metadata: Mapping[str, str] | None
) -> bytes:
    """The padded JSON header for `descriptors` (in data order), as the package writes it."""
    top: dict[str, Any] = {}
    if metadata is not None:
        top[METADATA_KEY] = {key: metadata[key] for key in sorted(metadata)}
    for descriptor in descriptors:
        top[descriptor.name] = {
            "dtype": descriptor.dtype.safetensors,
            "shape": list(descriptor.shape),
            "data_offsets": list(descriptor.data_offsets),
        }
    raw = json.dumps(top, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return raw + PADDING * (padded_header_size(len(raw)) - len(raw))


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode_header(block: bytes | memoryview) -> Any:
    """Decode the header bytes into `JsonObject` / list / scalar values.

    Raises:
        UnicodeDecodeError: the bytes are not UTF-8.
        ValueError: not one JSON value (``NaN`` and ``Infinity``, which `json` accepts but JSON
            does not, included), or it does not start with ``{`` as the safetensors package
            requires.
        RecursionError: nesting too deep for the parser.
    """
    text = bytes(block).decode("utf-8")
    if not text.startswith("{"):
        raise ValueError(f"the header starts with {text[:1]!r}, not '{{'")
    return json.loads(text, object_pairs_hook=JsonObject, parse_constant=_refuse_constant)
