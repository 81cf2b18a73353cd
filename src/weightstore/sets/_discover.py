"""Finding the set at a path: which index or single file is the set, in which format and
variant, and which other files in the directory are ignored and why.

A path is a set when it is a directory, or a file named as an index (``*.index.json``,
``*.index.<variant>.json``). In a directory the formats are searched in `LAYOUTS` order
(SafeTensors first), or only the one asked for; within a format:

- the variant asked for (``variant="fp16"``), else the plain set, else the one variant there
  is (several and no plain one: an error that lists them);
- within that variant the index wins over a single file beside it: the index is the commit
  point of a save, and a ``model.safetensors`` left from an older unsharded save is stale
  (one peer's loader prefers it; we report it and never read it);
- every other file named as part of some set is reported as ignored: other variants, other
  formats' sets, and (once the index is read, `stray_shards`) shards the index does not name,
  left by an interrupted save or by another tool (a peer's reader merges every ``*.safetensors``
  in the directory; we never do).

Only regular files (or symlinks to them) are looked at. Anything else beside a set is skipped
and reported with what it is (`SetLocation.skipped`): a FIFO, socket or device (opening one
could block forever), a broken symlink, a symlink loop (``x -> x``: every call on it fails).
One such entry never makes the set unreadable; when the index names one, `locate_shards`
refuses it. Subdirectories are neither looked at nor reported (a repository's ``original/``).

Both index spellings of a variant are found: transformers' ``model.safetensors.index.fp16.json``
(`SetLayout.index_name`) and huggingface_hub's ``model.fp16.safetensors.index.json`` (what
``save_torch_state_dict(filename_pattern="model.fp16{suffix}.safetensors")`` writes).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, Final

from weightstore.base._record import Record
from weightstore.errors import SetError, UnsupportedFormatError, WeightstoreError
from weightstore.io import is_url
from weightstore.io._local import DIRECTORY, MISSING, REGULAR, kind_at
from weightstore.sets._index import read_index
from weightstore.sets._layout import LAYOUTS, SetLayout, layout_for, parse_shard_name

__all__ = [
    "INDEX_NAME",
    "WHY_OTHER_FORMAT",
    "WHY_OTHER_VARIANT",
    "WHY_STALE_SINGLE",
    "WHY_STRAY_SHARD",
    "SetLocation",
    "find_set",
    "formats_in",
    "is_index_name",
    "looked_for",
    "needs_warning",
    "stray_shards",
]

INDEX_NAME: Final = re.compile(
    r"(?P<stem>[^/\\]+?)\.(?P<ext>[A-Za-z0-9]+)\.index(?:\.(?P<variant>[A-Za-z0-9_]+))?\.json"
)
"""An index file name: ``<stem>.<ext>.index[.<variant>].json`` (the stem may hold the variant,
as huggingface_hub spells it: ``model.fp16.safetensors.index.json``)."""

# Why a file is ignored: `SetReader.ignored` pairs a file with one of these.
WHY_STALE_SINGLE: Final = "stale single file beside the index (the index is the set)"
"""An unsharded file (or a second index) beside the chosen index: left by an older save."""
WHY_STRAY_SHARD: Final = "stray shard: named like the set's shards but not named by its index"
"""A shard-named file the index does not name: an interrupted save's, or another tool's."""
WHY_OTHER_VARIANT: Final = "another variant of the set, not chosen (pass variant= to read it)"
"""A file of another variant of the same format's set (``model.fp16-00001-of-00002...``)."""
WHY_OTHER_FORMAT: Final = "another format's set, not chosen (open it with that format's store)"
"""A file of another format's set in the same directory (``pytorch_model.bin`` beside
SafeTensors shards, as many Hugging Face repositories hold both)."""

_VARIANT: Final = re.compile(r"[A-Za-z0-9_]+")
_LISTED_CANDIDATES: Final = 5  # checkpoints an ambiguity error names (then "...")
_WARNED: Final = frozenset({WHY_STALE_SINGLE, WHY_STRAY_SHARD})  # a damaged directory, not a choice


class SetLocation(Record):
    """Where a set is: what `find_set` found, before its index is read.

    Attributes:
        directory: the set's directory.
        layout: its format's naming (a custom stem for an index opened by its path).
        variant: the variant chosen, or None for the plain set.
        index_path: the index, or None when the set is one file.
        single_path: the single file when there is no index, else None.
        ignored: (file path, why) for each file left out so far; `stray_shards` adds more.
        shard_files: file names in the directory named as this layout's shards of this
            variant: those the index does not name are strays.
        skipped: (path, what it is) for each entry of the directory that is neither a regular
            file nor a directory (``"a FIFO"``, ``"a symlink loop"``, ``"a broken symlink"``).
    """

    directory: str
    layout: SetLayout | None
    variant: str | None
    index_path: str | None
    single_path: str | None
    ignored: tuple[tuple[str, str], ...]
    shard_files: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...] = ()

    def __init__(
        self,
        directory: str,
        layout: SetLayout | None,
        variant: str | None,
        index_path: str | None,
        single_path: str | None,
        ignored: tuple[tuple[str, str], ...],
        shard_files: tuple[str, ...],
        skipped: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(
            directory, layout, variant, index_path, single_path, ignored, shard_files, skipped
        )


def is_index_name(path: str | os.PathLike[str]) -> bool:
    """Whether `path`'s file name is an index's (`INDEX_NAME`)."""
    return INDEX_NAME.fullmatch(os.path.basename(os.fspath(path))) is not None


def find_set(
    path: str | os.PathLike[str],
    format_name: str | None = None,
    *,
    variant: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> SetLocation:
    """The set at `path`, a directory or an index file.

    Args:
        path: the directory, or the index itself.
        format_name: only this format's set (``"safetensors"``); None: the first format in
            `LAYOUTS` order that has one.
        variant: the variant to read (``"fp16"``); None: the plain set, or the only variant.
        storage_options: for a URL (a folder on an object store is a prefix, listed once),
            what its filesystem is opened with.

    Raises:
        SetError: the directory holds no set (the message lists what was looked for), or
            several variants and none was asked for, or not the one asked for.
        UnsupportedFormatError: `format_name` is given and the directory holds only another
            format's set; `found` names that format.
    """
    filename = os.fspath(path)
    match = INDEX_NAME.fullmatch(os.path.basename(filename))
    if is_url(filename) and match is None:  # a folder: whether it is one costs a listing
        return _find_in_directory(filename.rstrip("/"), format_name, variant, storage_options)
    if os.path.isdir(filename):
        return _find_in_directory(filename, format_name, variant)
    if match is None:
        raise SetError("is neither a directory nor an index (*.index.json)", path=filename)
    return _index_location(filename, match, storage_options)


def formats_in(directory: str, storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """The formats whose sets (an index or a single file, of any variant) `directory` holds,
    in `LAYOUTS` order; reads names only."""
    files, _ = _files_in(directory, storage_options)
    named = [layout.format_name for layout in LAYOUTS if _variants(files, layout)]
    if named:
        return named
    found = _other_stems(directory, files, LAYOUTS, None, storage_options)
    return list(dict.fromkeys(location.layout.format_name for location in found if location.layout))


def stray_shards(location: SetLocation, named: set[str]) -> list[tuple[str, str]]:
    """(path, why) for each of the location's shard files that `named` (the shard names of
    the set's index; empty for a single-file set) does not hold."""
    return [
        (os.path.join(location.directory, name), WHY_STRAY_SHARD)
        for name in location.shard_files
        if name not in named
    ]


def needs_warning(why: str) -> bool:
    """Whether an ignored file's reason points at a damaged directory (warned about) rather
    than a choice among sets (only reported)."""
    return why in _WARNED


def _index_location(
    filename: str, match: re.Match[str], storage_options: Mapping[str, Any] | None = None
) -> SetLocation:
    """An index opened by its path: its layout from its own name, its format from its shards
    once read (`layout` is None when the name's extension names no set layout)."""
    directory = os.path.dirname(filename) or "."
    stem, extension, variant = match["stem"], match["ext"], match["variant"]
    layout = next((lay for lay in LAYOUTS if lay.extension == extension), None)
    if layout is None:
        return SetLocation(directory, None, variant, filename, None, (), ())
    layout = layout.replace(stem=stem)
    files, skipped = _files_in(directory, storage_options)
    shards = tuple(name for name in files if _is_shard(name, layout, variant))
    return SetLocation(directory, layout, variant, filename, None, (), shards, skipped)


def _find_in_directory(
    directory: str,
    format_name: str | None,
    variant: str | None,
    storage_options: Mapping[str, Any] | None = None,
) -> SetLocation:
    files, skipped = _files_in(directory, storage_options)
    layouts = LAYOUTS if format_name is None else (_layout_named(format_name, directory),)
    for layout in layouts:
        location = _find_in(directory, files, layout, variant)
        if location is not None:
            others = _other_layouts_files(directory, files, layout)
            return location.replace(ignored=(*location.ignored, *others), skipped=skipped)
    found = _other_stems(directory, files, layouts, variant, storage_options)
    if len(found) == 1:
        return found[0].replace(skipped=skipped)
    if found:
        shown = ", ".join(
            os.path.basename(_set_file(location)) for location in found[:_LISTED_CANDIDATES]
        )
        shown += ", ..." if len(found) > _LISTED_CANDIDATES else ""
        raise SetError(
            f"holds several checkpoints ({shown}) and none named as the set "
            f"({layouts[0].single_name(variant)}, {layouts[0].index_name(variant)}); "
            "open one by its path",
            path=directory,
        )
    if format_name is not None:
        _refuse_other_format(directory, files, format_name)
    raise SetError(f"holds no checkpoint set: {looked_for(layouts, variant)}", path=directory)


def looked_for(layouts: tuple[SetLayout, ...] = LAYOUTS, variant: str | None = None) -> str:
    """What a directory is searched for, as messages say it: the formats' own names, then
    any one index whose shards are there, then any one weight file."""
    names = ", ".join(
        name
        for layout in layouts
        for name in (layout.index_name(variant), layout.single_name(variant))
    )
    from weightstore.formats import format_named

    indexes = ", ".join(f"*.{layout.extension}.index.json" for layout in layouts)
    files = ", ".join(
        f"*.{extension}"
        for layout in layouts
        for extension in format_named(layout.format_name).extensions
    )
    return (
        f"looked for {names}, then for any one other index ({indexes}) whose shards are "
        f"there, or any one weight file ({files})"
    )


def _set_file(location: SetLocation) -> str:
    return location.index_path or location.single_path or location.directory


def _other_stems(
    directory: str,
    files: list[str],
    layouts: tuple[SetLayout, ...],
    variant: str | None,
    storage_options: Mapping[str, Any] | None,
) -> list[SetLocation]:
    """The sets of `directory` under stems other than the formats' own (diffusers'
    ``diffusion_pytorch_model``, a lone ``weights.safetensors``), when it holds none of
    those: each stem's set as `_find_in` finds it among that stem's files (its variants, a
    stale single file and its strays alike), an index counted only when the shards it names
    are there. Stops after `_LISTED_CANDIDATES` + 1: more is only "several"."""
    from weightstore.formats import format_named

    found: list[SetLocation] = []
    extended = [
        layout.replace(extension=extension)
        for layout in layouts
        for extension in dict.fromkeys(
            (layout.extension, *format_named(layout.format_name).extensions)
        )
    ]  # a lone checkpoint.pt is PyTorch's as much as a .bin
    for base in extended:
        for stem, names in sorted(_files_by_stem(files, base).items()):
            layout = base.replace(stem=stem)
            location = _find_in(directory, names, layout, variant, strict=False)
            if location is None:
                continue
            index = location.index_path
            if index and not _shards_present(index, files, storage_options):
                continue
            found.append(location)
            if len(found) > _LISTED_CANDIDATES:
                return found
    return found


def _files_by_stem(files: list[str], layout: SetLayout) -> dict[str, list[str]]:
    """The files named as `layout`'s extension's single files, indexes or shards, by stem, a
    variant's files under their plain stem (``x.fp16.safetensors`` under ``x`` when ``x``'s
    files are there): one pass, so a directory of many files costs each one once."""
    named: list[tuple[str, str]] = []  # (stem as the name spells it, name)
    suffix = f".{layout.extension}"
    for name in files:
        match = INDEX_NAME.fullmatch(name)
        if match is not None:
            if match["ext"] == layout.extension:
                named.append((match["stem"], name))
            continue
        shard = parse_shard_name(name)
        if shard is not None:
            if shard.extension == layout.extension:
                named.append((shard.stem, name))
        elif name.endswith(suffix) and len(name) > len(suffix):
            named.append((name[: -len(suffix)], name))
    stems = {stem for stem, _ in named}
    grouped: dict[str, list[str]] = {}
    for stem, name in named:
        head, dot, tail = stem.rpartition(".")
        if dot and head in stems and _VARIANT.fullmatch(tail):
            stem = head  # "x.fp16" is stem x's variant fp16
        grouped.setdefault(stem, []).append(name)
    return grouped


def _shards_present(
    index_path: str, files: list[str], storage_options: Mapping[str, Any] | None
) -> bool:
    """Whether every shard the index names is in the directory's listing; an index that does
    not read counts as present, so opening it says what is wrong with it."""
    try:
        index = read_index(index_path, storage_options=storage_options)
    except WeightstoreError:
        return True
    listed = set(files)
    return all("/" in shard or shard in listed for shard in index.weight_map.values())


def _layout_named(format_name: str, directory: str) -> SetLayout:
    try:
        return layout_for(format_name)
    except KeyError:
        raise UnsupportedFormatError(
            f"is a directory, and {format_name} checkpoints have no sharded sets", path=directory
        ) from None


def _refuse_other_format(directory: str, files: list[str], format_name: str) -> None:
    """Name the format whose set the directory holds, when not the one asked for."""
    from weightstore.formats import format_named  # the registry's titles, for the message

    for layout in LAYOUTS:
        if layout.format_name == format_name:
            continue
        location = _find_in(directory, files, layout, None, strict=False)
        if location is not None:
            other, asked = format_named(layout.format_name), format_named(format_name)
            shown = os.path.basename(location.index_path or location.single_path or "")
            raise UnsupportedFormatError(
                f"holds a {other.title} set ({shown}), not a {asked.title} one; open it with "
                "that format's store, or Store.from_file, which picks the format",
                path=directory,
                found=layout.format_name,
            )


def _find_in(
    directory: str,
    files: list[str],
    layout: SetLayout,
    variant: str | None,
    *,
    strict: bool = True,
) -> SetLocation | None:
    """`layout`'s set in `directory`, or None when it has none (of `variant`, if asked).

    With `strict`, several variants and none asked for is an error; without, the first."""
    found = _variants(files, layout)  # variant -> (index names, single name or None)
    if not found:
        return None
    if variant is not None:
        if variant not in found:
            return None
        chosen: str | None = variant
    elif None in found:
        chosen = None
    elif len(found) == 1 or not strict:
        chosen = sorted(found, key=str)[0]
    else:
        listing = ", ".join(sorted(str(v) for v in found))
        raise SetError(
            f"holds {layout.format_name} sets in several variants ({listing}) and no plain "
            "one; choose one with variant=",
            path=directory,
        )
    return _location(directory, files, layout, chosen, found)


def _location(
    directory: str,
    files: list[str],
    layout: SetLayout,
    chosen: str | None,
    found: dict[str | None, tuple[list[str], str | None]],
) -> SetLocation:
    """The location of variant `chosen`, with everything else of `layout` reported."""
    indexes, single = found[chosen]
    ignored: list[tuple[str, str]] = []
    index_path = os.path.join(directory, indexes[0]) if indexes else None
    single_path = os.path.join(directory, single) if single and not indexes else None
    if indexes and single:
        ignored.append((os.path.join(directory, single), WHY_STALE_SINGLE))
    ignored.extend((os.path.join(directory, name), WHY_STALE_SINGLE) for name in indexes[1:])
    for other, (other_indexes, other_single) in found.items():
        if other != chosen:
            names = [*other_indexes, *([other_single] if other_single else [])]
            ignored.extend((os.path.join(directory, n), WHY_OTHER_VARIANT) for n in names)
    shard_files: list[str] = []
    for name in files:
        shard = parse_shard_name(name)
        if shard is None or (shard.stem, shard.extension) != (layout.stem, layout.extension):
            continue
        if shard.variant == chosen:
            shard_files.append(name)
        else:
            ignored.append((os.path.join(directory, name), WHY_OTHER_VARIANT))
    return SetLocation(
        directory, layout, chosen, index_path, single_path, tuple(ignored), tuple(shard_files)
    )


def _variants(
    files: list[str], layout: SetLayout
) -> dict[str | None, tuple[list[str], str | None]]:
    """Each variant of `layout`'s set present: its index file names (transformers' spelling
    first) and its single file name."""
    found: dict[str | None, tuple[list[str], str | None]] = {}
    single_name = re.compile(
        rf"{re.escape(layout.stem)}(?:\.(?P<variant>[A-Za-z0-9_]+))?\.{re.escape(layout.extension)}"
    )
    for name in files:
        is_index, index_variant = _index_variant(name, layout)
        if is_index:
            found.setdefault(index_variant, ([], None))[0].append(name)
            continue
        match = single_name.fullmatch(name)
        if match is not None:
            indexes, _ = found.get(match["variant"], ([], None))
            found[match["variant"]] = (indexes, name)
    for indexes, _ in found.values():  # transformers' spelling, then huggingface_hub's
        indexes.sort(key=lambda n: (not n.startswith(f"{layout.stem}.{layout.extension}."), n))
    return found


def _index_variant(name: str, layout: SetLayout) -> tuple[bool, str | None]:
    """Whether `name` is an index of `layout`'s sets, and of which variant (None: plain)."""
    match = INDEX_NAME.fullmatch(name)
    if match is None or match["ext"] != layout.extension:
        return False, None
    stem, variant = match["stem"], match["variant"]
    if stem == layout.stem:
        return True, variant
    head, dot, tail = stem.rpartition(".")  # huggingface_hub: model.fp16.safetensors.index.json
    if dot and head == layout.stem and variant is None and _VARIANT.fullmatch(tail):
        return True, tail
    return False, None


def _is_shard(name: str, layout: SetLayout, variant: str | None) -> bool:
    """Whether `name` is a shard of `layout` (of `variant`), the variant written into the
    stem or parsed from it alike."""
    shard = parse_shard_name(name)
    if shard is None or shard.extension != layout.extension:
        return False
    full = shard.stem if shard.variant is None else f"{shard.stem}.{shard.variant}"
    return full == (layout.stem if variant is None else f"{layout.stem}.{variant}")


def _other_layouts_files(
    directory: str, files: list[str], chosen: SetLayout
) -> list[tuple[str, str]]:
    """(path, why) for the files of every other format's set in the directory."""
    ignored: list[tuple[str, str]] = []
    for layout in LAYOUTS:
        if layout == chosen:
            continue
        found = _variants(files, layout)
        names = [n for indexes, single in found.values() for n in (*indexes, single) if n]
        for name in files:
            shard = parse_shard_name(name)
            if shard is not None and (shard.stem, shard.extension) == (
                layout.stem,
                layout.extension,
            ):
                names.append(name)
        ignored.extend((os.path.join(directory, n), WHY_OTHER_FORMAT) for n in sorted(names))
    return ignored


def _files_in(
    directory: str, storage_options: Mapping[str, Any] | None = None
) -> tuple[list[str], tuple[tuple[str, str], ...]]:
    """The names of the files (or symlinks to files) in `directory`, sorted, and (path, what
    it is) for each entry skipped as neither a file nor a directory (`kind_at`). For a URL,
    the objects directly under its prefix (one listing; none where the store cannot list, as
    plain HTTP servers cannot: open a set there by its index's URL), and nothing skipped."""
    if is_url(directory):
        from weightstore.io._remote_write import list_names

        return sorted(list_names(directory, storage_options) or []), ()
    files: list[str] = []
    skipped: list[tuple[str, str]] = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                kind = _entry_kind(entry)
                if kind == REGULAR:
                    files.append(entry.name)
                elif kind not in (DIRECTORY, MISSING):  # MISSING: removed while listed
                    skipped.append((entry.path, kind))
    except FileNotFoundError:
        return [], ()
    return sorted(files), tuple(sorted(skipped))


def _entry_kind(entry: os.DirEntry[str]) -> str:
    """`kind_at` of a listed entry, from the listing's own file type where it can tell (no
    ``stat`` for a plain file or directory), else by asking (a symlink loop raises ``ELOOP``
    from `os.DirEntry.is_file`). An entry that cannot be asked about (no permission) is
    skipped as unreadable: it cannot be a readable shard either."""
    try:
        if entry.is_file():
            return REGULAR
        if entry.is_dir():
            return DIRECTORY
    except OSError:
        pass
    try:
        return kind_at(entry.path)
    except OSError as err:
        return f"unreadable ({err.strerror or type(err).__name__})"
