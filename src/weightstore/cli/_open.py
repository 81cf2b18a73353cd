"""Opening a file for a command that reads tensors (`diff`, `verify`): the format from its bytes,
the reader from the registry, and ``--top-level-key`` passed only where the format honours it.
A directory or an index file is a sharded set: one reader over all its shards
(`weightstore.sets.open_set`), imported only then."""

from __future__ import annotations

import os

from weightstore import formats
from weightstore._format import ContainerFormat, TensorReader
from weightstore.errors import InvalidOptionError

__all__ = ["honours_top_level_key", "is_set_path", "open_file"]

_TOP_LEVEL_KEY = "top_level_key"  # the store option `--top-level-key` stands for


def honours_top_level_key(fmt: ContainerFormat) -> bool:
    """Whether files of `fmt` have top-level keys to select (PyTorch checkpoints)."""
    return _TOP_LEVEL_KEY in fmt.store_options


def is_set_path(path: str) -> bool:
    """Whether `path` names a sharded set (a directory or an index file) rather than a file."""
    if os.path.isdir(path):
        return True
    from weightstore.sets._discover import is_index_name

    return is_index_name(path)


def open_file(
    path: str, *, top_level_key: str | None = None, strict: bool = True
) -> tuple[ContainerFormat, TensorReader]:
    """The format of `path` (from its bytes) and a reader over it; for a set, the shards'
    format and a `SetReader`.

    Args:
        path: the file, or a set's directory or index.
        top_level_key: read only the tensors under this key, where the format has keys.
        strict: refuse `top_level_key` for a format without keys; off, ignore it there (for a
            command over two files, when the other file has keys).

    Raises:
        InvalidOptionError: `top_level_key` for a format without keys, with `strict`.
        UnsupportedFormatError, FormatError, OSError: as the registry's reader raises them.
    """
    if is_set_path(path):
        from weightstore.sets import open_set

        probe = open_set(path)  # which format, before its options are chosen
        fmt = probe.format
        options = _options(fmt, top_level_key, strict)
        if not options:
            return fmt, probe
        probe.close()
        return fmt, open_set(path, fmt.name, top_level_key=options[_TOP_LEVEL_KEY])
    fmt = formats.detect_format(path)
    return fmt, fmt.open_file(path, **_options(fmt, top_level_key, strict))


def _options(fmt: ContainerFormat, top_level_key: str | None, strict: bool) -> dict[str, str]:
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
