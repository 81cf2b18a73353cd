"""Digests of tensor bytes that travel inside the file (docs/integrity.md).

A save asked for digests (`Store.with_digests`) hashes each tensor's raw bytes as stored and
writes one metadata pair, ``weightstore.digests``, whose value is a JSON string (SafeTensors
and burnpack metadata values must be strings)::

    {"algorithm": "xxh3_128", "tensors": {"encoder.weight": "<hex>", ...}}

A sharded set's index carries ``"files"`` (each shard file's digest) under the same key, and
``"tensors"`` too when asked. A reader that finds the key checks each tensor's bytes the first
time it reads them (`DigestCheck.check`), before an array is handed out.

Algorithms go by name: ``sha256`` and ``blake2b`` (32-byte) come with Python; ``xxh3_128``
(the default: ~10 GB/s on one core, against ~1.1 GB/s for SHA-256) and ``blake3`` need the
``integrity`` extra (the `xxhash` and `blake3` packages). Without `xxhash`, a save that names
no algorithm falls back to ``sha256``.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Protocol, cast

from weightstore.errors import DigestError, DigestMismatchError

__all__ = [
    "ALGORITHMS",
    "DEFAULT_ALGORITHM",
    "METADATA_KEY",
    "DigestCheck",
    "DigestTable",
    "default_algorithm",
    "digest_of",
    "encode_digests",
    "new_hasher",
    "tensor_digests",
]

METADATA_KEY: Final = "weightstore.digests"
"""The one metadata key a file's digests live under (a JSON string)."""

DEFAULT_ALGORITHM: Final = "xxh3_128"
"""What `with_digests()` uses when the `xxhash` package is installed; ``sha256`` otherwise."""

ALGORITHMS: Final = ("xxh3_128", "blake3", "sha256", "blake2b")
"""Every algorithm a digest may name; ``sha256`` is the Hugging Face Hub's LFS oid."""

_PACKAGE: Final = {"xxh3_128": "xxhash", "blake3": "blake3"}  # the rest come with Python
_CONSTRUCTOR: Final = {"xxh3_128": "xxh3_128", "blake3": "blake3"}


class Hasher(Protocol):
    """What every algorithm's hash object offers (hashlib's, xxhash's and blake3's alike)."""

    def update(self, data: Any, /) -> object: ...
    def hexdigest(self) -> str: ...


def _factory(algorithm: str) -> Callable[[], Hasher]:
    if algorithm == "sha256":
        return hashlib.sha256
    if algorithm == "blake2b":
        return lambda: hashlib.blake2b(digest_size=32)
    if algorithm in _PACKAGE:  # by name: optional packages, typed or not, stay optional
        module = importlib.import_module(_PACKAGE[algorithm])
        return cast("Callable[[], Hasher]", getattr(module, _CONSTRUCTOR[algorithm]))
    raise DigestError(
        f"unknown digest algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}",
        algorithm=algorithm,
    )


def new_hasher(algorithm: str) -> Hasher:
    """A fresh hash object for `algorithm`.

    Raises:
        DigestError: an unknown name, or one whose package is not installed.
    """
    try:
        return _factory(algorithm)()
    except ImportError:
        package = _PACKAGE[algorithm]
        raise DigestError(
            f"digest algorithm {algorithm} needs the {package} package: "
            "pip install 'weightstore[integrity]' (or load with .verify_digests(False) "
            "to skip the check)",
            algorithm=algorithm,
        ) from None


def default_algorithm() -> str:
    """``xxh3_128`` when `xxhash` imports, else ``sha256``."""
    try:
        importlib.import_module("xxhash")
    except ImportError:
        return "sha256"
    return DEFAULT_ALGORITHM


def digest_of(algorithm: str, data: Any) -> str:
    """The hex digest of `data` (bytes or any contiguous buffer)."""
    hasher = new_hasher(algorithm)
    hasher.update(data)
    return hasher.hexdigest()


def tensor_digests(algorithm: str, entries: Iterable[Any]) -> dict[str, str]:
    """The digest of each `TensorEntry`'s bytes by name, reading one entry at a time: the
    first of a digest save's two passes over the data (the write is the second)."""
    digests = {}
    for entry in entries:
        hasher = new_hasher(algorithm)
        hasher.update(entry.read())
        digests[entry.name] = hasher.hexdigest()
    return digests


def encode_digests(
    algorithm: str,
    tensors: Mapping[str, str] | None = None,
    files: Mapping[str, str] | None = None,
) -> str:
    """The ``weightstore.digests`` value: compact JSON, keys sorted, so equal saves are equal."""
    value: dict[str, Any] = {"algorithm": algorithm}
    if files is not None:
        value["files"] = dict(files)
    if tensors is not None:
        value["tensors"] = dict(tensors)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class DigestTable:
    """A parsed ``weightstore.digests`` value: the algorithm and the hex digests by name.

    Raises (from `parse`):
        DigestError: a value that is not the JSON the key documents.
    """

    __slots__ = ("algorithm", "files", "tensors")

    def __init__(
        self, algorithm: str, tensors: dict[str, str], files: dict[str, str] | None = None
    ) -> None:
        self.algorithm = algorithm
        self.tensors = tensors
        self.files = files or {}

    @classmethod
    def parse(cls, value: str, path: str | None) -> DigestTable:
        """The table a ``weightstore.digests`` value of the file at `path` holds."""
        try:
            decoded = json.loads(value)
        except (ValueError, RecursionError):
            decoded = None
        if not isinstance(decoded, dict) or not isinstance(decoded.get("algorithm"), str):
            raise DigestError(
                f"metadata {METADATA_KEY!r} is not a JSON object naming an algorithm", path=path
            )
        maps = [decoded.get(key, {}) for key in ("tensors", "files")]
        for found in maps:
            if not isinstance(found, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in found.items()
            ):
                raise DigestError(
                    f"metadata {METADATA_KEY!r} maps names to something other than hex strings",
                    path=path,
                )
        return cls(decoded["algorithm"], maps[0], maps[1])


class DigestCheck:
    """A reader's digests and what it has checked: each tensor's bytes are hashed the first
    time they are read whole (or sliced) and compared; a tensor that passed is not hashed
    again by the same open reader."""

    __slots__ = ("_path", "checked", "table")

    def __init__(self, table: DigestTable, path: str | None) -> None:
        self.table = table
        self._path = path
        self.checked: set[str] = set()

    @classmethod
    def of(cls, metadata: Mapping[str, str], path: str | None) -> DigestCheck | None:
        """The check for a file with `metadata`, or None when it carries no digests."""
        value = metadata.get(METADATA_KEY)
        if value is None:
            return None
        return cls(DigestTable.parse(value, path), path)

    def wants(self, name: str) -> bool:
        """Whether `name` carries a digest not yet checked."""
        return name in self.table.tensors and name not in self.checked

    def check(self, name: str, data: Any) -> None:
        """Compare `data` (the tensor's stored bytes) with its digest; remember a pass.

        Raises:
            DigestMismatchError: the bytes hash to something else.
        """
        expected = self.table.tensors.get(name)
        if expected is None or name in self.checked:
            return
        try:
            found = digest_of(self.table.algorithm, data)
        except DigestError as err:  # named by the file: say which, and how to read it anyway
            raise DigestError(
                f"{err.detail}; or read without checking: verify_digests(False)",
                path=self._path,
                tensor=name,
                algorithm=self.table.algorithm,
            ) from None
        if found != expected.lower():
            raise DigestMismatchError(
                self.table.algorithm, expected, found, path=self._path, tensor=name
            )
        self.checked.add(name)

    def missing(self, names: Iterable[str]) -> list[str]:
        """Those of `names` that carry no digest, sorted."""
        return sorted(name for name in names if name not in self.table.tensors)
