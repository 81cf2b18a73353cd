"""What recognises a burnpack file: its magic and extension. A module of its own, importing
nothing, so that the registry's record (`_format`) and the byte layout (`_layout`, which
re-exports them) share them without importing each other.
"""

from typing import Final

__all__ = ["EXTENSION", "MAGIC", "MAGIC_BYTES"]

MAGIC: Final = 0x4255524E  # "BURN" as a u32; "NRUB" as bytes
MAGIC_BYTES: Final = MAGIC.to_bytes(4, "little")  # how a file starts: b"NRUB"
EXTENSION: Final = "bpk"  # what Burn appends to a path without an extension
