"""Opening a file for a command that reads tensors (`diff`, `verify`): the format from its bytes,
the reader from the registry, and ``--top-level-key`` passed only where the format honours it."""

from __future__ import annotations

from weightstore import formats
from weightstore._format import ContainerFormat, TensorReader
from weightstore.errors import InvalidOptionError

__all__ = ["honours_top_level_key", "open_file"]

_TOP_LEVEL_KEY = "top_level_key"  # the store option `--top-level-key` stands for


def honours_top_level_key(fmt: ContainerFormat) -> bool:
    """Whether files of `fmt` have top-level keys to select (PyTorch checkpoints)."""
    return _TOP_LEVEL_KEY in fmt.store_options


def open_file(
    path: str, *, top_level_key: str | None = None, strict: bool = True
) -> tuple[ContainerFormat, TensorReader]:
    """The format of `path` (from its bytes) and a reader over it.

    Args:
        path: the file.
        top_level_key: read only the tensors under this key, where the format has keys.
        strict: refuse `top_level_key` for a format without keys; off, ignore it there (for a
            command over two files, when the other file has keys).

    Raises:
        InvalidOptionError: `top_level_key` for a format without keys, with `strict`.
        UnsupportedFormatError, FormatError, OSError: as the registry's reader raises them.
    """
    fmt = formats.detect_format(path)
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
    return fmt, fmt.open_file(path, **options)
