"""A set's index: the JSON file that says which shard holds each tensor, read as hostile input.

The schema is the one Hugging Face tools write and read; weightstore adds keys inside
``metadata`` only, so both read each other's sets::

    {"metadata": {"total_size": 1234,                       # bytes of tensor data
                  "weightstore.set_id": "<32 lowercase hex>",  # ours only
                  "<user key>": "<user value>", ...},
     "weight_map": {"<tensor name>": "<shard file name>", ...}}

An index comes from strangers as often as checkpoints do, so every rule is checked before a
shard is touched: the file's size against a limit (before it is read), JSON that decodes with
no duplicate key and no deep nesting, the shape above, and shard names that stay inside the
index's directory (no absolute path, drive letter, backslash, ``..``, empty segment, NUL or
surrogate). When the shards are located (`locate_shards`), a shard missing from disk, a symlink
that resolves outside the directory, or anything but a regular file (a FIFO, a symlink loop),
is refused too. Names a file supplied appear in messages cut short (`bounded_repr`).
"""

from __future__ import annotations

import json
import os
import re
from array import array
from collections.abc import Mapping
from itertools import accumulate
from typing import Any, Final

from weightstore.base._record import Record
from weightstore.base._render import bounded_repr
from weightstore.errors import LimitExceeded, SetError
from weightstore.io import is_url
from weightstore.io._local import BROKEN_SYMLINK, MISSING, REGULAR, kind_at, unencodable
from weightstore.io._open import open_source
from weightstore.io._source import open_readable

__all__ = [
    "MAX_INDEX_DEPTH",
    "MAX_INDEX_SIZE",
    "SET_ID_KEY",
    "SetIndex",
    "locate_shards",
    "parse_index",
    "read_index",
    "validate_shard_name",
]

MAX_INDEX_SIZE: Final = 64 * 2**20
"""Bytes an index may have unless the caller raises it: a 100,000-tensor index is ~10 MB."""
MAX_INDEX_DEPTH: Final = 16
"""Nesting levels an index may have: the schema needs three (top, map, value); the rest is
room for nested metadata values, which some tools write."""
SET_ID_KEY: Final = "weightstore.set_id"
"""The metadata key, in the index and in each shard a weightstore save writes, of the save's
id: a shard whose id differs from its index's belongs to another save."""

_SET_ID: Final = re.compile(r"[0-9a-f]{32}")
_DRIVE: Final = re.compile(r"[A-Za-z]:")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_NAMES_SHOWN: Final = 60  # characters of a file-supplied name in a message
_HUB_REPO_KINDS: Final = ("models--", "datasets--", "spaces--")  # a hub cache's repo folders


class SetIndex(Record):
    """A parsed, checked index.

    Attributes:
        path: the index file.
        weight_map: tensor name -> shard file name as the index spells it (relative to the
            index's directory), in the index's order.
        metadata: the index's ``metadata`` as string pairs (numbers as JSON writes them).
        set_id: the save's id (`SET_ID_KEY`) when a weightstore save wrote the index, else
            None: Hugging Face sets carry none and their shards are not checked.
    """

    path: str
    weight_map: dict[str, str]
    metadata: dict[str, str]
    set_id: str | None

    def __init__(
        self,
        path: str,
        weight_map: dict[str, str],
        metadata: dict[str, str],
        set_id: str | None,
    ) -> None:
        super().__init__(path, weight_map, metadata, set_id)

    @property
    def directory(self) -> str:
        """The directory the shard names are relative to."""
        return os.path.dirname(self.path) or "."

    def shard_names(self) -> list[str]:
        """Every shard the index names, sorted (Hugging Face numbering sorts as shard order)."""
        return sorted(set(self.weight_map.values()))


def read_index(
    path: str | os.PathLike[str],
    *,
    max_index_size: int = MAX_INDEX_SIZE,
    storage_options: Mapping[str, Any] | None = None,
) -> SetIndex:
    """Read and check the index at `path`.

    Args:
        path: the index file, or its URL (its size is checked before the rest is read: one
            request, two for an index over 64 KiB).
        max_index_size: refuse a larger file before reading it; raise it only for indexes you
            trust.
        storage_options: for a URL, what its filesystem is opened with.

    Raises:
        LimitExceeded: the file is over `max_index_size` bytes.
        SetError: the bytes are not the index JSON described in this module's docstring.
        FileMissingError: there is no file at `path`.
    """
    filename = os.fspath(path)
    if "://" in filename and is_url(filename):
        source = open_source(filename, storage_options=storage_options)
        try:
            if source.size > max_index_size:
                raise LimitExceeded("index size", source.size, max_index_size, path=filename)
            return parse_index(bytes(source.read(0, source.size, "the index")), filename)
        finally:
            source.close()
    with open_readable(filename) as file:
        size = os.fstat(file.fileno()).st_size
        if size > max_index_size:
            raise LimitExceeded("index size", size, max_index_size, path=filename)
        data = file.read(max_index_size + 1)  # a file growing while read is held to the limit
    if len(data) > max_index_size:
        raise LimitExceeded("index size", len(data), max_index_size, path=filename)
    return parse_index(data, filename)


def parse_index(data: bytes, path: str) -> SetIndex:
    """Check `data`, an index file's bytes, and build its `SetIndex` (`path` names it).

    Raises:
        SetError: not UTF-8 JSON, a duplicate key, nesting deeper than `MAX_INDEX_DEPTH`, a
            shape other than the schema's, a malformed set id, or a shard name outside the
            directory (`validate_shard_name`).
    """
    top = _decode(data, path)
    if not isinstance(top, dict):
        raise SetError(f"index is a JSON {_kind(top)}, not an object", path=path)
    weight_map = top.get("weight_map")
    if not isinstance(weight_map, dict):
        found = "missing" if weight_map is None else f"a JSON {_kind(weight_map)}"
        raise SetError(f'"weight_map" is {found}, not an object of tensor -> shard', path=path)
    checked: set[str] = set()
    for name, shard in weight_map.items():
        if not isinstance(shard, str):
            raise SetError(
                f"shard is a JSON {_kind(shard)}, not a file name", path=path, tensor=name
            )
        if shard not in checked:
            validate_shard_name(shard, path, name)
            checked.add(shard)
    metadata = _parse_metadata(top.get("metadata", {}), path)
    set_id = metadata.get(SET_ID_KEY)
    if set_id is not None and not _SET_ID.fullmatch(set_id):
        shown = bounded_repr(set_id, limit=_NAMES_SHOWN)
        raise SetError(f"set id {shown} is not 32 lowercase hex digits", path=path)
    return SetIndex(path, weight_map, metadata, set_id)


def validate_shard_name(shard: str, path: str, tensor: str | None = None) -> None:
    """Refuse a shard name that could name a file outside the index's directory.

    A name is a relative path of plain segments joined by ``/``; Hugging Face sets use bare
    file names. Refused: empty, NUL, backslash (a separator on Windows), absolute, a drive
    letter, ``..``, ``.`` or empty segments, and any name the filesystem could not be asked
    about: a surrogate code point (JSON's ``\\ud800`` escape makes a lone one, on which every
    ``os`` call raises), even one ``surrogateescape`` would encode as a byte, since an index is
    UTF-8 text and its names are too; and anything else `os.fsencode` refuses. This is the
    one check of every file name an index supplies, a set's shards and a DCP checkpoint's
    rank files alike, so no such name reaches the filesystem.

    Raises:
        SetError: the name and why, with the first tensor the index assigns to it.
    """
    reason = _refusal(shard)
    if reason is not None:
        shown = bounded_repr(shard, limit=_NAMES_SHOWN)
        raise SetError(
            f"shard name {shown} {reason}; shard names are files inside the index's directory",
            path=path,
            tensor=tensor,
            shard=shard,
        )


def _refusal(shard: str) -> str | None:
    """Why `shard` is no safe shard name, or None."""
    if not shard:
        return "is empty"
    if "\0" in shard:
        return "holds a NUL byte"
    if "\\" in shard:
        return "holds a backslash"
    surrogate = _SURROGATE.search(shard)
    if surrogate is not None:
        return (
            f"holds a lone surrogate (U+{ord(surrogate.group()):04X}), which no file name "
            "written as UTF-8 holds"
        )
    unfit = unencodable(shard)
    if unfit is not None:
        return unfit
    if shard.startswith("/"):
        return "is an absolute path"
    if _DRIVE.match(shard):
        return "starts with a drive letter"
    segments = shard.split("/")
    if ".." in segments:
        return "leaves the directory (a '..' segment)"
    if "" in segments or "." in segments:
        return "has an empty or '.' segment"
    return None


def locate_shards(
    index: SetIndex, storage_options: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """The path of every shard the index names, each checked to be a file on disk that stays
    inside the index's directory once symlinks are resolved. One stat per shard: cheap, and a
    set with a shard missing fails at open, not halfway through a load.

    One exception to confinement: in a Hugging Face cache
    (``models--<org>--<name>/snapshots/<revision>/``) every file is a symlink into the
    repository's ``blobs/``, so that folder counts as inside too.

    An index at a URL has no symlinks to follow (`validate_shard_name` already keeps every
    name inside its folder); its shards are checked against one listing of the folder, where
    the store can list (not over plain HTTP: a missing shard then fails when opened).

    Raises:
        SetError: a shard is missing, not a file, or resolves outside; names index and shard.
    """
    first_tensor: dict[str, str] = {}
    for name, shard in index.weight_map.items():
        first_tensor.setdefault(shard, name)
    if "://" in index.path and is_url(index.path):
        return _locate_remote(index, first_tensor, storage_options)
    roots = _confinement_roots(index.directory)
    located = {}
    for shard in sorted(first_tensor):
        path = os.path.join(index.directory, shard)
        _check_shard_file(index, shard, path, roots, first_tensor[shard])
        located[shard] = path
    return located


def _locate_remote(
    index: SetIndex, first_tensor: dict[str, str], storage_options: Mapping[str, Any] | None
) -> dict[str, str]:
    """`locate_shards` for an index at a URL."""
    from weightstore.io._remote_write import list_names

    listed = list_names(index.directory, storage_options)
    if listed is not None and os.path.basename(index.path) not in listed:
        listed = None  # a listing without the index itself: the store cannot list (HTTP)
    located = {}
    for shard in sorted(first_tensor):
        if listed is not None and "/" not in shard and shard not in listed:
            raise SetError(
                f"shard {bounded_repr(shard, limit=_NAMES_SHOWN)} named by the index does not "
                "exist; the set is incomplete (an upload stopped early?)",
                path=index.path,
                tensor=first_tensor[shard],
                shard=shard,
            )
        located[shard] = f"{index.directory}/{shard}"
    return located


def _check_shard_file(
    index: SetIndex, shard: str, path: str, roots: tuple[str, ...], tensor: str
) -> None:
    """`locate_shards`' check of one shard."""
    resolved = os.path.realpath(path)
    if not any(os.path.commonpath((root, resolved)) == root for root in roots):
        raise SetError(
            "shard is a symlink to a file outside the index's directory, which a set never "
            "names; copy the file into the directory if you trust it",
            path=index.path,
            tensor=tensor,
            shard=shard,
        )
    kind = kind_at(resolved)
    if kind in (MISSING, BROKEN_SYMLINK):
        raise SetError(
            f"shard {bounded_repr(shard, limit=_NAMES_SHOWN)} named by the index does not "
            "exist; the set is incomplete (a download or copy stopped early?)",
            path=index.path,
            tensor=tensor,
            shard=shard,
        )
    if kind != REGULAR:  # a FIFO would block the open forever; a loop fails every call
        raise SetError(
            f"shard {bounded_repr(shard, limit=_NAMES_SHOWN)} is {kind}, not a file",
            path=index.path,
            tensor=tensor,
            shard=shard,
        )


def _confinement_roots(directory: str) -> tuple[str, ...]:
    """The real directories shards may resolve into: the index's, and in a Hugging Face cache
    snapshot the repository's ``blobs`` folder."""
    real = os.path.realpath(directory)
    roots = [real]
    parts = os.path.abspath(directory).split(os.sep)
    for position in range(len(parts) - 2, 1, -1):  # the nearest "<repo>/snapshots/<revision>"
        if parts[position] == "snapshots" and parts[position - 1].startswith(_HUB_REPO_KINDS):
            blobs = os.path.join(os.sep.join(parts[:position]) or os.sep, "blobs")
            if os.path.isdir(blobs):
                roots.append(os.path.realpath(blobs))
            break
    return tuple(roots)


def _decode(data: bytes, path: str) -> object:
    """The set index's JSON value (`decode_json`, its nesting limit)."""
    return decode_json(data, path, MAX_INDEX_DEPTH, "; a tensor belongs to one shard")


def decode_json(data: bytes, path: str, max_depth: int, duplicate_hint: str = "") -> object:
    """The JSON value of an index file's bytes, read as input from strangers: UTF-8, no key
    given twice in one object (`json` would keep the last), no ``NaN``/``Infinity`` literals
    (not JSON), nesting no deeper than `max_depth`. Every JSON index weightstore reads (a
    set's, a DCP checkpoint's) goes through here.

    Raises:
        SetError: any of those broken; a key given twice is named as ``tensor``, with its two
            values and `duplicate_hint` appended to the message.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SetError(
            f"index is not UTF-8 text: byte {err.start:,} is invalid", path=path
        ) from err
    try:
        value = json.loads(text, object_pairs_hook=_unique_object, parse_constant=_no_constant)
    except _DuplicateKey as err:
        first, second = (bounded_repr(v, limit=_NAMES_SHOWN) for v in (err.first, err.second))
        raise SetError(
            f"index gives this key twice in one object ({first}, then {second}){duplicate_hint}",
            path=path,
            tensor=err.key,
        ) from None
    except RecursionError as err:
        raise SetError("index nests deeper than a JSON parser can follow", path=path) from err
    except ValueError as err:  # JSONDecodeError, NaN literals, ints over Python's digit limit
        raise SetError(f"index is not valid JSON: {err}", path=path) from err
    depth = _nesting(data)
    if depth > max_depth:
        raise SetError(
            f"index nests {depth:,} levels deep, over the limit of {max_depth}", path=path
        )
    return value


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is no JSON number")


class _DuplicateKey(ValueError):
    """A key given twice in one JSON object, with its first and second values."""

    def __init__(self, key: str, first: object, second: object) -> None:
        super().__init__(key)
        self.key, self.first, self.second = key, first, second


def _unique_object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """A JSON object as a dict, refusing a key given twice (`json` keeps the last one, so a
    tensor listed twice would silently load from whichever shard came last)."""
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: dict[str, object] = {}
        for key, value in pairs:
            if key in seen:
                raise _DuplicateKey(key, seen[key], value)
            seen[key] = value
    return result


def _nesting(data: bytes) -> int:
    """Nesting levels of the JSON text `data`, which must be valid JSON (a scalar is 0): the
    deepest its brackets go outside strings, which is how deep its decoded value nests.

    Linear, and in C but for one pass over the brackets left: 0.07 s for a 34 MB DCP index
    (a 405B checkpoint's on 64 ranks), where walking its decoded value took 1.2 s, and a
    second for the 489 MiB of the same on 1,024 ranks. Escapes come out first
    (in valid JSON a backslash is only ever in a string, escaping what follows it), then every
    byte but quotes and brackets, then each empty pair of quotes (an empty string, or the end of
    one string and the start of the next with no bracket between: neither changes which
    brackets are outside strings), then strings still holding brackets."""
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    structure = data.translate(None, _NOT_STRUCTURE).replace(b'""', b"")
    if b'"' in structure:
        structure = _BRACKET_STRING.sub(b"", structure)
    return max(accumulate(array("b", structure.translate(_BRACKET_STEPS))), default=0)


_NOT_STRUCTURE: Final = bytes(sorted(set(range(256)) - set(b'"[]{}')))
_BRACKET_STRING: Final = re.compile(rb'"[^"]*"')  # once escapes and other bytes are out
_BRACKET_STEPS: Final = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")  # +1 and -1 as signed


def _parse_metadata(value: object, path: str) -> dict[str, str]:
    """The index's metadata as string pairs: strings kept, other values as compact JSON
    (``"total_size": 1234`` becomes ``"1234"``)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SetError(f'"metadata" is a JSON {_kind(value)}, not an object', path=path)
    return {
        key: item if isinstance(item, str) else json.dumps(item, separators=(",", ":"))
        for key, item in value.items()
    }


def _kind(value: object) -> str:
    """The JSON type name of a decoded value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"
