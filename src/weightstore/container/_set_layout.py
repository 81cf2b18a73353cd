"""`SetLayout`: how one format's sharded sets are named, a part of its `ContainerFormat` record.

The record type lives in the container kit, below `weightstore.sets`, so that each container's
``FORMAT`` can carry its own naming rules and the set code asks the registry instead of keeping
a table of its own (`weightstore.sets._layout` keeps what is about sets: shard-name parsing and
the search order built from these records).

The names follow the Hugging Face layout (docs/sharded.md): ``model.safetensors``, its index
``model.safetensors.index.json``, its shards ``model-00001-of-00004.safetensors``. A variant
(``fp16``) goes before the extension of the single file and the shards, and before ``.json`` in
the index, as transformers names them. A shard may carry a tag after its numbers
(``model-00001-of-00002.a1b2c3d4.safetensors``); see the commit protocol in docs/sharded.md.
"""

from __future__ import annotations

import re
from typing import Final

from weightstore.base._record import ValueRecord

__all__ = ["INDEX_SUFFIX", "SetLayout"]

INDEX_SUFFIX: Final = ".json"
"""What every index name ends with, variant or not."""

_VARIANT: Final = re.compile(r"[A-Za-z0-9_]+")


class SetLayout(ValueRecord):
    """How one format's sets are named: the stem and extension of its files, and where its
    sets come when a directory holding several is searched.

    Attributes:
        format_name: the container format of the shards (``"safetensors"``).
        stem: the file stem (``"model"``, ``"pytorch_model"``).
        extension: the shards' and single file's extension, without the dot.
        search_rank: a directory holding sets of several formats is searched in ascending
            rank, so the lowest is the one read (SafeTensors 0: a Hugging Face repository
            often holds a SafeTensors and a ``.bin`` set, and the SafeTensors one is read).
            Unique across the registry.
    """

    format_name: str
    stem: str
    extension: str
    search_rank: int

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


def _checked_variant(variant: str) -> str:
    if not _VARIANT.fullmatch(variant):
        raise ValueError(f"a variant is letters, digits and underscores, not {variant!r}")
    return variant
