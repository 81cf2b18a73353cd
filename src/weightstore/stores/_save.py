"""A store's save pipeline: snapshots, already collected and renamed, into a file, a sharded set,
a URL or memory, with the metadata the store's options say.

The store hands this module its format, options, path and shared output, never itself, so
the pipeline sits below the store class (`_base`) and imports nothing of it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from weightstore.base import __version__
from weightstore.container._format import ContainerFormat
from weightstore.errors import DTypeError, InvalidOptionError
from weightstore.io import is_url
from weightstore.io._digest import METADATA_KEY as DIGESTS_KEY
from weightstore.stores._groups import carried_config, groups_for_save, unstorable_part
from weightstore.stores._options import StoreOptions
from weightstore.stores._source import Output, file_path

if TYPE_CHECKING:
    from weightstore.entry import TensorEntry
    from weightstore.snapshot import StoredBlocks, TensorSnapshot

__all__ = ["default_metadata", "marked_defaults", "save_metadata", "write_snapshots"]


def default_metadata(format_name: str) -> dict[str, str]:
    """The metadata every save carries unless cleared: the format, producer and version."""
    return {"format": format_name, "producer": "weightstore", "version": __version__}


class _DefaultFormat(str):
    """The ``format`` metadata value a new store starts with (the container's name), marked
    so a save can tell it from one set with `with_metadata`: only this one is replaced by the
    source's framework (`save_metadata`). Equal to, and written as, the plain string."""

    __slots__ = ()


def marked_defaults(options: StoreOptions) -> StoreOptions:
    """`options` with the default ``format`` value marked (`_DefaultFormat`)."""
    value = options.metadata.get("format")
    if value is None:
        return options
    return options.replace(metadata={**options.metadata, "format": _DefaultFormat(value)})


def save_metadata(
    metadata: Mapping[str, Any], fmt: ContainerFormat, framework: str | None
) -> dict[str, Any]:
    """The pairs a save writes: the store's, with a default ``format`` replaced by the
    source's framework where the format reads ``format`` so
    (`ContainerFormat.carries_framework_metadata`: transformers refuses a SafeTensors file whose
    ``format`` is not pt, tf, flax or mlx). Values become plain strings, except in a format
    with typed metadata (GGUF), whose integers stay integers."""
    # Digests describe the bytes of the file they came with; a save computes its own.
    pairs = {
        key: value if fmt.typed_metadata and not isinstance(value, str) else str(value)
        for key, value in metadata.items()
        if key != DIGESTS_KEY
    }
    default = isinstance(metadata.get("format"), _DefaultFormat)
    if default and framework is not None and fmt.carries_framework_metadata:
        pairs["format"] = framework
    return pairs


def write_snapshots(
    snapshots: Sequence[TensorSnapshot],
    *,
    fmt: ContainerFormat,
    options: StoreOptions,
    path: str | None,
    output: Output,
    storage_options: Mapping[str, Any] | None,
    framework: str | None = None,
) -> str | None:
    """Write `snapshots` as `fmt`; the path written, or None for memory. `framework`
    (``"pt"``) replaces the default ``format`` metadata where the format names frameworks
    there (`ContainerFormat.carries_framework_metadata`).

    Raises:
        InvalidOptionError: the format is read-only, the store views a static buffer, or a
            variant without a set.
        DestinationExistsError: the file exists and `overwrite` is off.
    """
    if fmt.writer is None:
        raise InvalidOptionError(
            f"saving to {fmt.title} format is not supported; save with BurnpackStore or "
            "SafetensorsStore",
            format=fmt.name,
        )
    from weightstore.io._atomic import write_atomic
    from weightstore.snapshot import stored_blocks

    snapshots = groups_for_save(fmt, snapshots)
    entries = [_entry(s, stored_blocks(s)) for s in snapshots]
    metadata = save_metadata(options.metadata, fmt, framework)
    config = carried_config(snapshots)  # tagged parts remain only where saved part by part
    if config is not None and "quantization_config" not in metadata:
        metadata["quantization_config"] = config
    directory = _set_directory(fmt, path, options, storage_options)
    if directory is not None:
        return _write_set(fmt, options, directory, entries, metadata, storage_options)
    if options.variant is not None:
        raise InvalidOptionError(
            "a variant names the files of a sharded set; save into a directory or set "
            "with_max_shard_size",
            option="variant",
        )
    if options.digests is not None:  # a first pass over the data: the header comes first
        from weightstore.io._digest import encode_digests, tensor_digests

        digests = tensor_digests(options.digests, entries)
        metadata[DIGESTS_KEY] = encode_digests(options.digests, digests)
    # Options only some writers take (store_options says which formats honour them).
    writer_options = {} if options.quantize is None else {"quantize": options.quantize}
    try:
        writer = fmt.writer(entries, metadata, **writer_options)
    except DTypeError as err:
        raise unstorable_part(err, fmt, snapshots) from None
    if path is not None:
        # The store has already applied the extension rule (or auto_extension(False)).
        target = file_path(fmt, path, options, for_write=True)
        write_atomic(
            target,
            writer.write_to,
            overwrite=options.overwrite,
            durable=options.durable,
            storage_options=storage_options,
        )
        return target
    if output.in_memory:
        output.data = writer.to_bytes()
        return None
    raise InvalidOptionError("a static buffer store is read-only")


def _entry(snapshot: TensorSnapshot, stored: StoredBlocks | None) -> TensorEntry:
    """`snapshot` for a writer: its values, with the blocks behind them where it has some; a
    Burn QFloat tensor as its stored bytes and scheme (no writer takes its values as such)."""
    from weightstore.entry import TensorEntry

    if stored is not None and stored.quant_scheme is not None and stored.read_blocks is not None:
        return TensorEntry(
            snapshot.full_path, snapshot.dtype, snapshot.shape, stored.read_blocks,
            snapshot.param_id, stored.nbytes, stored.quant_scheme,
        )  # fmt: skip
    blocks = None if stored is None or stored.read_blocks is None else stored.read_blocks
    return TensorEntry(
        snapshot.full_path, snapshot.dtype, snapshot.shape, snapshot.to_numpy, snapshot.param_id,
        blocks=None if stored is None or blocks is None else (stored.encoding, blocks),
    )  # fmt: skip


def _set_directory(
    fmt: ContainerFormat,
    path: str | None,
    options: StoreOptions,
    storage_options: Mapping[str, Any] | None,
) -> str | None:
    """The directory a save writes a sharded set into: the path as given when
    `max_shard_size` is set, else the path (after the extension rule) when it is an
    existing directory; None for a single-file or memory save. A URL is a directory
    when it ends with ``/`` or its prefix holds objects."""
    if path is None:
        return None
    if options.max_shard_size is not None:
        return path
    if is_url(path):
        from weightstore.io._remote_write import is_directory

        if path.endswith("/"):  # before the extension rule would add ".bpk"
            return path
        target = file_path(fmt, path, options, for_write=True)
        return target if is_directory(target, storage_options) else None
    target = file_path(fmt, path, options, for_write=True)
    return target if os.path.isdir(target) else None


def _write_set(
    fmt: ContainerFormat,
    options: StoreOptions,
    directory: str,
    entries: Sequence[Any],
    metadata: dict[str, str],
    storage_options: Mapping[str, Any] | None,
) -> str:
    """Save `entries` as a sharded set (`weightstore.sets.write_set`); the index path, or
    the single file's when everything fits in one shard."""
    from weightstore.sets._layout import layout_for
    from weightstore.sets._writer import DEFAULT_MAX_SHARD_SIZE, write_set

    size = options.max_shard_size
    return write_set(
        directory,
        layout_for(fmt.name),
        fmt,
        entries,
        max_shard_size=DEFAULT_MAX_SHARD_SIZE if size is None else size,
        metadata=metadata,
        overwrite=options.overwrite,
        durable=options.durable,
        variant=options.variant,
        storage_options=storage_options,
        digests=options.digests,
        index_tensor_digests=options.index_tensor_digests,
    )
