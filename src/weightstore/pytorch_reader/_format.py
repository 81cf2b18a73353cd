"""The PyTorch entry of the format registry: everything outside this folder asks `FORMAT`.

PyTorch checkpoints are read only: weightstore never writes pickles.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from weightstore._format import LOAD_OPTIONS, PROBE_SIZE, ContainerFormat
from weightstore.pytorch_reader._layout import (
    MAGIC_NUMBER,
    PICKLE_PROTO,
    TAR_MAGIC,
    TAR_MAGIC_OFFSET,
    ZIP_MAGIC,
)

if TYPE_CHECKING:
    from weightstore.pytorch_reader._reader import PytorchReader

__all__ = ["FORMAT"]

# Protocol 0 and 1 pickles (the oldest legacy files) spell the magic number as a text LONG.
_LEGACY_TEXT_MAGIC: Final = b"L" + str(MAGIC_NUMBER).encode()
assert TAR_MAGIC_OFFSET + len(TAR_MAGIC) <= PROBE_SIZE, "a sniffer must see the tar magic"


def _sniff(head: bytes, size: int) -> bool:
    return (
        head[: len(ZIP_MAGIC)] == ZIP_MAGIC
        or head[TAR_MAGIC_OFFSET : TAR_MAGIC_OFFSET + len(TAR_MAGIC)] == TAR_MAGIC
        or head[:1] == bytes([PICKLE_PROTO])
        or head.startswith(_LEGACY_TEXT_MAGIC)
    )


def _open_file(path: Any, **options: Any) -> PytorchReader:
    from weightstore.pytorch_reader._reader import PytorchReader  # the reader loads on use

    return PytorchReader.from_file(path, **options)


# This format as the registry (weightstore.formats) and the stores see it.
FORMAT = ContainerFormat(
    name="pytorch",
    title="PyTorch",
    extensions=("pt", "pth", "bin", "ckpt"),
    sniff=_sniff,
    open_file=_open_file,
    store_options=LOAD_OPTIONS | {"top_level_key"},
)
