"""The PyTorch entry of the format registry: everything outside this folder asks `FORMAT`.

PyTorch checkpoints are read only: weightstore never writes pickles.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from weightstore.base._cause import cause_of
from weightstore.base._gc import collector_paused
from weightstore.container._format import LOAD_OPTIONS, PROBE_SIZE, ContainerFormat, SetLayout
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
# What may follow PROTO: 2 to 5 today, with room for protocols Python may add (the reader then
# names the version it cannot read). 0 and 1 never follow it, since only protocol 2+ writes
# PROTO; refusing them keeps a SafeTensors file whose header length is 128 or 384 bytes, cut
# before its "{", from passing for a pickle.
_PICKLE_PROTOCOLS: Final = range(2, 16)
assert TAR_MAGIC_OFFSET + len(TAR_MAGIC) <= PROBE_SIZE, "a sniffer must see the tar magic"


def _sniff(head: bytes, size: int) -> bool:
    """A zip or tar signature, a pickle's PROTO opcode and protocol, or the legacy text magic.

    Only the signature is checked, never what follows, so a truncated checkpoint is still
    recognised and the reader reports the damage (a zip cut short has no central directory).
    """
    if head[: len(ZIP_MAGIC)] == ZIP_MAGIC:  # a zip of NumPy arrays or Keras files is not ours
        return cause_of(head, size, text=False) is None
    return (
        head[TAR_MAGIC_OFFSET : TAR_MAGIC_OFFSET + len(TAR_MAGIC)] == TAR_MAGIC
        or (len(head) >= 2 and head[0] == PICKLE_PROTO and head[1] in _PICKLE_PROTOCOLS)
        or head.startswith(_LEGACY_TEXT_MAGIC)
    )


def _open_file(path: Any, **options: Any) -> PytorchReader:
    with collector_paused():  # the import too: it allocates as much as the open
        from weightstore.pytorch_reader._reader import PytorchReader  # the reader loads on use

        return PytorchReader.from_file(path, **options)


# This format as the registry (weightstore.formats) and the stores see it.
FORMAT = ContainerFormat(
    name="pytorch",
    title="PyTorch",
    extensions=("pt", "pth", "bin", "ckpt"),
    sniff=_sniff,
    open_file=_open_file,
    default_extension=None,
    open_bytes=None,  # the reader maps or reads a file (or a URL's ranges)
    open_static=None,
    writer=None,  # weightstore never writes pickles
    store_options=LOAD_OPTIONS | {"top_level_key", "allow_objects", "weights_from"},
    set_layout=SetLayout("pytorch", "pytorch_model", "bin", search_rank=2),  # safe sets first
    find_in_directory=None,  # its directories hold sets (set_layout)
    summarizer="weightstore.cli._report:summarize_pytorch",
    holds_foreign_objects=True,  # a pickle names the globals torch.load imports
    carries_framework_metadata=False,  # no metadata pairs: its "metadata" is layout facts
    native_framework="pt",
    reader_releases_pages=True,  # PytorchReader.release
    typed_metadata=False,
)
