"""A store over a sharded set: when a store's path is a set, which reader it reads through.

`Store._open_path` hands a directory or an index path here, and nowhere else, so a
single-file load never imports `weightstore.sets`. The one decision made here is how much
of the set a load must see: a store whose filter decides by name alone gets a reader
restricted to the tensors the filter keeps (`SetReader.restricted`), which never opens the
shards holding none of them. Anything that can match a file tensor to a model path under
another name (an adapter's alternative names, list renumbering, enum-variant skipping) or
that asks about module types (a predicate) needs every tensor, so then the reader is whole.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from weightstore.io import is_url

if TYPE_CHECKING:
    from weightstore.container._format import ContainerFormat
    from weightstore.sets._reader import SetReader, SetReport
    from weightstore.stores._options import StoreOptions

__all__ = [
    "is_set_path",
    "open_store_set",
    "read_set_report",
    "restricted_for_load",
    "set_format",
    "wanted_names",
]


def is_set_path(filename: str, storage_options: Mapping[str, Any] | None = None) -> bool:
    """Whether a store reads `filename` as a set: a directory or an index file name (a
    torch.distributed.checkpoint directory's index included). A URL is a folder when its
    prefix holds objects (one listing)."""
    from weightstore.sets._discover import is_index_name

    if is_url(filename):
        return is_index_name(filename) or bool(_remote_names(filename, storage_options))
    return os.path.isdir(filename) or is_index_name(filename) or _is_dcp(filename)


def _remote_names(url: str, storage_options: Mapping[str, Any] | None) -> list[str]:
    """The objects in the folder `url`; an object at `url` itself (which S3 lists when asked
    for its name as a folder) is no content."""
    from weightstore.io._remote_write import list_names

    folder = url.rstrip("/")
    own = folder.rsplit("/", 1)[-1]
    return [name for name in list_names(folder, storage_options) or [] if name != own]


def _is_dcp(filename: str) -> bool:
    """Whether `filename` is a torch.distributed.checkpoint directory or its index, which a
    store reads whole tensors from (`weightstore.dcp._reader`); never at a URL."""
    from weightstore.dcp._names import is_dcp_checkpoint

    if is_url(filename):
        return False

    return is_dcp_checkpoint(filename)


def open_store_set(
    fmt: ContainerFormat, filename: str, options: StoreOptions, reader_options: dict[str, Any]
) -> SetReader | None:
    """The reader over the whole set at `filename` for a store of `fmt` with `options`, or
    None when `filename` is no set path."""
    if not is_set_path(filename, reader_options.get("storage_options")):
        return None
    if _is_dcp(filename):
        from weightstore.dcp._reader import open_dcp

        return open_dcp(filename, fmt.name)  # type: ignore[return-value]  # the same protocol
    from weightstore.sets._reader import open_set

    return open_set(filename, fmt.name, variant=_variant(options), **reader_options)


def restricted_for_load(
    reader: SetReader, options: StoreOptions, filename: str
) -> tuple[SetReader, list[str]] | None:
    """For a load with `options`: a reader restricted to the tensors its filter keeps
    (`wanted_names`), and the names (as the load sees them, remapped) it leaves out, which
    the load reports as unused as a single file's would; None when the load needs the whole
    set."""
    listed = reader.listed_names()
    wanted = wanted_names(options, listed, filename)
    if wanted is None:
        return None
    kept = set(wanted)
    remapper = options.active_remapper()
    if remapper is None:
        dropped = [name for name in listed if name not in kept]
    else:
        renamed = remapper.remap_names(list(listed), path=filename)
        dropped = [new for new, old in renamed.items() if old not in kept]
    return reader.restricted(wanted), dropped


def read_set_report(
    fmt: ContainerFormat, filename: str, options: StoreOptions, reader_options: dict[str, Any]
) -> SetReport | None:
    """The whole set's `SetReport` (every shard's header read), or None for no set path (a
    torch.distributed.checkpoint directory has none: its index is checked as it opens)."""
    if not is_set_path(filename, reader_options.get("storage_options")) or _is_dcp(filename):
        return None
    from weightstore.sets._reader import open_set

    with open_set(filename, fmt.name, variant=_variant(options), **reader_options) as reader:
        return reader.report()


def wanted_names(options: StoreOptions, listed: Sequence[str], path: str) -> list[str] | None:
    """The names in `listed` that a load or conversion with `options` can use, when its
    filter decides that from the (remapped) names alone; None when it must see every one.

    Only what a filter drops is left out; the load lists those as unused, as it does for
    a single file (`restricted_for_load`).
    """
    kept = options.active_filter()
    if kept is None or kept.accept_all or kept.predicates:
        return None  # no filter, keep-all, or one that asks about module types
    if options.from_adapter is not None or options.map_indices_contiguous:
        return None  # a file tensor may fill a model path under another name
    if options.skip_enum_variants:
        return None
    remapper = options.active_remapper()
    if remapper is None:
        return [name for name in listed if kept.matches(name)]
    renamed = remapper.remap_names(list(listed), path=path)  # new name -> file name
    return [old for new, old in renamed.items() if kept.matches(new)]


def set_format(
    filename: str, storage_options: Mapping[str, Any] | None = None
) -> ContainerFormat | None:
    """The format of the set at `filename` (an existing directory or index, or the format an
    index name's extension names for one not written yet); None when `filename` is no set
    path, or a directory holding no set (a save target).

    Raises:
        SetError: the directory's set cannot be read as one (several variants, a bad index).
    """
    from weightstore.sets._discover import INDEX_NAME, formats_in
    from weightstore.sets._reader import set_format_of

    if is_url(filename):
        return _remote_set_format(filename, storage_options)
    if not os.path.exists(filename):
        match = INDEX_NAME.fullmatch(os.path.basename(filename))
        if match is None:
            return None
        from weightstore.formats import format_for_path

        return format_for_path(f"index.{match['ext']}")
    if _is_dcp(filename):
        from weightstore.dcp._index import read_dcp_index
        from weightstore.dcp._reader import container_format

        return container_format(read_dcp_index(filename))
    if not is_set_path(filename) or (os.path.isdir(filename) and not formats_in(filename)):
        return None
    return set_format_of(filename)


def _remote_set_format(
    url: str, storage_options: Mapping[str, Any] | None
) -> ContainerFormat | None:
    """`set_format` for a URL: an index's (read), a folder's (listed), or for an index not
    written yet the format its name names; None for anything else."""
    from weightstore.errors import FileMissingError
    from weightstore.sets._discover import INDEX_NAME, formats_in
    from weightstore.sets._reader import set_format_of

    match = INDEX_NAME.fullmatch(url.rsplit("/", 1)[-1])
    if match is not None:
        try:
            return set_format_of(url, storage_options)
        except FileMissingError:
            from weightstore.formats import format_for_path

            return format_for_path(f"index.{match['ext']}")
    if not formats_in(url.rstrip("/"), storage_options):
        return None
    return set_format_of(url, storage_options)


def _variant(options: StoreOptions) -> str | None:
    return options.variant
