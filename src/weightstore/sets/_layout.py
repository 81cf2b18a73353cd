"""The file names of a sharded checkpoint set, for every format that has sets.

One place knows how a set's files are named, so the code that finds a set on disk and the code
that writes one cannot disagree. The names follow the Hugging Face layout, which is what people
download and what `huggingface_hub` and transformers read:

- safetensors: ``model.safetensors``; index ``model.safetensors.index.json``; shards
  ``model-00001-of-00004.safetensors``.
- pytorch: ``pytorch_model.bin``; index ``pytorch_model.bin.index.json``; shards
  ``pytorch_model-00001-of-00004.bin``.
- burnpack: ``model.bpk``; index ``model.bpk.index.json``; shards ``model-00001-of-00004.bpk``.

A variant (``fp16``) goes before the extension of the single file and the shards
(``model.fp16.safetensors``, ``model.fp16-00001-of-00002.safetensors``) and before ``.json``
in the index (``model.safetensors.index.fp16.json``), as transformers names them.

A shard may carry a tag after its numbers (``model-00001-of-00002.a1b2c3d4.safetensors``): a
save over a set whose committed index names the plain names writes tagged ones, so that no new
shard ever overwrites a file the committed index names (docs/sharded.md, the commit protocol).
The index says which names are live; a reader never guesses from names alone.
"""

from __future__ import annotations

import re
from typing import Final

from weightstore.base._record import ValueRecord

__all__ = [
    "INDEX_SUFFIX",
    "LAYOUTS",
    "SHARD_NAME",
    "SetLayout",
    "ShardName",
    "layout_for",
    "parse_shard_name",
]

INDEX_SUFFIX: Final = ".json"
"""What every index name ends with, variant or not."""

SHARD_NAME: Final = re.compile(
    r"(?P<stem>[^/\\]+?)(?:\.(?P<variant>[A-Za-z0-9_]+))?"
    r"-(?P<number>\d{5,})-of-(?P<count>\d{5,})(?:\.(?P<tag>[0-9a-f]{8,32}))?\.(?P<ext>[A-Za-z0-9]+)"
)
"""A shard file name: stem, optional variant, 1-based number, count, optional tag, extension."""

_VARIANT: Final = re.compile(r"[A-Za-z0-9_]+")


class SetLayout(ValueRecord):
    """How one format's sets are named: the stem and extension of its files.

    Attributes:
        format_name: the container format of the shards (``"safetensors"``).
        stem: the file stem (``"model"``, ``"pytorch_model"``).
        extension: the shards' and single file's extension, without the dot.
    """

    format_name: str
    stem: str
    extension: str

    def __init__(self, format_name: str, stem: str, extension: str) -> None:
        super().__init__(format_name, stem, extension)

    def single_name(self, variant: str | None = None) -> str:
        """The unsharded file: ``model.safetensors``, ``model.fp16.safetensors``."""
        middle = "" if variant is None else f".{_checked_variant(variant)}"
        return f"{self.stem}{middle}.{self.extension}"

    def index_name(self, variant: str | None = None) -> str:
        """The index: ``model.safetensors.index.json``, ``model.safetensors.index.fp16.json``."""
        middle = "" if variant is None else f".{_checked_variant(variant)}"
        return f"{self.stem}.{self.extension}.index{middle}{INDEX_SUFFIX}"

    def shard_name(
        self, number: int, count: int, variant: str | None = None, tag: str | None = None
    ) -> str:
        """Shard `number` (1-based) of `count`: ``model-00001-of-00004.safetensors``, with the
        variant and tag where given (``model.fp16-00001-of-00004.a1b2c3d4.safetensors``)."""
        if not 1 <= number <= count:
            raise ValueError(f"shard number {number} is outside 1..{count}")
        middle = "" if variant is None else f".{_checked_variant(variant)}"
        suffix = "" if tag is None else f".{tag}"
        return f"{self.stem}{middle}-{number:05d}-of-{count:05d}{suffix}.{self.extension}"


class ShardName(ValueRecord):
    """What a shard file's name says (`parse_shard_name`)."""

    stem: str
    variant: str | None
    number: int
    count: int
    tag: str | None
    extension: str

    def __init__(
        self,
        stem: str,
        variant: str | None,
        number: int,
        count: int,
        tag: str | None,
        extension: str,
    ) -> None:
        super().__init__(stem, variant, number, count, tag, extension)


def parse_shard_name(filename: str) -> ShardName | None:
    """The parts of a shard file name, or None when `filename` is not named as a shard."""
    match = SHARD_NAME.fullmatch(filename)
    if match is None:
        return None
    number, count = int(match["number"]), int(match["count"])
    if not 1 <= number <= count:
        return None
    return ShardName(match["stem"], match["variant"], number, count, match["tag"], match["ext"])


def _checked_variant(variant: str) -> str:
    if not _VARIANT.fullmatch(variant):
        raise ValueError(f"a variant is letters, digits and underscores, not {variant!r}")
    return variant


LAYOUTS: Final = (
    SetLayout("safetensors", "model", "safetensors"),
    SetLayout("burnpack", "model", "bpk"),
    SetLayout("pytorch", "pytorch_model", "bin"),
)
"""Every format's set layout, in the order a directory holding several is searched."""


def layout_for(format_name: str) -> SetLayout:
    """The set layout of the format called `format_name`.

    Raises:
        KeyError: the format has no sets.
    """
    for layout in LAYOUTS:
        if layout.format_name == format_name:
            return layout
    raise KeyError(format_name)
