"""One zip member's bytes, inflated in bounded chunks: never more than its declared size.

zipfile bounds what it *returns* by the size the central directory declares, not what it
*inflates*: ``ZipFile.read`` inflates a deflate member in one call of up to 2 GiB, and a bzip2
or LZMA member in calls without any bound (785 bzip2 bytes inflate to 1 GiB in one call), then
cuts the result to the declared size. A member whose header says 6 bytes could so take
gigabytes. `iter_member` decompresses itself, each call asked for at most a chunk and for one
byte more than the member may still give, so a member that inflates past its declared size is
refused after that byte, and checks the CRC at the end as zipfile would.
"""

from __future__ import annotations

import bz2
import lzma
import zipfile
import zlib
from collections.abc import Callable, Iterator
from typing import Final, Protocol

from weightstore.errors import ArchiveError
from weightstore.io._source import ByteSource
from weightstore.pytorch_reader._layout import (
    LZMA_PROPERTIES,
    MAX_LZMA_DICTIONARY_SIZE,
    ZIP_LOCAL_HEADER,
    ZIP_LOCAL_HEADER_SIZE,
    ZIP_MAGIC,
)
from weightstore.pytorch_reader._objects import clip

__all__ = ["iter_member", "payload_offset", "read_member", "validate_lzma_dictionary"]

COMPRESSED_CHUNK: Final = 2**20  # compressed bytes read from the source at a time
_ENCRYPTED: Final = 0x1  # general purpose flag bit 0
_LZMA_PROPERTIES_SIZE: Final = 5  # the coding byte and the u32 dictionary size
_LZMA_CODINGS: Final = 9 * 5 * 5  # the coding byte is (pb * 5 + lp) * 9 + lc, lc < 9, lp, pb < 5


class _Decompressor(Protocol):
    """The interface of `bz2.BZ2Decompressor` and `lzma.LZMADecompressor`."""

    @property
    def eof(self) -> bool: ...

    @property
    def needs_input(self) -> bool: ...

    def decompress(self, data: bytes, max_length: int = -1) -> bytes: ...


class _Inflater:
    """zlib's decompressobj in the interface of the other two: raw deflate, zip's flavour."""

    def __init__(self) -> None:
        self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)

    @property
    def eof(self) -> bool:
        return self._zlib.eof

    @property
    def needs_input(self) -> bool:
        return not self._zlib.unconsumed_tail

    def decompress(self, data: bytes, max_length: int = -1) -> bytes:
        tail = self._zlib.unconsumed_tail
        return self._zlib.decompress(tail + data if data else tail, max(max_length, 0))


def iter_member(
    source: ByteSource, info: zipfile.ZipInfo, path: str | None, chunk_size: int
) -> Iterator[bytes]:
    """The inflated bytes of member `info` of the zip in `source`, in chunks of at most
    `chunk_size` bytes, `info.file_size` bytes in all; the CRC is checked after the last.

    Raises:
        ArchiveError: an encrypted member or an unknown compression method; a member that
            inflates past or short of its declared size, is damaged, or fails its CRC.
    """

    def damaged(why: str) -> ArchiveError:
        return ArchiveError(why, entry=info.filename, path=path)

    if info.flag_bits & _ENCRYPTED:
        raise damaged("an encrypted member, which torch never writes")
    if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
        raise damaged("a stored entry whose sizes differ")
    validate_lzma_dictionary(source, info, path)
    start = payload_offset(source, info, path)
    compressed = _CompressedBytes(source, start, info.compress_size, info.filename)
    decompressor = _decompressor(info, compressed, damaged)
    left, crc = info.file_size, 0
    while True:
        if decompressor is None:  # stored: the compressed bytes are the member
            chunk = compressed.take(min(chunk_size, left + 1))
            if not chunk:
                break
        else:
            if decompressor.eof:
                break
            data = compressed.take(COMPRESSED_CHUNK) if decompressor.needs_input else b""
            if not data and decompressor.needs_input:
                raise damaged(f"ends after {info.file_size - left:,} inflated bytes")
            try:  # one byte past what is left: enough to tell that the member lies
                chunk = decompressor.decompress(data, min(chunk_size, left + 1))
            except (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError) as err:
                raise damaged(f"damaged compressed data: {clip(str(err))}") from err
        if len(chunk) > left:
            raise damaged(f"inflates past the {info.file_size:,} bytes its header declares")
        crc = zlib.crc32(chunk, crc)
        left -= len(chunk)
        if chunk:
            yield chunk
    if left:  # the stream ended (its end marker, or no bytes left) before its declared size
        raise damaged(f"inflates to {info.file_size - left:,} of the {info.file_size:,} declared")
    if crc != info.CRC:
        raise damaged(f"bad CRC-32 (the member's bytes hash to {crc:08x}, not {info.CRC:08x})")


def read_member(
    source: ByteSource, info: zipfile.ZipInfo, path: str | None, chunk_size: int
) -> bytearray:
    """All of `iter_member`, in one buffer of the declared size allocated once."""
    buffer = bytearray(info.file_size)
    done = 0
    for chunk in iter_member(source, info, path, chunk_size):
        buffer[done : done + len(chunk)] = chunk
        done += len(chunk)
    return buffer


class _CompressedBytes:
    """A member's compressed bytes, read from the source a piece at a time."""

    def __init__(self, source: ByteSource, start: int, size: int, name: str) -> None:
        self._source, self._position, self._left = source, start, size
        self._what = f"compressed bytes of {name}"

    def take(self, size: int) -> bytes:
        size = min(size, self._left)
        if size <= 0:
            return b""
        data = bytes(self._source.read(self._position, size, self._what))
        self._position += size
        self._left -= size
        return data


def _decompressor(
    info: zipfile.ZipInfo, compressed: _CompressedBytes, damaged: Callable[[str], ArchiveError]
) -> _Decompressor | None:
    method = info.compress_type
    if method == zipfile.ZIP_STORED:
        return None
    if method == zipfile.ZIP_DEFLATED:
        return _Inflater()
    if method == zipfile.ZIP_BZIP2:
        return bz2.BZ2Decompressor()
    if method == zipfile.ZIP_LZMA:
        # zip's LZMA: a 4-byte header (version, properties size), 5 bytes of properties, then
        # raw LZMA1 data (APPNOTE 5.8.8); the dictionary size was checked by the caller.
        header = compressed.take(LZMA_PROPERTIES.size)
        if len(header) < LZMA_PROPERTIES.size:
            raise damaged("an LZMA member too short for its header")
        properties_size, coding, dictionary_size = LZMA_PROPERTIES.unpack(header)
        if properties_size != _LZMA_PROPERTIES_SIZE or coding >= _LZMA_CODINGS:
            raise damaged("an LZMA member whose properties are damaged")
        lc, lp, pb = coding % 9, coding // 9 % 5, coding // 45
        filters = [
            {"id": lzma.FILTER_LZMA1, "dict_size": dictionary_size, "lc": lc, "lp": lp, "pb": pb}
        ]
        try:
            return lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=filters)
        except (lzma.LZMAError, ValueError) as err:
            raise damaged(f"an LZMA member whose properties are damaged: {err}") from err
    raise damaged(f"compression method {method}, which this reader does not inflate")


def payload_offset(source: ByteSource, info: zipfile.ZipInfo, path: str | None) -> int:
    """Where an entry's (compressed) bytes start: after its local header, name and extra."""
    header = source.read(
        info.header_offset, ZIP_LOCAL_HEADER_SIZE, f"local header of {info.filename}", None
    )
    signature, name_size, extra_size = ZIP_LOCAL_HEADER.unpack(header)
    if signature != ZIP_MAGIC:
        raise ArchiveError("local header has a bad signature", entry=info.filename, path=path)
    return int(info.header_offset + ZIP_LOCAL_HEADER_SIZE + name_size + extra_size)


def validate_lzma_dictionary(source: ByteSource, info: zipfile.ZipInfo, path: str | None) -> None:
    """Refuse an LZMA entry whose declared dictionary is over `MAX_LZMA_DICTIONARY_SIZE`,
    before the decompressor allocates it (it would, even for a 1-byte entry)."""
    if info.compress_type != zipfile.ZIP_LZMA:
        return
    start = payload_offset(source, info, path)
    properties = source.read(
        start, LZMA_PROPERTIES.size, f"LZMA properties of {info.filename}", None
    )
    _, _, dictionary_size = LZMA_PROPERTIES.unpack(properties)
    if dictionary_size > MAX_LZMA_DICTIONARY_SIZE:  # no LZMA preset uses more: damaged
        raise ArchiveError(
            f"the LZMA dictionary is {dictionary_size:,} bytes, over the "
            f"{MAX_LZMA_DICTIONARY_SIZE:,} any LZMA preset uses; the entry is damaged or hostile",
            entry=info.filename,
            path=path,
        )
