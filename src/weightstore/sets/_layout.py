"""The file names of a sharded checkpoint set, for every format that has sets.

Each format's naming rules are a field of its registry record (`ContainerFormat.set_layout`, a
`SetLayout`); this module puts them in the order a directory is searched (`LAYOUTS`) and reads
shard names back, so the code that finds a set on disk and the code that writes one cannot
disagree. The names follow the Hugging Face layout, which is what people download and what
`huggingface_hub` and transformers read:

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
from weightstore.container._set_layout import INDEX_SUFFIX, SetLayout
from weightstore.formats import FORMATS  # the records only: no reader loads with them

__all__ = [
    "INDEX_SUFFIX",
    "LAYOUTS",
    "SHARD_NAME",
    "SetLayout",
    "ShardName",
    "layout_for",
    "parse_shard_name",
]

SHARD_NAME: Final = re.compile(
    r"(?P<stem>[^/\\]+?)(?:\.(?P<variant>[A-Za-z0-9_]+))?"
    r"-(?P<number>\d{5,})-of-(?P<count>\d{5,})(?:\.(?P<tag>[0-9a-f]{8,32}))?\.(?P<ext>[A-Za-z0-9]+)"
)
"""A shard file name: stem, optional variant, 1-based number, count, optional tag, extension."""


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


LAYOUTS: Final = tuple(
    sorted(
        (fmt.set_layout for fmt in FORMATS if fmt.set_layout is not None),
        key=lambda layout: layout.search_rank,
    )
)
"""Every format's set layout, in the order a directory holding several is searched (each
layout's `SetLayout.search_rank`); a format whose record has no layout has no sets."""
assert len({layout.search_rank for layout in LAYOUTS}) == len(LAYOUTS), "ranks are unique"


def layout_for(format_name: str) -> SetLayout:
    """The set layout of the format called `format_name`, from its registry record.

    Raises:
        KeyError: the format has no sets.
    """
    for layout in LAYOUTS:
        if layout.format_name == format_name:
            return layout
    raise KeyError(format_name)
