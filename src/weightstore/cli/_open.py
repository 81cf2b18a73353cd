"""Opening a file for a command that reads tensors (`diff`, `verify`): the format from its bytes,
the reader from the registry, and ``--top-level-key`` passed only where the format honours it.
A directory or an index file is a sharded set: one reader over all its shards
(`weightstore.sets.open_set`), imported only then.

Every path may be a URL (``s3://``, ``https://``...), read by range requests; its filesystem
gets the ``--storage-option KEY=VALUE`` pairs (`storage_options_of`). A URL that is no object
is a set when its folder (a prefix) holds one."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from weightstore import formats
from weightstore.container._format import ContainerFormat, TensorReader
from weightstore.errors import FileMissingError, InvalidOptionError
from weightstore.io import is_url

__all__ = ["honours_top_level_key", "is_set_path", "is_url", "open_file", "storage_options_of"]

_TOP_LEVEL_KEY = "top_level_key"  # the store option `--top-level-key` stands for


def honours_top_level_key(fmt: ContainerFormat) -> bool:
    """Whether files of `fmt` have top-level keys to select (PyTorch checkpoints)."""
    return _TOP_LEVEL_KEY in fmt.store_options


def storage_options_of(args: argparse.Namespace) -> dict[str, Any] | None:
    """The ``--storage-option KEY=VALUE`` pairs as filesystem options, values read as JSON
    where they parse (``anon=true`` is True), else as text; None when none was given.

    Raises:
        InvalidOptionError: a pair without ``=``.
    """
    pairs = getattr(args, "storage_option", None) or []
    if not pairs:
        return None
    options: dict[str, Any] = {}
    for pair in pairs:
        key, equals, text = pair.partition("=")
        if not equals or not key:
            raise InvalidOptionError(
                f"--storage-option takes KEY=VALUE, not {pair!r}", option="storage_option"
            )
        try:
            options[key] = json.loads(text)
        except ValueError:
            options[key] = text
    return options


def is_set_path(path: str, storage_options: dict[str, Any] | None = None) -> bool:
    """Whether `path` names a sharded set (a directory or an index file) rather than a file;
    a URL is a set when it names an index, or no object but a folder holding objects."""
    from weightstore.sets._discover import is_index_name

    if is_url(path):
        if is_index_name(path) or path.endswith("/"):
            return True
        try:
            formats.read_probe(path, storage_options)  # kept for the reader opened next
        except FileMissingError:
            from weightstore.stores._sets import is_set_path as is_remote_set

            return is_remote_set(path, storage_options)
        return False
    if os.path.isdir(path):
        return True
    return is_index_name(path)


def is_dcp_checkpoint(path: str) -> bool:
    """Whether `path` is a `torch.distributed.checkpoint` directory (or its index) saved
    through `weightstore.dcp`."""
    from weightstore.dcp._names import is_dcp_checkpoint as is_dcp

    return is_dcp(path)


def open_file(
    path: str,
    *,
    top_level_key: str | None = None,
    strict: bool = True,
    storage_options: dict[str, Any] | None = None,
) -> tuple[ContainerFormat, TensorReader]:
    """The format of `path` (from its bytes) and a reader over it; for a set, the shards'
    format and a `SetReader`.

    Args:
        path: the file, or a set's directory or index.
        top_level_key: read only the tensors under this key, where the format has keys.
        strict: refuse `top_level_key` for a format without keys; off, ignore it there (for a
            command over two files, when the other file has keys).
        storage_options: for a URL, what its filesystem is opened with.

    Raises:
        InvalidOptionError: `top_level_key` for a format without keys, with `strict`.
        UnsupportedFormatError, FormatError, OSError: as the registry's reader raises them.
    """
    remote: dict[str, Any] = {}
    if is_url(path):
        remote["storage_options"] = storage_options
    elif is_dcp_checkpoint(path):  # whole tensors put together from the ranks' chunks
        from weightstore.dcp._reader import open_dcp

        dcp_reader = open_dcp(path)
        _options(dcp_reader.format, top_level_key, strict)
        return dcp_reader.format, dcp_reader
    if is_set_path(path, storage_options):
        from weightstore.sets import open_set

        probe = open_set(path, **remote)  # which format, before its options are chosen
        fmt = probe.format
        options = _options(fmt, top_level_key, strict)
        if not options:
            return fmt, probe
        probe.close()
        return fmt, open_set(path, fmt.name, top_level_key=options[_TOP_LEVEL_KEY], **remote)
    fmt = formats.detect_format(path, storage_options)
    return fmt, fmt.open_file(path, **_options(fmt, top_level_key, strict), **remote)


def _options(fmt: ContainerFormat, top_level_key: str | None, strict: bool) -> dict[str, Any]:
    """The reader options ``--top-level-key`` stands for with `fmt`, or an error (`strict`)."""
    options = {}
    if top_level_key is not None and honours_top_level_key(fmt):
        options[_TOP_LEVEL_KEY] = top_level_key
    elif top_level_key is not None and strict:
        raise InvalidOptionError(
            f"{fmt.title} files have no top-level keys (--top-level-key is for PyTorch "
            "checkpoints)",
            option=_TOP_LEVEL_KEY,
            format=fmt.name,
        )
    return options
