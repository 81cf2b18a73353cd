"""Tell a weight file's format from its first bytes, not its name.

Extensions lie (``.bin`` holds anything, ``.pt`` files are renamed zips), so detection reads the
opening bytes: burnpack's magic, a zip or tar signature, a pickle protocol byte, or the
SafeTensors shape (an 8-byte length followed by ``{``).
"""

from __future__ import annotations

import os
import struct
from typing import Final, Literal

from weightstore.errors import UnsupportedFormatError

__all__ = ["Format", "detect_format", "detect_format_of_bytes"]

Format = Literal["burnpack", "safetensors", "pytorch"]

_PROBE_SIZE: Final = 512  # enough for a tar header's "ustar" field at offset 257
_BURNPACK_MAGIC: Final = b"NRUB"
_ZIP_MAGIC: Final = b"PK\x03\x04"
_PICKLE_PROTO: Final = 0x80  # protocol 2+ pickles (torch's legacy format) start with PROTO
# torch's legacy magic number, as protocol 0 and 1 pickles spell it: a text LONG opcode.
_LEGACY_TEXT_MAGIC: Final = b"L119547037146038801333356"


def detect_format_of_bytes(head: bytes, total_size: int, name: str | None = None) -> Format:
    """The format whose signature `head` (the first bytes of a file) carries.

    Raises:
        UnsupportedFormatError: no known signature matches.
    """
    if head[:4] == _BURNPACK_MAGIC:
        return "burnpack"
    if (
        head[:4] == _ZIP_MAGIC
        or head[257:262] == b"ustar"
        or head[:1] == bytes([_PICKLE_PROTO])
        or head.startswith(_LEGACY_TEXT_MAGIC)
    ):
        return "pytorch"
    if len(head) >= 9:
        (header_size,) = struct.unpack("<Q", head[:8])
        if head[8:9] == b"{" and 8 + header_size <= total_size:
            return "safetensors"
    raise UnsupportedFormatError(
        f"not a burnpack, SafeTensors or PyTorch file (starts with {head[:8].hex(' ')})",
        path=name,
    )


def detect_format(path: str | os.PathLike[str]) -> Format:
    """The format of the file at `path`, read from its first bytes."""
    filename = os.fspath(path)
    with open(filename, "rb") as file:
        head = file.read(_PROBE_SIZE)
        size = os.fstat(file.fileno()).st_size
    return detect_format_of_bytes(head, size, filename)
