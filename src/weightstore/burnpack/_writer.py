"""Writing burnpack files in one pass, byte-identical to Burn's writer.

Layout is planned from the entries' declared sizes before any data is produced: each tensor
starts at the next 256-byte boundary after the previous one, in the order given, and the CBOR
metadata lists them sorted by name. Then the header, metadata and padding are written, and each
entry's bytes are requested, written and dropped in turn.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence

from weightstore.burnpack._layout import (
    EXTENSION,
    FORMAT_VERSION,
    HEADER,
    MAGIC,
    MAX_U32,
    MAX_U64,
    Scalar,
    TensorDescriptor,
    align_up,
    data_start,
    encode_metadata,
)
from weightstore.container._format import path_for_write
from weightstore.container._writer import ContainerWriter
from weightstore.entry import TensorEntry
from weightstore.errors import DTypeError, EntryError

__all__ = ["BurnpackWriter"]

_ZEROS = bytes(256)  # padding source; no gap is ever 256 bytes or longer


class BurnpackWriter(ContainerWriter):
    """A planned burnpack container, ready to be written to bytes or a file.

    Args:
        entries: tensors in write order; their data is read once, during the write.
        metadata: string pairs stored under ``metadata`` (omitted when empty, as Burn does).
        scalars: named scalars; plain ``int``/``float``/``bool`` or `Scalar` for an exact kind.

    Raises:
        EntryError: a duplicate name, or a param id outside u64.
        DTypeError: a dtype burnpack cannot hold (complex, fp8, ...).
    """

    def __init__(
        self,
        entries: Iterable[TensorEntry],
        metadata: Mapping[str, str] | None = None,
        scalars: Mapping[str, int | float | bool | Scalar] | None = None,
    ) -> None:
        self.entries: Sequence[TensorEntry] = list(entries)
        self.descriptors = _plan(self.entries)
        self._metadata_block = encode_metadata(
            self.descriptors,
            _string_map(metadata or {}),
            {key: Scalar.of(value) for key, value in (scalars or {}).items()},
        )
        if len(self._metadata_block) > MAX_U32:
            raise EntryError(f"metadata is {len(self._metadata_block):,} bytes, over u32")
        self.data_start = data_start(len(self._metadata_block))
        last_end = max((d.data_offsets[1] for d in self.descriptors), default=0)
        self.size = self.data_start + last_end

    def _prefix(self) -> bytes:
        header = HEADER.pack(MAGIC, FORMAT_VERSION, len(self._metadata_block))
        prefix = header + self._metadata_block
        return prefix + bytes(self.data_start - len(prefix))

    def _pieces(self) -> Iterator[bytes | memoryview]:
        yield self._prefix()
        position = 0
        for entry, descriptor in zip(self.entries, self.descriptors, strict=True):
            start, end = descriptor.data_offsets
            if start > position:
                yield _ZEROS[: start - position]
            yield entry.read()  # no local name, so this frame drops it before the next read
            position = end

    def save(
        self,
        path: str | os.PathLike[str],
        *,
        overwrite: bool = False,
        auto_extension: bool = True,
        durable: bool = True,
    ) -> str:
        """Write atomically to `path` (``.bpk`` appended when it has no extension, as Burn does);
        `durable` as in `ContainerWriter.save`.

        Returns:
            The path written.

        Raises:
            DestinationExistsError: the file exists and `overwrite` is false.
        """
        target = path_for_write(path, EXTENSION) if auto_extension else os.fspath(path)
        return super().save(target, overwrite=overwrite, durable=durable)


def _string_map(metadata: Mapping[str, str]) -> dict[str, str]:
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise EntryError(f"metadata must map str to str, got {key!r}: {value!r}")
    return dict(metadata)


def _plan(entries: Sequence[TensorEntry]) -> list[TensorDescriptor]:
    descriptors = []
    seen: set[str] = set()
    offset = 0
    for entry in entries:
        if entry.name in seen:
            raise EntryError("name appears twice", tensor=entry.name)
        seen.add(entry.name)
        if entry.dtype.kind == "q":
            if entry.quant_scheme is None:
                raise EntryError("a QFloat entry needs its quant_scheme", tensor=entry.name)
        elif entry.dtype.burnpack is None:
            raise DTypeError(f"dtype {entry.dtype.name} cannot be stored in burnpack",
                             tensor=entry.name)  # fmt: skip
        if entry.param_id is not None and not 0 <= entry.param_id <= MAX_U64:
            raise EntryError(f"param_id {entry.param_id} is not a u64", tensor=entry.name)
        start = align_up(offset)
        offset = start + entry.nbytes
        descriptors.append(
            TensorDescriptor(
                entry.name,
                entry.dtype,
                entry.shape,
                (start, offset),
                entry.param_id,
                entry.quant_scheme,
            )
        )
    return descriptors
