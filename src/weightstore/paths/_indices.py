"""Index mapping and enum-variant stripping: path rewrites that need no rules from the user.

**Contiguous indices.** PyTorch numbers the children of an `nn.Sequential` by position, and
parameter-free children (ReLU, Dropout) leave gaps: ``fc.0``, ``fc.2``, ``fc.4``. A model that
keeps only the layers with weights numbers them ``fc.0``, ``fc.1``, ``fc.2``.
`map_indices_contiguous` closes the gaps with the rules of Burn's function of that name:

1. A path segment is an index when it reads as an unsigned integer the way Rust's
   `usize::from_str` does: ASCII digits with an optional leading ``+``, below 2**64; so ``007``
   and ``+3`` count, ``-1`` and ``٣`` do not.
2. Indices are grouped by the path before them, spelled with the *original* numbers, so every
   parent instance is its own list (``layers.0.conv.`` and ``layers.2.conv.`` are two lists).
3. In each list the distinct indices, sorted, become 0, 1, 2, ... and each index segment is
   rewritten to the decimal of its new number (``007`` becomes ``0`` when it is first).

`map_indices_contiguous_except` does the same but leaves alone the lists whose parent path
matches a regex, for models that really do keep gaps (a ModuleList indexed by layer number).

**Enum variants.** Burn puts the active variant of an enum module into the path
(``feature.BaseConv.weight``); PyTorch has no such level (``feature.weight``).
`strip_enum_variants` drops those segments, told apart by their spelling (`is_variant_segment`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

from weightstore.errors import RemapCollisionError
from weightstore.paths._regex import compile_pattern

MAX_INDEX: Final = 2**64 - 1  # Burn parses indices as usize; larger numbers are plain names
_INDEX: Final = re.compile(r"\+?[0-9]+")  # ASCII only: str.isdigit would accept "٣" and "²"

ENUM_CONTAINER_PREFIX: Final = "Enum:"
"""How Burn marks an enum level in a container path (``Enum:Activation``); a missing tensor
under one gets the summary's enum advice."""


def parse_index(segment: str) -> int | None:
    """The index a path segment stands for, or None when it is a name (Rust `usize::from_str`)."""
    if not _INDEX.fullmatch(segment):
        return None
    value = int(segment)
    return value if value <= MAX_INDEX else None


def _list_key(parts: Sequence[str], i: int) -> str:
    """The list an index at `parts[i]` belongs to: the original path before it, dot-terminated."""
    return ".".join(parts[:i]) + "." if i else ""


def _collect_lists(
    split_paths: Iterable[list[str]], keep: re.Pattern[str] | None
) -> dict[str, dict[int, int]]:
    """For every list that is renumbered, its map from old index to new index."""
    seen: dict[str, set[int]] = {}
    for parts in split_paths:
        for i, segment in enumerate(parts):
            index = parse_index(segment)
            if index is None:
                continue
            if keep is not None and keep.search(".".join(parts[:i])):
                continue
            seen.setdefault(_list_key(parts, i), set()).add(index)
    return {
        key: {old: new for new, old in enumerate(sorted(indices))} for key, indices in seen.items()
    }


def _rewrite(parts: list[str], lists: dict[str, dict[int, int]]) -> str:
    """`parts` joined with each index segment replaced through its list's map."""
    out = list(parts)
    for i, segment in enumerate(parts):
        renumber = lists.get(_list_key(parts, i))
        index = parse_index(segment)
        if renumber is not None and index is not None:
            out[i] = str(renumber[index])
    return ".".join(out)


def _map_indices(paths: Iterable[str], keep: re.Pattern[str] | None) -> dict[str, str]:
    """The shared body of both public functions: old path to new path, collisions refused."""
    split_paths = [path.split(".") for path in dict.fromkeys(paths)]
    lists = _collect_lists(split_paths, keep)
    mapping: dict[str, str] = {}
    originals: dict[str, str] = {}
    for parts in split_paths:
        old, new = ".".join(parts), _rewrite(parts, lists)
        first = originals.setdefault(new, old)
        if first != old:  # "fc.0" and "fc.00" are both index 0
            raise RemapCollisionError(new, first, old)
        mapping[old] = new
    return mapping


def map_indices_contiguous(paths: Iterable[str]) -> dict[str, str]:
    """Renumber every list of indices to 0, 1, 2, ..., by the rules in the module docstring.

    Example:
        >>> mapping = map_indices_contiguous(["fc.0.weight", "fc.2.weight", "fc.4.bias"])
        >>> list(mapping.values())
        ['fc.0.weight', 'fc.1.weight', 'fc.2.bias']

    Returns:
        Every input path (once, in input order) mapped to its new path; paths without indices
        map to themselves.

    Raises:
        RemapCollisionError: two spellings of one index (``fc.0`` and ``fc.00``) would give two
            tensors one name; Burn keeps whichever comes last.
    """
    return _map_indices(paths, None)


def map_indices_contiguous_except(
    paths: Iterable[str], regex: str | re.Pattern[str]
) -> dict[str, str]:
    """`map_indices_contiguous`, except for lists whose parent path matches `regex`.

    The regex is searched in the path up to, not including, the index segment and its dot,
    spelled with the original numbers: for ``blocks.3.attn.1.weight`` it sees ``blocks`` for the
    first index and ``blocks.3.attn`` for the second. A matched list keeps its indices exactly
    as written; lists inside it, and all other lists, are still closed up.

    Example:
        >>> paths = ["blocks.0.w", "blocks.2.w", "head.1.w", "head.3.w"]
        >>> list(map_indices_contiguous_except(paths, r"^blocks$").values())
        ['blocks.0.w', 'blocks.2.w', 'head.0.w', 'head.1.w']

    Raises:
        InvalidOptionError: `regex` does not compile.
        RemapCollisionError: as for `map_indices_contiguous`.
    """
    keep = regex if isinstance(regex, re.Pattern) else compile_pattern(regex)
    return _map_indices(paths, keep)


def is_variant_segment(segment: str) -> bool:
    """Whether a path segment is spelled like a Burn enum variant name.

    Burn's own rule (its "did you mean" hint): longer than one byte, an upper-case first
    character and a lower-case one after it, so ``BaseConv`` counts and ``QKV`` or ``W`` do not.
    """
    return (
        len(segment.encode()) > 1
        and segment[0].isupper()
        and any(char.islower() for char in segment[1:])
    )


def strip_enum_variants(path: str, *, first_only: bool = False) -> str:
    """`path` without its inner segments (not first, not last) that name an enum variant.

    Burn puts the active variant of an enum module into the path (``feature.BaseConv.weight``);
    PyTorch has no such level (``feature.weight``). A path read from a file carries no container
    types, so variants are told by their spelling (`is_variant_segment`).

    Args:
        path: a dot-joined tensor path.
        first_only: drop only the first such segment, as Burn's suggestion hint does.
    """
    parts = path.split(".")
    kept = parts[:1]
    dropped = False
    for part in parts[1:-1]:
        if is_variant_segment(part) and not (first_only and dropped):
            dropped = True
            continue
        kept.append(part)
    kept.extend(parts[1:][-1:])
    return ".".join(kept)
