"""The GGUF entry of the format registry: everything outside this folder asks `FORMAT`.

The reader and writer (and NumPy) load when a file is first opened or written, not when the
registry lists this format.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from weightstore.container._format import LOAD_OPTIONS, SAVE_OPTIONS, ContainerFormat
from weightstore.gguf._layout import ALIGNMENT_KEY, EXTENSION, MAGIC, GgufValue, ValueType
from weightstore.gguf._names import model_in_directory

if TYPE_CHECKING:
    from weightstore.entry import TensorEntry
    from weightstore.gguf._reader import GgufReader
    from weightstore.gguf._split import GgufSplitReader
    from weightstore.gguf._writer import GgufWriter

__all__ = ["FORMAT"]


def _sniff(head: bytes, size: int) -> bool:
    """The four magic bytes; the version (and the byte order it tells) is the reader's."""
    return head[:4] == MAGIC


def _reader() -> type[GgufReader]:
    from weightstore.gguf._reader import GgufReader

    return GgufReader


def _open_file(path: Any, **options: Any) -> GgufReader | GgufSplitReader:
    from weightstore.gguf._split import open_gguf

    return open_gguf(path, **options)


def _open_bytes(data: bytes) -> GgufReader:
    return _reader().from_bytes(data)


def _open_static(buffer: Any) -> GgufReader:
    return _reader().from_static(buffer)


def _store_writer(
    entries: Iterable[TensorEntry], metadata: Mapping[str, Any], quantize: str | None = None
) -> GgufWriter:
    """A writer for a store save: the store's string metadata pairs become string values,
    except ``general.alignment``, which GGUF types as an integer."""
    from weightstore.gguf._writer import GgufWriter

    typed = dict(metadata)
    alignment = typed.get(ALIGNMENT_KEY)
    if isinstance(alignment, str) and alignment.isdigit():
        typed[ALIGNMENT_KEY] = GgufValue(ValueType.UINT32, int(alignment))
    return GgufWriter(entries, typed, quantize=quantize)


# This format as the registry (weightstore.formats) and the stores see it.
FORMAT = ContainerFormat(
    name="gguf",
    title="GGUF",
    extensions=(EXTENSION,),
    sniff=_sniff,
    open_file=_open_file,
    default_extension=None,
    open_bytes=_open_bytes,
    open_static=_open_static,
    writer=_store_writer,
    # No sharded sets of ours (split GGUF files are their own layout), so no shard options.
    store_options=(
        LOAD_OPTIONS | (SAVE_OPTIONS - {"max_shard_size", "index_tensor_digests"}) | {"quantize"}
    ),
    set_layout=None,  # split models name their parts themselves (`_split`), with no index
    find_in_directory=model_in_directory,  # names only: `_names` loads no reader
    summarizer="weightstore.cli._report_gguf:summarize_gguf",
    holds_foreign_objects=False,
    carries_framework_metadata=False,
    native_framework=None,  # llama.cpp's converters write it from every framework
    reader_releases_pages=False,
    typed_metadata=True,  # GGUF values are typed: an integer stays an integer
)
