"""What a file that holds no weights is instead, from its first bytes.

A checkpoint that fails to open is most often no checkpoint at all: a git-lfs pointer left by
a clone without ``git lfs``, the HTML page or JSON error a failed download saved under the
weights' name, an empty file, another tool's format. A format's reader, handed such bytes,
complains in its own terms (a SafeTensors header of 2 EB, "over the limit ... raise the
limit"), which sends the user the wrong way. `cause_of` names the thing first; every reader's
failure path and the format registry ask it before they speak (`refuse_not_weights`).

Only bytes no registered format's signature claims reach the text and JSON tests here: a
plain pickle of protocol 0 is printable text too, so the PyTorch reader asks
``cause_of(..., text=False)`` before it tries the pickle.
"""

from __future__ import annotations

import json
import re
from typing import Final

from weightstore.base._record import ValueRecord
from weightstore.errors import LfsPointerError, NotWeightsError

__all__ = [
    "LFS_POINTER_PREFIX",
    "MAX_LFS_POINTER_SIZE",
    "Cause",
    "cause_of",
    "not_weights",
    "refuse_not_weights",
    "shown_head",
]

LFS_POINTER_PREFIX: Final = b"version https://git-lfs.github.com/spec/v1\n"
"""How every git-lfs pointer file starts (the git-lfs specification)."""
MAX_LFS_POINTER_SIZE: Final = 1024
"""A pointer file is smaller than this, by the git-lfs specification; a larger file that
starts so is text, not a pointer."""

_OID: Final = re.compile(rb"^oid (sha256:[0-9a-f]{64})$", re.MULTILINE)
_SIZE: Final = re.compile(rb"^size ([0-9]{1,20})$", re.MULTILINE)
_JSON_ERROR_KEY: Final = re.compile(rb'^\s*\{\s*"(error|errors|message|detail)"\s*:')
_HTML_STARTS: Final = (b"<!doctype html", b"<html", b"<head", b"<body", b"<!--", b"<title")
_SHOWN_BYTES: Final = 8  # head bytes an error shows
_QUOTED_CHARS: Final = 60  # characters of a text file an error quotes

_LEGACY_GGML: Final = (
    "a legacy GGML file (llama.cpp before GGUF, 2023), not GGUF: convert it with llama.cpp's "
    "convert_llama_ggml_to_gguf.py, then read the .gguf"
)
# Signatures of formats that are no checkpoint weightstore reads: (magic, cause, what).
_SIGNATURES: Final[tuple[tuple[bytes, str, str], ...]] = (
    (b"\x89HDF\r\n\x1a\n", "hdf5", "an HDF5 file (Keras .h5 or h5py), no weights read here"),
    (b"\x93NUMPY", "npy", "a NumPy .npy array file, not a checkpoint; load it with numpy.load"),
    *((magic, "ggml", _LEGACY_GGML) for magic in (b"lmgg", b"fmgg", b"tjgg", b"algg")),
    (b"\x1f\x8b", "gzip", "a gzip-compressed file; decompress it first"),
    (b"7z\xbc\xaf\x27\x1c", "7z", "a 7z archive, which torch never writes (malware hides in them)"),
    (b"BZh", "bzip2", "a bzip2-compressed file; decompress it first"),
    (b"\xfd7zXZ\x00", "xz", "an xz-compressed file; decompress it first"),
    (b"\x28\xb5\x2f\xfd", "zstd", "a zstd-compressed file; decompress it first"),
)  # fmt: skip


class Cause(ValueRecord):
    """What a file's bytes are. `key` is `NotWeightsError.cause`; `what` completes "is ..."."""

    key: str
    what: str
    oid: str | None = None  # a git-lfs pointer's object id
    size: int | None = None  # a git-lfs pointer's size of the real file


def cause_of(head: bytes, size: int, *, text: bool = True) -> Cause | None:
    """What the file whose first bytes are `head` (of `size` in all) is, when that is no
    weights of any kind; None for bytes not recognised here (a damaged checkpoint).

    `text`: also name text and JSON files; off for a reader that may meet a text-like format
    of its own (a protocol 0 pickle)."""
    if size == 0:
        return Cause("empty", "an empty file (0 bytes): a download or copy that wrote nothing")
    if head.startswith(LFS_POINTER_PREFIX) and size < MAX_LFS_POINTER_SIZE:
        return _lfs_pointer(head)
    for magic, key, what in _SIGNATURES:
        if head.startswith(magic):
            return Cause(key, what)
    if head[4:8] == b"TFL3":
        return Cause("tflite", "a TensorFlow Lite model, not a weight format read here")
    if _is_onnx(head):
        return Cause("onnx", "an ONNX model, not a weight format read here")
    zipped = _zip_contents(head)
    if zipped is not None:
        return zipped
    stripped = head.lstrip().lower()
    if stripped.startswith(_HTML_STARTS):
        return Cause("html", "an HTML page, likely a failed download")
    if stripped.startswith(b"<?xml"):
        what = "an XML document"
        if b"<error>" in stripped:
            what += " holding an error (an object store's reply), likely a failed download"
        return Cause("xml", what)
    if not text:
        return None
    if _JSON_ERROR_KEY.match(head):
        return Cause("json-error", f"a JSON error body ({_quoted(head)}), likely a failed download")
    if head.lstrip()[:1] == b"{":
        return None  # a JSON file: the registry names it (a sharded checkpoint's index?)
    if _is_text(head):
        return Cause("text", f"a text file ({_quoted(head)}), not weights")
    return None


def not_weights(
    head: bytes, size: int, path: str | None, *, text: bool = True, instead_of: str = ""
) -> NotWeightsError | None:
    """The typed error for bytes `cause_of` recognises, or None; `instead_of` names the
    format expected (``"a PyTorch checkpoint"``), said after the cause."""
    cause = cause_of(head, size, text=text)
    if cause is None:
        return None
    if cause.key == "lfs-pointer":
        return LfsPointerError(cause.oid, cause.size, path=path)
    detail = f"is {cause.what}" + (f", not {instead_of}" if instead_of else "")
    return NotWeightsError(detail, cause.key, path=path)


def refuse_not_weights(
    head: bytes, size: int, path: str | None, *, text: bool = True, instead_of: str = ""
) -> None:
    """Raise `not_weights`'s error when there is one.

    Raises:
        NotWeightsError: the bytes are no weights (`LfsPointerError` for a git-lfs pointer).
    """
    error = not_weights(head, size, path, text=text, instead_of=instead_of)
    if error is not None:
        raise error


def shown_head(head: bytes) -> str:
    """The first bytes as hex, and as text too when they are printable: ``76 65 72 73
    ("vers")``, so a reader of the error sees the words of a text file."""
    first = head[:_SHOWN_BYTES]
    shown = first.hex(" ")
    if first and all(0x20 <= byte < 0x7F for byte in first):
        shown += f' ("{first.decode("ascii")}")'
    return shown


def _lfs_pointer(head: bytes) -> Cause:
    oid = _OID.search(head)
    size = _SIZE.search(head)
    return Cause(
        "lfs-pointer",
        "a git-lfs pointer, not the file",
        oid=oid[1].decode("ascii") if oid else None,
        size=int(size[1]) if size else None,
    )


def _is_onnx(head: bytes) -> bool:
    """ONNX's ModelProto starts with its ir_version (field 1, a varint 1 to 15), then the
    producer, domain, version, graph or opset fields (2, 3, 4, 5, 7, 8: length-delimited)."""
    return (
        len(head) >= 3
        and head[0] == 0x08
        and 1 <= head[1] <= 15
        and head[2] in (0x12, 0x1A, 0x22, 0x2A, 0x3A, 0x42)
    )


def _zip_contents(head: bytes) -> Cause | None:
    """A zip whose first entry shows it is no torch.save archive: a NumPy ``.npz`` (entries
    ``*.npy``) or a Keras ``.keras`` file; None for other zips (the PyTorch reader decides)."""
    if head[:4] != b"PK\x03\x04" or len(head) < 30:
        return None
    name_size = int.from_bytes(head[26:28], "little")
    name = head[30 : 30 + name_size]
    if name.endswith(b".npy"):
        return Cause("npz", "a NumPy .npz archive, not a checkpoint; load it with numpy.load")
    if name in (b"metadata.json", b"config.json", b"model.weights.h5"):
        return Cause(
            "zip", "a Keras .keras archive (a zip of JSON and HDF5), not weights read here"
        )
    return None


def _is_text(head: bytes) -> bool:
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as err:  # a character cut by the probe's end is still text
        if err.start < len(head) - 3:
            return False
        text = head[: err.start].decode("utf-8")
    return bool(text) and all(char.isprintable() or char in "\t\n\r" for char in text)


def _quoted(head: bytes) -> str:
    """The first words of a text file, on one line and bounded."""
    words = " ".join(head.decode("utf-8", "replace").split())
    cut = words[:_QUOTED_CHARS]
    return json.dumps(cut + ("..." if len(words) > _QUOTED_CHARS else ""), ensure_ascii=True)
