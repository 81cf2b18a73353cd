"""Opening a path for a command that reads tensors (`diff`, `verify`): what is there from
`weightstore.locate` (a file's format from its bytes, a sharded set, a DCP directory), the
reader over it, and ``--top-level-key`` passed only where the format honours it.

Every path may be a URL (``s3://``, ``https://``...), read by range requests; its filesystem
gets the ``--storage-option KEY=VALUE`` pairs (`storage_options_of`). A URL that is no object
is a set when its folder (a prefix) holds one."""

from __future__ import annotations

import argparse
import json
from typing import Any

from weightstore.container._format import ContainerFormat, TensorReader
from weightstore.errors import InvalidOptionError
from weightstore.locate import _locate, open_located, reading_format
from weightstore.stores._source import engine_mode

__all__ = ["honours_top_level_key", "open_file", "storage_options_of"]

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


def open_file(
    path: str,
    *,
    top_level_key: str | None = None,
    strict: bool = True,
    storage_options: dict[str, Any] | None = None,
    io: str = "auto",
) -> tuple[ContainerFormat, TensorReader]:
    """The format of `path` and a reader over whatever is there (`weightstore.locate`, as
    `open_reader` and `Store.from_file` see it): for a set, the shards' format and a
    `SetReader`; for a DCP directory, its rank files' format and a `DcpReader`.

    Args:
        path: the file, or a set's directory or index, or a DCP directory.
        top_level_key: read only the tensors under this key, where the format has keys.
        strict: refuse `top_level_key` for a format without keys; off, ignore it there (for a
            command over two files, when the other file has keys).
        storage_options: for a URL, what its filesystem is opened with.
        io: how a local file is read (``--io``; `weightstore.io._engine.choose_io`).

    Raises:
        InvalidOptionError: `top_level_key` for a format without keys, with `strict`.
        UnsupportedFormatError, FormatError, OSError: as the registry's reader raises them.
    """
    location, probe = _locate(path, storage_options, None, keep=True)
    try:
        fmt = reading_format(location)
        options = _options(fmt, top_level_key, strict)
        _, probe = engine_mode(location, io, options, probe)
    except BaseException:
        if probe is not None:
            probe.close()
        raise
    reader = open_located(location, storage_options=storage_options, source=probe, **options)
    return fmt, reader


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
