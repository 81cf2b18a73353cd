"""Opening a checkpoint: map the file, tell its layout from its bytes, read its pickle.

`open_archive` is the one entry point. It maps the file (a `weightstore.io._source.MmapSource`),
detects the layout (zip, tar, legacy, or a plain pickle), refuses anything else
(torch.package in `_zip`; here, by name, the foreign formats people mistake for
checkpoints, and by its first bytes everything else), and hands over to the layout's loader
(`_zip`, `_legacy`), which runs the pickle through the symbolic machine. No tensor bytes are read.

This reader names no other weightstore format: a burnpack or SafeTensors file is refused like
any other non-checkpoint, by its first bytes; the format registry names them when a store or the
CLI opens a file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from weightstore.base._cause import refuse_not_weights, shown_head
from weightstore.base._render import bounded_repr
from weightstore.errors import InvalidOptionError, UnsupportedFormatError, WeightstoreError
from weightstore.io import is_url
from weightstore.io._engine import direct_source
from weightstore.io._open import handed_over, open_source
from weightstore.io._source import READ_MODES, ByteSource, MmapSource, PreadSource, ReadMode
from weightstore.pytorch_reader._layout import (
    MAGIC_NUMBER,
    TAR_MAGIC,
    TAR_MAGIC_OFFSET,
    ZIP_EMPTY_MAGIC,
    ZIP_MAGIC,
    Limits,
)
from weightstore.pytorch_reader._loaded import ArchiveInfo, Loaded
from weightstore.pytorch_reader._machine import run_pickle
from weightstore.pytorch_reader._objects import PersistentRef
from weightstore.pytorch_reader._zip import load_zip

__all__ = ["open_archive"]

_HEAD_SIZE = 512  # bytes read to tell the layout: one tar header block
_SHOWN_SIZE = 8  # bytes of the file an "is not a checkpoint" message shows
_CHECKPOINT = "a PyTorch checkpoint"
_READ_MODES: Final = READ_MODES

# Foreign files people hand a .pt reader by mistake, and what to tell them.


def open_archive(
    path: str,
    limits: Limits,
    mode: ReadMode = "mmap",
    storage_options: Mapping[str, Any] | None = None,
) -> Loaded:
    """Map `path`, detect its layout and decode its pickle; tensors stay unread. Their bytes
    will be views of the mapping (`mode` ``"mmap"``) or `os.pread` copies (``"pread"``).

    A URL is read by range requests instead (`open_source`), `mode` aside: only the zip
    layout, whose directory says where every record lies, can be read so.

    Raises:
        InvalidOptionError: `mode` is neither.
        UnsupportedFormatError: not a PyTorch checkpoint; the message says what it is, or
            shows its first bytes. At a URL, also a legacy, tar or plain pickle checkpoint.
        FormatError: a checkpoint whose bytes break its layout (a subclass says how).
    """
    if mode not in _READ_MODES:
        raise InvalidOptionError(
            f"read mode must be one of {_READ_MODES}, not {bounded_repr(mode)}", option="mode"
        )
    if is_url(path):
        return _open_remote(path, limits, storage_options)
    taken = handed_over(path)
    source = MmapSource(path) if taken is None else taken
    storage_source: ByteSource = source
    try:
        if mode == "pread":
            storage_source = PreadSource(path)
        elif mode == "direct":
            storage_source = direct_source(path)
        loaded = _open_layout(source, limits, storage_source)
    except BaseException:
        storage_source.close()
        source.close()
        raise
    # Run last, after the layout has let go of them.
    loaded.closers[:0] = [source.close, storage_source.close]
    return loaded


def open_archive_in(source: ByteSource, limits: Limits) -> Loaded:
    """`open_archive` for a checkpoint held inside another file (a ``.nemo`` tar's member),
    read through `source`, which the caller closes: the zip layout only, whose directory says
    where every record lies.

    Raises:
        UnsupportedFormatError: not a zip checkpoint.
        FormatError: as `open_archive`.
    """
    head = bytes(source.read(0, min(source.size, _HEAD_SIZE), "file head"))
    refuse_not_weights(head, source.size, source.name, text=False, instead_of=_CHECKPOINT)
    if head[:4] != ZIP_MAGIC:
        raise UnsupportedFormatError(
            "is not a zip checkpoint (torch >= 1.6 writes one), which is read in place inside "
            "an archive; extract the archive and open the file",
            path=source.name,
        )
    return load_zip(source, limits, source)


def _open_remote(url: str, limits: Limits, storage_options: Mapping[str, Any] | None) -> Loaded:
    """`open_archive` for a URL: a zip read by ranges; every other layout refused, since its
    pickles are parsed over the whole file (they would have to be downloaded)."""
    source = open_source(url, storage_options=storage_options)
    try:
        head = bytes(source.read(0, min(source.size, _HEAD_SIZE), "file head"))
        refuse_not_weights(head, source.size, url, text=False, instead_of=_CHECKPOINT)
        if head[:4] == ZIP_MAGIC:
            loaded = load_zip(source, limits, source)
        else:
            raise UnsupportedFormatError(
                "is not a zip checkpoint (torch >= 1.6 writes one); a legacy, tar or plain "
                "pickle checkpoint is read whole, so it cannot be read by range requests: "
                "download it and open the local copy",
                path=url,
            )
    except BaseException:
        source.close()
        raise
    loaded.closers[:0] = [source.close]
    return loaded


def _open_layout(source: MmapSource, limits: Limits, storage_source: ByteSource) -> Loaded:
    head = bytes(source.read(0, min(source.size, _HEAD_SIZE), "file head"))
    # Before any layout is tried: a git-lfs pointer or an HTML page is named as what it is.
    refuse_not_weights(head, source.size, source.name, text=False, instead_of=_CHECKPOINT)
    if head[:4] == ZIP_MAGIC:
        return load_zip(source, limits, storage_source)
    if head[:4] == ZIP_EMPTY_MAGIC:
        raise UnsupportedFormatError(
            "an empty zip archive, not a PyTorch checkpoint", path=source.name
        )
    if len(head) >= _HEAD_SIZE and head[TAR_MAGIC_OFFSET : TAR_MAGIC_OFFSET + 5] == TAR_MAGIC:
        from weightstore.pytorch_reader._legacy import load_tar  # rare: loaded when met

        return load_tar(source, limits, storage_source)
    first, end, protocol = _first_pickle(source, head, limits)
    if type(first) is int and first == MAGIC_NUMBER:
        from weightstore.pytorch_reader._legacy import load_legacy  # rare: loaded when met

        return load_legacy(source, end, limits, storage_source)
    if end != source.size:  # pickle.dump writes one pickle and nothing after it
        raise _not_a_checkpoint(
            source, head, f"a pickle of {end:,} bytes is followed by {source.size - end:,} more"
        )
    return Loaded(first, ArchiveInfo("pickle", pickle_protocol=protocol))


def _first_pickle(source: MmapSource, head: bytes, limits: Limits) -> tuple[object, int, int]:
    """The first pickle of a legacy file, or the whole of a plain pickle file.

    No signature tells a pickle from other bytes (protocol 0 has none, and a little-endian length
    field can begin ``80 02`` as a protocol 2 pickle does), so a file whose first pickle fails is
    refused as no checkpoint, with the machine's error chained as the cause.
    """
    try:
        return run_pickle(
            source.mapping, path=source.name, limits=limits, persistent_load=PersistentRef
        )
    except WeightstoreError as err:
        raise _not_a_checkpoint(source, head, f"read as a pickle, {err.detail}") from err


def _not_a_checkpoint(source: MmapSource, head: bytes, why: str) -> UnsupportedFormatError:
    shown = shown_head(head[:_SHOWN_SIZE])
    return UnsupportedFormatError(
        f"not a PyTorch checkpoint: not a zip, tar or pickle file that torch.save writes "
        f"(it starts with {shown}); {why}",
        path=source.name,
    )
