"""The SafeTensors entry of the format registry: everything outside this folder asks `FORMAT`.

The reader and writer (and NumPy) load when a file is first opened or written, not when the
registry lists this format.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from weightstore.container._format import LOAD_OPTIONS, SAVE_OPTIONS, ContainerFormat, SetLayout
from weightstore.safetensors._layout import (
    EXTENSION,
    HEADER_SIZE_FIELD,
    MAX_HEADER_SIZE,
    PREFIX_SIZE,
)

if TYPE_CHECKING:
    from weightstore.entry import TensorEntry
    from weightstore.safetensors._reader import SafetensorsReader
    from weightstore.safetensors._writer import SafetensorsWriter

__all__ = ["FORMAT"]


def _sniff(head: bytes, size: int) -> bool:
    """A plausible u64 header length, then the JSON object's opening brace.

    Plausible means within the reader's default MAX_HEADER_SIZE, or (a header someone trusted
    with a raised ``max_header_size=``) within the file. The length need not fit the file: a
    truncated file is still recognised, so its reader reports the damage (a `TruncatedError`
    with the bytes the header needs and the bytes there) instead of "not a SafeTensors file".
    Text never passes: any text in bytes 4 to 7 makes the length at least 2**32.
    """
    if len(head) <= PREFIX_SIZE or head[PREFIX_SIZE : PREFIX_SIZE + 1] != b"{":
        return False
    (header_size,) = HEADER_SIZE_FIELD.unpack(head[:PREFIX_SIZE])
    return bool(header_size <= MAX_HEADER_SIZE or PREFIX_SIZE + header_size <= size)


def _reader() -> type[SafetensorsReader]:
    from weightstore.safetensors._reader import SafetensorsReader

    return SafetensorsReader


def _open_file(path: Any, **options: Any) -> SafetensorsReader:
    return _reader().from_file(path, **options)


def _open_bytes(data: bytes) -> SafetensorsReader:
    return _reader().from_bytes(data)


def _open_static(buffer: Any) -> SafetensorsReader:
    return _reader().from_static(buffer)


def _store_writer(entries: Iterable[TensorEntry], metadata: Mapping[str, str]) -> SafetensorsWriter:
    """A writer for a store save. Burn's Flex32 has no SafeTensors name; Burn writes it as F32,
    whose bytes it shares."""
    from weightstore.dtypes import from_name
    from weightstore.safetensors._writer import SafetensorsWriter

    flex32, f32 = from_name("FLEX32"), from_name("F32")
    plain = [entry.replace(dtype=f32) if entry.dtype == flex32 else entry for entry in entries]
    return SafetensorsWriter(plain, metadata)


# This format as the registry (weightstore.formats) and the stores see it.
FORMAT = ContainerFormat(
    name="safetensors",
    title="SafeTensors",
    extensions=(EXTENSION,),
    sniff=_sniff,
    open_file=_open_file,
    default_extension=None,
    open_bytes=_open_bytes,
    open_static=_open_static,
    writer=_store_writer,
    store_options=LOAD_OPTIONS | SAVE_OPTIONS,
    set_layout=SetLayout("safetensors", "model", EXTENSION, search_rank=0),
    find_in_directory=None,  # its directories hold sets (set_layout)
    summarizer="weightstore.cli._report:summarize_safetensors",
    holds_foreign_objects=False,
    carries_framework_metadata=True,  # ``format``: "pt", "tf", "flax" or "mlx"
    native_framework=None,  # every framework writes it; the file's ``format`` says which
    reader_releases_pages=False,
    typed_metadata=False,
)
