"""Opening a GGUF file by path."""

from __future__ import annotations

import os
from typing import Any

from weightstore.gguf._reader import GgufReader

__all__ = ["open_gguf"]


def open_gguf(path: str | os.PathLike[str], **options: Any) -> GgufReader:
    """A reader of the GGUF file at `path`."""
    return GgufReader.from_file(path, **options)
