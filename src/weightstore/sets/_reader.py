"""Reading a set: one reader over many shards, following the `TensorReader` protocol.

`open_set` finds the set (`find_set`), reads and checks its index (`read_index`), stats every
shard it names (`locate_shards`), and opens nothing else: a shard is opened the first time one
of its tensors is asked about, once, and kept open until `close` (a meta-device load maps each
shard once). So a load reads only the shards that hold wanted tensors, one tensor at a time,
and `SetReader.restricted` gives a store a reader over the tensors its filter keeps, which
never opens the other shards at all.

When a shard opens it is checked against the index: the set id (a shard of another save is a
`SetMismatchError`), the tensors the index assigns to it (one it lacks is *missing*: not in
`names()`, recorded in `missing_from_shards`) and those it holds that the index does not list
(`unlisted`, never read). A tensor a shard holds that the index assigns to another shard is
that other shard's, and is ignored here.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from weightstore.base._record import Record
from weightstore.errors import (
    DigestMismatchError,
    LfsPointerError,
    SetError,
    SetMismatchError,
    SetWarning,
    TensorNotFoundError,
    UnsupportedFormatError,
    WeightstoreError,
)
from weightstore.sets._discover import (
    SetLocation,
    find_set,
    needs_warning,
    stray_shards,
)
from weightstore.sets._index import (
    MAX_INDEX_SIZE,
    SET_ID_KEY,
    SetIndex,
    locate_shards,
    read_index,
)

if TYPE_CHECKING:
    from weightstore.container._format import ContainerFormat, TensorInfo, TensorReader
    from weightstore.dtypes import DType

__all__ = [
    "SetReader",
    "SetReport",
    "agreed_metadata",
    "located_set",
    "open_set",
    "set_format_of",
]

_LISTED_IN_WARNING: Final = 5  # files or tensors a warning names before counting the rest


class SetReport(Record):
    """What a set holds besides its tensors: the files and tensors a load leaves out.

    Attributes:
        path: the index, or the single file of a one-file set.
        format_name: the shards' format.
        variant: the variant read, or None.
        shards: every shard's path, in shard order.
        ignored: (file, why) for each file in the directory that looks like part of a set
            but is not this one's (a stale single file, stray shards, other variants, another
            format's set).
        unlisted: shard -> tensors it holds that the index does not list (never loaded).
        missing: shard -> tensors the index assigns to it that it does not hold.
        skipped: (path, what it is) for each entry of the directory that is not a file at
            all and was never opened (``"a FIFO"``, ``"a symlink loop"``, ``"a broken
            symlink"``: `weightstore.sets._discover`).
        damaged: (shard path, its error) for each shard that did not open, when the report
            was asked to go on past them (`SetReader.report` with ``keep_going``).
    """

    path: str
    format_name: str
    variant: str | None
    shards: tuple[str, ...]
    ignored: tuple[tuple[str, str], ...]
    unlisted: dict[str, list[str]]
    missing: dict[str, list[str]]
    skipped: tuple[tuple[str, str], ...] = ()
    damaged: tuple[tuple[str, str], ...] = ()

    def __init__(
        self,
        path: str,
        format_name: str,
        variant: str | None,
        shards: tuple[str, ...],
        ignored: tuple[tuple[str, str], ...],
        unlisted: dict[str, list[str]],
        missing: dict[str, list[str]],
        skipped: tuple[tuple[str, str], ...] = (),
        damaged: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(
            path, format_name, variant, shards, ignored, unlisted, missing, skipped, damaged
        )


class _SetFiles(Record):
    """What an opened set knows before any shard is opened; shared by restricted readers."""

    path: str
    index: SetIndex | None
    fmt: ContainerFormat
    variant: str | None
    weight_map: dict[str, str]  # tensor -> shard path
    metadata: dict[str, str]
    ignored: tuple[tuple[str, str], ...]
    options: dict[str, Any]
    skipped: tuple[tuple[str, str], ...]

    def __init__(
        self,
        path: str,
        index: SetIndex | None,
        fmt: ContainerFormat,
        variant: str | None,
        weight_map: dict[str, str],
        metadata: dict[str, str],
        ignored: tuple[tuple[str, str], ...],
        options: dict[str, Any],
        skipped: tuple[tuple[str, str], ...],
    ) -> None:
        super().__init__(path, index, fmt, variant, weight_map, metadata, ignored, options, skipped)


def open_set(
    path: str | os.PathLike[str],
    format_name: str | None = None,
    *,
    variant: str | None = None,
    max_index_size: int = MAX_INDEX_SIZE,
    **reader_options: Any,
) -> SetReader:
    """Open the set at `path`: a directory, or an index file.

    Args:
        path: the directory (its set is found as `find_set` says) or the index itself.
        format_name: read only this format's set; None: whichever the directory holds
            (SafeTensors first), or for an index, the format of its shards.
        variant: the variant to read (``"fp16"``); None: the plain set, or the only one.
        max_index_size: refuse a larger index before reading it.
        reader_options: passed to each shard's reader (``mode="pread"``, limits,
            ``top_level_key``; ``storage_options`` for a set at a URL, also used to list its
            folder and read its index).

    Raises:
        SetError: no set there, a bad index (`read_index`), a shard missing from disk or
            outside the directory (`locate_shards`).
        UnsupportedFormatError: `format_name` is given and the set is another format's.

    Example:
        >>> with open_set("Llama-3-8B/") as reader:  # doctest: +SKIP
        ...     embed = reader.get_slice("model.embed_tokens.weight")[:1000]
    """
    storage = reader_options.get("storage_options")
    location = find_set(path, format_name, variant=variant, storage_options=storage)
    if location.index_path is None:
        files = _single_file_set(location, reader_options)
    else:
        index = read_index(
            location.index_path, max_index_size=max_index_size, storage_options=storage
        )
        files = _indexed_set(location, index, format_name, reader_options)
    _warn_about(files.path, [entry for entry in files.ignored if needs_warning(entry[1])])
    return SetReader(files)


def set_format_of(
    path: str | os.PathLike[str],
    storage_options: Mapping[str, Any] | None = None,
    *,
    variant: str | None = None,
) -> ContainerFormat:
    """The format of the set at `path` (a directory or an index, local or a URL), opening no
    shard.

    Raises:
        SetError: as `open_set`.
    """
    return located_set(path, storage_options, variant=variant)[0]


def located_set(
    path: str | os.PathLike[str],
    storage_options: Mapping[str, Any] | None = None,
    *,
    variant: str | None = None,
) -> tuple[ContainerFormat, str | None]:
    """The format of the set at `path` (of `variant`) and its index path (None for a set that
    is one file), opening no shard: what `weightstore.locate` records of a set.

    Raises:
        SetError: as `open_set`.
    """
    from weightstore.formats import format_named

    location = find_set(path, variant=variant, storage_options=storage_options)
    if location.index_path is None:
        assert location.layout is not None
        return format_named(location.layout.format_name), None
    index = read_index(location.index_path, storage_options=storage_options)
    shard_paths = locate_shards(index, storage_options)
    return _format_of(location, index, shard_paths, None, storage_options), location.index_path


def _indexed_set(
    location: SetLocation, index: SetIndex, format_name: str | None, options: dict[str, Any]
) -> _SetFiles:
    storage = options.get("storage_options")
    shard_paths = locate_shards(index, storage)
    fmt = _format_of(location, index, shard_paths, format_name, storage)
    weight_map = {name: shard_paths[shard] for name, shard in index.weight_map.items()}
    ignored = (*location.ignored, *stray_shards(location, set(shard_paths)))
    return _SetFiles(
        index.path, index, fmt, location.variant, weight_map, index.metadata, ignored, options,
        location.skipped,
    )  # fmt: skip


def _single_file_set(location: SetLocation, options: dict[str, Any]) -> _SetFiles:
    """A directory whose set is one file: its names come from the file, opened now."""
    from weightstore.formats import format_named

    assert location.single_path is not None and location.layout is not None
    fmt = format_named(location.layout.format_name)
    path = location.single_path
    reader = _open_shard(fmt, path, options, None)
    try:
        weight_map = dict.fromkeys(reader.names(), path)
        metadata = {key: str(value) for key, value in reader.metadata().items()}
    finally:
        reader.close()
    ignored = (*location.ignored, *stray_shards(location, set()))
    return _SetFiles(
        path, None, fmt, location.variant, weight_map, metadata, ignored, options,
        location.skipped,
    )  # fmt: skip


def _format_of(
    location: SetLocation,
    index: SetIndex,
    shard_paths: Mapping[str, str],
    format_name: str | None,
    storage_options: Mapping[str, Any] | None = None,
) -> ContainerFormat:
    """The shards' format: the one their extension names, else the first shard's bytes (an
    index names its shards, so they, not the index's own name, say what the set is)."""
    from weightstore.formats import detect_format, format_for_path, format_named

    extensions = {os.path.splitext(shard)[1].lower() for shard in shard_paths}
    fmt = format_for_path(f"shard{extensions.pop()}") if len(extensions) == 1 else None
    if fmt is None and shard_paths:
        fmt = detect_format(shard_paths[min(shard_paths)], storage_options)
    if fmt is None:  # an index of no tensors: the name it was found by is all there is
        known = format_name or (location.layout.format_name if location.layout else None)
        if known is None:
            raise SetError("index names no shard, so its format is unknown", path=index.path)
        fmt = format_named(known)
    if format_name is not None and fmt.name != format_name:
        asked = format_named(format_name)
        raise UnsupportedFormatError(
            f"is a {fmt.title} set's index, not a {asked.title} one; open it with that "
            "format's store, or Store.from_file, which picks the format",
            path=index.path,
            found=fmt.name,
        )
    return fmt


class SetReader:
    """An open set: the `TensorReader` protocol over every shard, plus what the set knows
    about itself (`path`, `shard_of`, `ignored`, `unlisted`, `missing_from_shards`).

    Open one with `open_set`. Attributes:
        path: the index (or the single file of a one-file set).
        index: the parsed index, or None for a one-file set.
        format: the shards' `ContainerFormat`.
        variant: the variant read, or None.
        ignored: (file, why) for each file in the directory left out (`SetReport.ignored`).
        skipped: (path, what it is) for each entry that is no file (`SetReport.skipped`).
        unlisted: shard -> tensors it holds that the index does not list; filled as shards
            open.
        missing_from_shards: shard -> tensors the index assigns to it that it lacks; filled
            as shards open. Those tensors are not in `names()`: a load reports them missing.
        damaged: shard -> why it did not open; filled only by ``report(keep_going=True)``.
    """

    def __init__(self, files: _SetFiles, selection: Iterable[str] | None = None) -> None:
        self._files = files
        self.path = files.path
        self.index = files.index
        self.format = files.fmt
        self.variant = files.variant
        self.ignored: list[tuple[str, str]] = list(files.ignored)
        self.skipped: list[tuple[str, str]] = list(files.skipped)
        self.unlisted: dict[str, list[str]] = {}
        self.missing_from_shards: dict[str, list[str]] = {}
        self.damaged: dict[str, str] = {}  # shard -> why it did not open (`report`)
        weight_map = files.weight_map
        names = weight_map if selection is None else [n for n in selection if n in weight_map]
        self._wanted: dict[str, set[str]] = {}  # shard path -> tensors selected from it
        for name in names:
            self._wanted.setdefault(weight_map[name], set()).add(name)
        self._assigned: dict[str, set[str]] = {}  # shard path -> every tensor the index puts there
        for name, shard in weight_map.items():
            self._assigned.setdefault(shard, set()).add(name)
        self._readers: dict[str, TensorReader] = {}  # shard path -> its reader, once opened
        self._present: dict[str, set[str]] = {}  # shard path -> selected tensors it holds
        self._planned: dict[str, list[str]] = {}  # shard path -> tensors a load will read
        self._digests_on = True  # shards check their tensor digests as they are read
        self._pointers: tuple[str, ...] | None = None  # shards that are git-lfs pointers

    def plan_reads(self, names: Iterable[str]) -> None:
        """Announce that `names` will be read whole: each shard's reader is told its own when
        it opens (or now, if open), so remote shards fetch them in merged batches."""
        weight_map = self._files.weight_map
        planned: dict[str, list[str]] = {}
        for name in names:
            shard = weight_map.get(name)
            if shard is not None:
                planned.setdefault(shard, []).append(name)
        self._planned = planned
        for shard, reader in self._readers.items():
            _plan_shard(reader, planned.get(shard, []))

    # -- the set -------------------------------------------------------------------------------

    def restricted(self, names: Iterable[str]) -> SetReader:
        """A reader over `names` alone (names the index does not list are dropped): it never
        opens a shard that holds none of them. A new reader; this one stays as it is."""
        reader = SetReader(self._files, names)
        reader._digests_on = self._digests_on
        return reader

    def listed_names(self) -> list[str]:
        """The names the index lists for this reader (restriction applied), sorted; opens no
        shard, so a tensor a shard turns out to lack is still here (see `names`)."""
        return sorted(name for names in self._wanted.values() for name in names)

    @property
    def shards(self) -> list[str]:
        """The shards holding this reader's tensors, in shard order; none is opened."""
        return sorted(self._wanted)

    def shard_of(self, name: str) -> str:
        """The path of the shard the index puts tensor `name` in; opens nothing.

        Raises:
            TensorNotFoundError: the index lists no such tensor (or the reader is restricted
                to others).
        """
        shard = self._files.weight_map.get(name)
        if shard is None or name not in self._wanted.get(shard, ()):
            raise TensorNotFoundError(name, path=self.path, known=len(self._files.weight_map))
        return shard

    def report(self, *, keep_going: bool = False) -> SetReport:
        """What the set leaves out, after opening every shard's header (`SetReport`).

        With `keep_going`, a shard that does not open (truncated, of another save) is
        recorded in `SetReport.damaged` and in `damaged` instead of failing the report, so
        the healthy shards can still be listed; `metadata` then leaves it out.

        Raises:
            WeightstoreError: without `keep_going`, the first shard that does not open.
        """
        for shard in self.shards:
            try:
                self._shard(shard)
            except WeightstoreError as err:
                if not keep_going:
                    raise
                self.damaged[shard] = getattr(err, "detail", None) or str(err)
        return SetReport(
            self.path, self.format.name, self.variant, tuple(self.shards), tuple(self.ignored),
            dict(self.unlisted), dict(self.missing_from_shards), tuple(self.skipped),
            tuple(self.damaged.items()),
        )  # fmt: skip

    # -- the reader protocol -------------------------------------------------------------------

    def names(self) -> list[str]:
        """Every tensor the set holds, sorted; opens the header of every shard."""
        return sorted(name for shard in self.shards for name in self._held(shard))

    def names_in_file_order(self) -> list[str]:
        """Tensor names shard by shard, each shard's in the order its bytes lie."""
        ordered: list[str] = []
        for shard in self.shards:
            held = self._held(shard)
            ordered.extend(n for n in self._readers[shard].names_in_file_order() if n in held)
        return ordered

    def tensor_infos(self) -> list[tuple[str, DType, tuple[int, ...], int | None]]:
        """Name, dtype, shape and param id of every tensor, in `names_in_file_order`: what a
        snapshot needs, from each shard's spans where its reader has them (no descriptor
        object per tensor, as `ContainerReader.tensor_infos`)."""
        infos: list[tuple[str, DType, tuple[int, ...], int | None]] = []
        for shard in self.shards:
            held = self._held(shard)
            reader = self._readers[shard]
            spans = getattr(reader, "tensor_infos", None)
            if spans is not None:
                infos.extend(info for info in spans() if info[0] in held)
                continue
            for name in reader.names_in_file_order():
                if name in held:
                    info = reader.descriptor(name)
                    infos.append((name, info.dtype, tuple(info.shape), info.param_id))
        return infos

    def descriptor(self, name: str) -> TensorInfo:
        """Dtype, shape and param id of tensor `name`, from its shard's header."""
        return self._reader_of(name).descriptor(name)

    def get(self, name: str) -> Any:
        """Tensor `name` as a NumPy array (a view of the mapped shard where possible)."""
        return self._reader_of(name).get(name)

    def get_slice(self, name: str) -> Any:
        """Tensor `name` to index like an array; reads only the part selected where the
        shard's format allows."""
        return self._reader_of(name).get_slice(name)

    def metadata(self) -> dict[str, str]:
        """The set's metadata: the index's, merged with the pairs every shard of this reader
        carries alike (the single file's, for a one-file set); a copy. An index written by
        transformers or huggingface_hub holds only ``total_size``, while every shard says
        ``format: pt``: a conversion that took the index's alone would write
        ``format: safetensors``, which transformers refuses. The index wins where both have
        a key. Opens the header of every shard, of a format whose metadata is pairs a save
        writes (SafeTensors, burnpack); a PyTorch shard's metadata is facts about its own
        layout, so a ``.bin`` set's is its index's alone (and no pickle is parsed for it)."""
        if self.index is None or not self.format.writable:
            return dict(self._files.metadata)
        opened = [shard for shard in self.shards if shard not in self.damaged]
        shards = [self._shard(shard).metadata() for shard in opened]
        return {**agreed_metadata(shards), **self._files.metadata}

    def check_digests(self, enabled: bool = True) -> None:
        """Turn checking each shard's tensor digests as tensors are read on or off."""
        self._digests_on = enabled
        for reader in self._readers.values():
            _set_checking(reader, enabled)

    def verify_digests(
        self, names: Iterable[str] | None = None, *, files: bool = False
    ) -> list[str]:
        """Check the tensors' bytes against the digests their shards carry (every tensor, or
        `names`); with `files`, each shard file's bytes against the index's file digests too.
        The names that carry no digest, sorted (docs/integrity.md).

        Raises:
            DigestMismatchError: the first tensor or shard whose bytes differ.
            DigestError: an index digest value that is not the documented JSON.
        """
        wanted = None if names is None else set(names)
        missing: list[str] = []
        table = None
        if files and self._digests_on:
            from weightstore.io._digest import DigestCheck

            check = DigestCheck.of(self._files.metadata, self.path)
            table = None if check is None else check.table
        for shard in self.shards:
            held = self._held(shard)
            chosen = sorted(held if wanted is None else held & wanted)
            reader = self._readers[shard]
            verify = getattr(reader, "verify_digests", None)
            missing.extend(chosen if verify is None else verify(chosen))
            if table is None or not hasattr(reader, "file_digest"):
                continue
            expected = table.files.get(os.path.basename(shard))
            if expected is not None:
                found = reader.file_digest(table.algorithm)
                if found != expected.lower():
                    raise DigestMismatchError(table.algorithm, expected, found, path=shard)
        return sorted(missing)

    def close(self) -> None:
        """Close every shard opened; arrays already handed out stay valid."""
        readers, self._readers = self._readers, {}
        self._present.clear()
        for reader in readers.values():
            reader.close()

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        shard = self._files.weight_map.get(name)
        return shard in self._wanted and name in self._wanted[shard] and name in self._held(shard)

    def __len__(self) -> int:
        return len(self.names())

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __enter__(self) -> SetReader:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<SetReader {self.path!r}: {len(self._wanted)} shards, {self.format.name}>"

    # -- shards --------------------------------------------------------------------------------

    def _reader_of(self, name: str) -> TensorReader:
        """The open reader of the shard holding `name`."""
        shard = self.shard_of(name)
        if name not in self._held(shard):
            raise TensorNotFoundError(name, path=self.path, known=len(self._files.weight_map))
        return self._readers[shard]

    def _held(self, shard: str) -> set[str]:
        """The selected tensors `shard` holds, opening it first if it is not open."""
        self._shard(shard)
        return self._present[shard]

    def _shard(self, shard: str) -> TensorReader:
        """`shard`'s reader, opened and checked against the index the first time."""
        reader = self._readers.get(shard)
        if reader is None:
            files = self._files
            index_path = None if files.index is None else files.index.path
            try:
                reader = _open_shard(files.fmt, shard, files.options, index_path)
            except LfsPointerError as err:
                raise self._every_pointer(err) from err
            try:
                self._present[shard] = self._check(shard, reader) & self._wanted[shard]
            except BaseException:
                reader.close()
                raise
            self._readers[shard] = reader
            if not self._digests_on:
                _set_checking(reader, False)
            if shard in self._planned:
                _plan_shard(reader, self._planned[shard])
        return reader

    def _every_pointer(self, err: LfsPointerError) -> LfsPointerError:
        """`err`, for one shard that is a git-lfs pointer, naming every other shard that is one
        too; the shards are probed once per reader, however many fail to open."""
        if self._pointers is None:
            shards = sorted(set(self._files.weight_map.values()))
            self._pointers = _pointer_shards(shards, self._files.options.get("storage_options"))
        others = tuple(shard for shard in self._pointers if shard != err.path)
        return LfsPointerError(err.oid, err.size, path=err.path, others=others)

    def _check(self, shard: str, reader: TensorReader) -> set[str]:
        """The tensors the index assigns to `shard` that it holds; records the rest."""
        files = self._files
        index = files.index
        if index is not None and index.set_id is not None:
            found = reader.metadata().get(SET_ID_KEY)
            if found != index.set_id:
                carried = "no set id" if found is None else f"set id {str(found)[:40]!r}"
                raise SetMismatchError(
                    f"shard {os.path.basename(shard)} carries {carried}, the index "
                    f"{index.set_id!r}: the directory mixes two saves; save the set again",
                    path=index.path,
                    shard=shard,
                )
        held = set(reader.names())
        assigned = self._assigned[shard]
        missing = sorted(assigned - held)
        unlisted = sorted(name for name in held if name not in files.weight_map)
        if missing:
            self.missing_from_shards[shard] = missing
            _warn_tensors(shard, "lacks", missing, "the index assigns to it; they load as missing")
        if unlisted:
            self.unlisted[shard] = unlisted
            _warn_tensors(shard, "holds", unlisted, "the index does not list; never loaded")
        return assigned & held


def agreed_metadata(shards: Sequence[Mapping[str, object]]) -> dict[str, str]:
    """The pairs every one of `shards`' metadata holds with one value, as strings; none when
    there is no shard."""
    if not shards:
        return {}
    first, *rest = shards
    agreed = {key: str(value) for key, value in first.items()}
    for pairs in rest:
        agreed = {k: v for k, v in agreed.items() if k in pairs and str(pairs[k]) == v}
    return agreed


def _plan_shard(reader: TensorReader, names: list[str]) -> None:
    plan = getattr(reader, "plan_reads", None)
    if plan is not None:
        plan(names)


def _set_checking(reader: TensorReader, enabled: bool) -> None:
    """Digest checking on or off for a shard's reader (a format without digests has none)."""
    switch = getattr(reader, "check_digests", None)
    if switch is not None:
        switch(enabled)


def _open_shard(
    fmt: ContainerFormat, path: str, options: dict[str, Any], index_path: str | None
) -> TensorReader:
    """`fmt`'s reader on shard `path`; a shard of another format is named as such."""
    try:
        return fmt.open_file(path, **options)
    except LfsPointerError:
        raise
    except Exception:
        _refuse_foreign_shard(fmt, path, index_path, options.get("storage_options"))
        raise


def _pointer_shards(
    shards: Iterable[str], storage_options: Mapping[str, Any] | None
) -> tuple[str, ...]:
    """The shards among `shards` that are git-lfs pointers: a clone without ``git lfs``
    leaves every shard so, and the user should hear of all of them at once."""
    from weightstore.base._cause import LFS_POINTER_PREFIX, MAX_LFS_POINTER_SIZE
    from weightstore.formats import read_probe

    found = []
    for shard in shards:
        try:
            head, size = read_probe(shard, storage_options)
        except (OSError, WeightstoreError):
            continue  # its own open says what is wrong with it
        if head.startswith(LFS_POINTER_PREFIX) and size < MAX_LFS_POINTER_SIZE:
            found.append(shard)
    return tuple(found)


def _refuse_foreign_shard(
    fmt: ContainerFormat,
    path: str,
    index_path: str | None,
    storage_options: Mapping[str, Any] | None = None,
) -> None:
    from weightstore.formats import FORMATS, read_probe

    try:
        head, size = read_probe(path, storage_options)
    except OSError:
        return  # the reader's own error says what is wrong with the file
    if fmt.sniff(head, size):
        return
    for other in FORMATS:
        if other is not fmt and other.sniff(head, size):
            where = f"the set's shards ({index_path})" if index_path else "the set's file"
            raise UnsupportedFormatError(
                f"is a {other.title} file, but {where} should be {fmt.title}",
                path=path,
                found=other.name,
            )


def _warn_about(path: str, ignored: list[tuple[str, str]]) -> None:
    """One `SetWarning` listing the files a load leaves out that look like part of the set."""
    if not ignored:
        return
    shown = "; ".join(
        f"{os.path.basename(file)} ({why})" for file, why in ignored[:_LISTED_IN_WARNING]
    )
    more = len(ignored) - _LISTED_IN_WARNING
    shown += f"; and {more:,} more" if more > 0 else ""
    warnings.warn(f"{path}: reading the set, ignoring {shown}", SetWarning, stacklevel=3)


def _warn_tensors(shard: str, verb: str, names: list[str], what: str) -> None:
    from weightstore.base._render import bounded_repr

    shown = ", ".join(bounded_repr(n, limit=80) for n in names[:_LISTED_IN_WARNING])
    more = len(names) - _LISTED_IN_WARNING
    shown += f" and {more:,} more" if more > 0 else ""
    warnings.warn(f"{shard}: shard {verb} {shown}, which {what}", SetWarning, stacklevel=5)
