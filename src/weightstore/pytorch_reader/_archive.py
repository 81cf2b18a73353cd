"""Opening a checkpoint: map the file, tell its layout from its bytes, read its pickle.

`open_archive` is the one entry point. It maps the file (`_mapped`), detects the layout (zip,
tar, legacy, or a plain pickle), refuses anything else by name (TorchScript and torch.package in
`_zip`; gzip, 7z, SafeTensors, ... here), and hands over to the layout's loader (`_zip`,
`_legacy`), which runs the pickle through the symbolic machine. No tensor bytes are read.
"""

from __future__ import annotations

import struct

from weightstore.errors import UnsupportedFormatError, WeightstoreError
from weightstore.pytorch_reader._layout import (
    MAGIC_NUMBER,
    PICKLE_PROTO,
    TAR_MAGIC,
    TAR_MAGIC_OFFSET,
    ZIP_EMPTY_MAGIC,
    ZIP_MAGIC,
    Limits,
)
from weightstore.pytorch_reader._legacy import load_legacy, load_tar
from weightstore.pytorch_reader._machine import run_pickle
from weightstore.pytorch_reader._mapped import ArchiveInfo, Loaded, MappedFile
from weightstore.pytorch_reader._objects import PersistentRef
from weightstore.pytorch_reader._zip import load_zip

__all__ = ["open_archive"]

# Files people hand a .pt reader by mistake, and what to tell them.
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "a gzip-compressed file; decompress it first"),
    (b"7z\xbc\xaf\x27\x1c", "a 7z archive, which torch never writes (malware has hidden in them)"),
    (b"BZh", "a bzip2-compressed file; decompress it first"),
    (b"\xfd7zXZ\x00", "an xz-compressed file; decompress it first"),
    (b"\x28\xb5\x2f\xfd", "a zstd-compressed file; decompress it first"),
    (b"\x93NUMPY", "a NumPy .npy file"),
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file (Keras or h5py)"),
    (b"GGUF", "a GGUF file"),
    (b"NRUB", "a burnpack file; read it with weightstore.burnpack"),
)


def open_archive(path: str, limits: Limits) -> Loaded:
    """Map `path`, detect its layout and decode its pickle; tensors stay unread.

    Raises:
        UnsupportedFormatError: not a PyTorch checkpoint; the message says what it is.
        FormatError: a checkpoint whose bytes break its layout (a subclass says how).
    """
    mapped = MappedFile(path)
    try:
        loaded = _open_layout(mapped, limits)
    except BaseException:
        mapped.close()
        raise
    loaded.closers.insert(0, mapped.close)
    return loaded


def _open_layout(mapped: MappedFile, limits: Limits) -> Loaded:
    head = bytes(mapped.data[:512])
    if head[:4] == ZIP_MAGIC:
        return load_zip(mapped, limits)
    if head[:4] == ZIP_EMPTY_MAGIC:
        raise UnsupportedFormatError(
            "an empty zip archive, not a PyTorch checkpoint", path=mapped.path
        )
    if len(head) >= 512 and head[TAR_MAGIC_OFFSET : TAR_MAGIC_OFFSET + 5] == TAR_MAGIC:
        return load_tar(mapped, limits)
    first, end, protocol = _first_pickle(mapped, head, limits)
    if type(first) is int and first == MAGIC_NUMBER:
        return load_legacy(mapped, end, limits)
    return Loaded(first, ArchiveInfo("pickle", pickle_protocol=protocol))


def _first_pickle(mapped: MappedFile, head: bytes, limits: Limits) -> tuple[object, int, int]:
    """The first pickle of a legacy file, or the whole of a plain pickle file."""
    if head[:1] == bytes([PICKLE_PROTO]):  # certainly a pickle: its own errors are the answer
        return run_pickle(
            mapped.data, path=mapped.path, limits=limits, persistent_load=PersistentRef
        )
    what = _what_it_is(head, mapped.size)
    if what is not None:
        raise UnsupportedFormatError(f"{what}, not a PyTorch checkpoint", path=mapped.path)
    try:  # protocol 0 and 1 pickles have no signature: try one
        return run_pickle(
            mapped.data, path=mapped.path, limits=limits, persistent_load=PersistentRef
        )
    except WeightstoreError as err:
        raise UnsupportedFormatError(
            f"not a zip, tar or pickle file that torch.save writes (it starts with "
            f"{head[:8].hex(' ')}); read as a pickle: {err.detail}",
            path=mapped.path,
        ) from err


def _what_it_is(head: bytes, size: int) -> str | None:
    if size == 0:
        return "an empty file"
    for magic, what in _SIGNATURES:
        if head.startswith(magic):
            return what
    if len(head) >= 9 and head[8:9] == b"{":
        (header_size,) = struct.unpack("<Q", head[:8])
        if 8 + header_size <= size:
            return "a SafeTensors file; read it with weightstore.safetensors"
    return None
