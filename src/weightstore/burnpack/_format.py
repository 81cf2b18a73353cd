"""The burnpack entry of the format registry: everything outside this folder asks `FORMAT`.

The reader and writer (and cbor2) load when a file is first opened or written, not when the
registry lists this format.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from weightstore.burnpack._magic import EXTENSION, MAGIC, MAGIC_BYTES
from weightstore.container._format import LOAD_OPTIONS, SAVE_OPTIONS, ContainerFormat, SetLayout

if TYPE_CHECKING:
    from weightstore.burnpack._reader import BurnpackReader
    from weightstore.burnpack._writer import BurnpackWriter
    from weightstore.entry import TensorEntry

__all__ = ["EXTENSION", "FORMAT", "MAGIC", "MAGIC_BYTES"]


def _sniff(head: bytes, size: int) -> bool:
    """The 4-byte magic; nothing after it, so a damaged file reaches the reader's checks."""
    return head[: len(MAGIC_BYTES)] == MAGIC_BYTES


def _reader() -> type[BurnpackReader]:
    from weightstore.burnpack._reader import BurnpackReader

    return BurnpackReader


def _open_file(path: Any, **options: Any) -> BurnpackReader:
    return _reader().from_file(path, **options)


def _open_bytes(data: bytes) -> BurnpackReader:
    return _reader().from_bytes(data)


def _open_static(buffer: Any) -> BurnpackReader:
    return _reader().from_static(buffer)


def _store_writer(entries: Iterable[TensorEntry], metadata: Mapping[str, str]) -> BurnpackWriter:
    """A writer for a store save. Burn writes a param_id for every tensor, so a tensor whose
    source has none (a NumPy array, a SafeTensors file) gets a fresh random one."""
    import secrets

    from weightstore.burnpack._writer import BurnpackWriter

    with_ids = [
        entry if entry.param_id is not None
        else entry.replace(param_id=secrets.randbits(64))
        for entry in entries
    ]  # fmt: skip
    return BurnpackWriter(with_ids, metadata)


# This format as the registry (weightstore.formats) and the stores see it.
FORMAT = ContainerFormat(
    name="burnpack",
    title="burnpack",
    extensions=(EXTENSION,),
    default_extension=EXTENSION,
    sniff=_sniff,
    open_file=_open_file,
    open_bytes=_open_bytes,
    open_static=_open_static,
    writer=_store_writer,
    store_options=LOAD_OPTIONS | SAVE_OPTIONS | {"auto_extension"},
    set_layout=SetLayout("burnpack", "model", EXTENSION, search_rank=1),
    find_in_directory=None,  # its directories hold sets (set_layout)
    summarizer="weightstore.cli._report:summarize_burnpack",
    holds_foreign_objects=False,
    carries_framework_metadata=False,  # Burn's ``format`` is the container's name
    native_framework=None,  # Burn's files say nothing a framework field can name
    reader_releases_pages=False,
    typed_metadata=False,
)
