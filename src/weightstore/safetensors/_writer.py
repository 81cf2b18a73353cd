"""Writing SafeTensors files in one pass, byte-identical to the `safetensors` package.

Everything that can be refused is refused when the writer is built, before a byte is written:
names, dtypes, lengths and metadata. The layout is then planned from the entries' declared
sizes (in the package's order unless the caller keeps its own), the header is encoded, and each
entry's bytes are requested, written and dropped in turn, so a save holds one tensor at a time.
The package's own Python `save_file` needs every tensor in memory at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from weightstore.container._writer import ContainerWriter
from weightstore.entry import TensorEntry
from weightstore.errors import DTypeError, EntryError
from weightstore.safetensors._layout import (
    HEADER_SIZE_FIELD,
    MAX_HEADER_SIZE,
    MAX_U64,
    METADATA_KEY,
    PREFIX_SIZE,
    TensorDescriptor,
    encode_header,
    is_text,
    write_rank,
)

__all__ = ["SafetensorsWriter"]


class SafetensorsWriter(ContainerWriter):
    """A planned SafeTensors file, ready to be written to bytes or a file.

    Args:
        entries: the tensors; their data is read once each, during the write, in file order.
        metadata: string pairs stored under ``__metadata__``; ``None`` omits the key, ``{}``
            writes it empty (as the package does).
        keep_order: lay tensors out in the order given instead of the package's order (dtype
            rank descending, then name). Tensors may then start at offsets that are not a
            multiple of their element size; readers copy those instead of viewing them.

    Raises:
        EntryError: a duplicate, reserved or non-text name, a length that disagrees with shape
            and dtype, metadata that is not str -> str, or a header over MAX_HEADER_SIZE.
        DTypeError: a dtype SafeTensors cannot hold (burnpack's QFloat, C128, ...).

    Example:
        >>> writer = SafetensorsWriter([TensorEntry.from_array("w", array)])  # doctest: +SKIP
        >>> writer.save("model.safetensors")
    """

    def __init__(
        self,
        entries: Iterable[TensorEntry],
        metadata: Mapping[str, str] | None = None,
        *,
        keep_order: bool = False,
    ) -> None:
        given = list(entries)
        for entry in given:
            _validate_entry(entry)
        _refuse_duplicates(given)
        self.entries: Sequence[TensorEntry] = (
            given if keep_order else sorted(given, key=lambda e: write_rank(e.dtype, e.name))
        )
        self.descriptors = _plan(self.entries)
        self._header = encode_header(self.descriptors, _string_map(metadata))
        if len(self._header) > MAX_HEADER_SIZE:
            raise EntryError(
                f"header is {len(self._header):,} bytes, over the {MAX_HEADER_SIZE:,} that "
                "SafeTensors readers accept"
            )
        self.data_start = PREFIX_SIZE + len(self._header)
        last_end = self.descriptors[-1].data_offsets[1] if self.descriptors else 0
        self.size = self.data_start + last_end

    def _pieces(self) -> Iterator[bytes | memoryview]:
        """The file's bytes in order: the prefix, then each tensor, produced only when asked."""
        yield HEADER_SIZE_FIELD.pack(len(self._header)) + self._header
        for entry in self.entries:
            yield entry.read()  # no local name, so this frame drops it before the next read


def _string_map(metadata: Mapping[str, str] | None) -> dict[str, str] | None:
    if metadata is None:
        return None
    for key, value in metadata.items():
        if not is_text(key) or not is_text(value):
            raise EntryError(
                f"metadata must map str to str, got {key!r}: {value!r}; convert values with "
                "str() or json.dumps() first"
            )
    return dict(metadata)


def _validate_entry(entry: TensorEntry) -> None:
    name = entry.name
    if not is_text(name):
        raise EntryError(f"name {name!r} is not valid text", tensor=str(name))
    if name == METADATA_KEY:
        raise EntryError(f"{METADATA_KEY!r} is reserved for the metadata map", tensor=name)
    if entry.dtype.safetensors is None:
        raise DTypeError(f"dtype {entry.dtype.name} cannot be stored in SafeTensors", tensor=name)
    if not all(type(dim) is int and 0 <= dim <= MAX_U64 for dim in entry.shape):
        raise EntryError(f"shape {entry.shape!r} is not a tuple of non-negative ints", tensor=name)
    numel = 1
    for dim in entry.shape:
        numel *= dim
    bits = numel * entry.dtype.bits
    # Packed 4- and 6-bit tensors must fill whole bytes: the package refuses them otherwise.
    if bits % 8 or bits // 8 != entry.nbytes:
        raise EntryError(
            f"declared {entry.nbytes:,} bytes, but shape {list(entry.shape)} of "
            f"{entry.dtype.name} is {bits:,} bits",
            tensor=name,
        )


def _refuse_duplicates(entries: Sequence[TensorEntry]) -> None:
    seen: set[str] = set()
    for entry in entries:
        if entry.name in seen:
            raise EntryError("name appears twice", tensor=entry.name)
        seen.add(entry.name)


def _plan(entries: Sequence[TensorEntry]) -> list[TensorDescriptor]:
    """Back-to-back offsets in file order: the format allows no padding between tensors."""
    descriptors = []
    offset = 0
    for entry in entries:
        end = offset + entry.nbytes
        descriptors.append(TensorDescriptor(entry.name, entry.dtype, entry.shape, (offset, end)))
        offset = end
    return descriptors
