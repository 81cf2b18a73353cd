"""Writing sharded checkpoint sets, and the commit protocol that makes a re-save old or new.

A set is a directory of single-file containers (shards) and an index naming which shard holds
each tensor (`_layout` says how they are named). The index is the set's only commit point: a
reader loads what the index names, so a save over an existing set can be killed at any instant
and the directory still loads as the complete old set or the complete new one, never a mix.
A save goes:

1. **Plan** (`plan_set`). Remove leftovers of killed saves: scratch files and shards of this
   layout and variant that the committed index does not name (never any other file). Pick a
   fresh set id and shard names that no file in the directory has: the plain Hugging Face
   names where they are free, else names tagged with the set id, so no new shard ever
   overwrites a file the committed index names.
2. **Write the shards** (`write_shard`), each atomically (`weightstore.io._atomic.write_atomic`:
   scratch file, fsync, link), pulling one tensor at a time; each carries the set id in its
   metadata so a reader can tell a shard of another save from one of this.
3. **Commit** (`commit_set`): replace the index by an atomic rename (fsynced with its
   directory when durable). From this instant readers see the new set.
4. **Clean up**: remove what the new index superseded: shards of this layout and variant it
   does not name, the old single file, scratch files of killed saves.

When everything fits in one shard the set is the single file (``model.safetensors``) and has no
index, as huggingface_hub saves it. Its atomic rename is then the commit; the old index, which
readers prefer while it exists, is removed after it (and fsynced away), and old shards last.

Shard planning follows huggingface_hub's `split_state_dict_into_shards_factory` exactly, so
the same tensors and `max_shard_size` give the same weight map: tensors in the order given, a
new shard when the next tensor would take the current one past the limit, and a tensor over the
limit alone in a shard of its own (placed, as there, before the shard being filled). Sizes come
from dtype and shape: planning reads no data.

The directory may be a URL (``s3://bucket/prefix``): a folder of objects on a store with no
rename. The steps are the same, with a completed upload where the disk has a rename
(`weightstore.io._remote_write`: an object appears whole or not at all), one listing where the
disk is asked name by name, deletes in bulk, and at the plan the incomplete uploads of killed
saves aborted as their scratch files are removed on disk.

One writer per set at a time: two saves racing into one directory can remove each other's
uncommitted shards. A reader holding the old index open while a save cleans up may find its
shards gone; it then fails loudly (missing file), never with a mix.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import posixpath
import re
import secrets
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO, Final

from weightstore.base._record import ValueRecord
from weightstore.errors import (
    DestinationExistsError,
    EntryError,
    InvalidOptionError,
    SaveFailedError,
)
from weightstore.io import is_url

# `_remove_stale_scratch`: the liveness test (dead pid, no lock) `write_atomic` itself uses on
# its destination's scratch files, applied here to every file of the set.
from weightstore.io._atomic import _remove_stale_scratch, write_all, write_atomic
from weightstore.sets._index import SET_ID_KEY  # in the index's "metadata" and every shard's
from weightstore.sets._layout import SetLayout, parse_shard_name

if TYPE_CHECKING:
    from weightstore.container._format import ContainerFormat
    from weightstore.container._writer import ContainerWriter
    from weightstore.entry import TensorEntry
    from weightstore.io._digest import Hasher

__all__ = [
    "DEFAULT_MAX_SHARD_SIZE",
    "TOTAL_SIZE_KEY",
    "SetPlan",
    "commit_set",
    "plan_set",
    "plan_shards",
    "write_set",
    "write_shard",
]

TOTAL_SIZE_KEY: Final = "total_size"  # bytes of tensor data; HF's key, read by its tools
DEFAULT_MAX_SHARD_SIZE: Final = 5 * 10**9  # bytes: huggingface_hub's "5GB"
SET_ID_HEX_LEN: Final = 32  # 128 random bits: two saves never share an id
TAG_HEX_LEN: Final = 8  # the set id's first hex digits, in tagged shard names
# The committed index is read only to learn which names it holds; an index past this is not
# one we or HF tools wrote (huggingface_hub refuses indexes over 10 MB), so its names are
# treated as unknown and nothing it might name is removed.
MAX_COMMITTED_INDEX_SIZE: Final = 64 * 2**20  # bytes
_RESERVED_KEYS: Final = frozenset({SET_ID_KEY, TOTAL_SIZE_KEY})  # describe the set being written
_SCRATCH_NAME: Final = re.compile(r"(?P<base>.+)\.\d+-\d+\.tmp")  # `_atomic`'s scratch names


class SetPlan(ValueRecord):
    """Where one save's files go: decided before a byte is written, so every process of a
    distributed save can write its shards under the same names and set id.

    Attributes:
        directory: the set's directory.
        layout: how the format's sets are named.
        variant: the variant (``"fp16"``) or None.
        set_id: 32 lowercase hex digits, written into the index and every shard.
        shard_names: file names in the directory, shard 1 first; the single file's name alone
            when the set is unsharded (`single`).

    Records refuse attribute assignment, so they do not unpickle by default; `__reduce__`
    rebuilds a plan (and its layout) from their fields, so a plan pickles to other processes
    (``torch.distributed.broadcast_object_list``) as is.
    """

    directory: str
    layout: SetLayout
    variant: str | None
    set_id: str
    shard_names: tuple[str, ...]

    def __init__(
        self,
        directory: str,
        layout: SetLayout,
        variant: str | None,
        set_id: str,
        shard_names: tuple[str, ...],
    ) -> None:
        super().__init__(directory, layout, variant, set_id, tuple(shard_names))

    def __reduce__(self) -> tuple[Callable[..., SetPlan], tuple[object, ...]]:
        return (  # the layout pickles itself (`SetLayout.__reduce__`)
            _rebuilt_plan,
            (self.directory, self.layout, self.variant, self.set_id, self.shard_names),
        )

    @property
    def single(self) -> bool:
        """Whether the set is one unsharded file with no index."""
        return self.shard_names == (self.layout.single_name(self.variant),)

    @property
    def index_path(self) -> str:
        """Where the index goes (and, for an unsharded set, the old index that is removed)."""
        return _join(self.directory, self.layout.index_name(self.variant))

    def shard_path(self, number: int) -> str:
        """The path of shard `number` (1-based)."""
        return _join(self.directory, self.shard_names[number - 1])


def _rebuilt_plan(
    directory: str,
    layout: SetLayout,
    variant: str | None,
    set_id: str,
    shard_names: tuple[str, ...],
) -> SetPlan:
    """A `SetPlan` from what its `__reduce__` sent."""
    return SetPlan(directory, layout, variant, set_id, shard_names)


def plan_shards(entries: Sequence[TensorEntry], max_shard_size: int) -> list[list[TensorEntry]]:
    """Entries grouped into shards as huggingface_hub groups a state dict; at least one group
    (empty for no entries), sizes from each entry's declared `nbytes`.

    Raises:
        InvalidOptionError: `max_shard_size` is not a positive number of bytes.
    """
    if isinstance(max_shard_size, bool) or not isinstance(max_shard_size, int):
        raise InvalidOptionError("max_shard_size must be an int of bytes", option="max_shard_size")
    if max_shard_size <= 0:
        raise InvalidOptionError(
            f"max_shard_size is {max_shard_size:,} bytes, expected at least 1",
            option="max_shard_size",
        )
    shards: list[list[TensorEntry]] = []
    current: list[TensorEntry] = []
    current_size = 0
    for entry in entries:
        if entry.nbytes > max_shard_size:
            shards.append([entry])
            continue
        if current_size + entry.nbytes > max_shard_size:
            shards.append(current)
            current, current_size = [], 0
        current.append(entry)
        current_size += entry.nbytes
    if current or not shards:
        shards.append(current)
    return shards


def plan_set(
    directory: str | os.PathLike[str],
    layout: SetLayout,
    count: int,
    *,
    variant: str | None = None,
    overwrite: bool,
    durable: bool = True,
    storage_options: Mapping[str, Any] | None = None,
) -> SetPlan:
    """Prepare a save of `count` shards into `directory` (created if missing): remove leftovers
    of killed saves, then pick a fresh set id and names no file in the directory has.

    Args:
        directory: the set's directory, or a URL (``s3://bucket/prefix``): a folder of objects.
        layout: the format's naming (`weightstore.sets.layout_for`).
        count: shards to write; 1 makes the set the single unsharded file.
        variant: a variant such as ``"fp16"`` (letters, digits, underscores).
        overwrite: replace an existing set or single file of this layout and variant.
        durable: fsync the parent directory when this creates `directory`.
        storage_options: for a URL, passed to its filesystem (``{"endpoint_url": ...}``).

    Raises:
        DestinationExistsError: a committed index or single file is there and `overwrite` is
            false.
        SaveFailedError: the directory cannot be created or listed (a file is in its place).
        InvalidOptionError: `count` below 1 or a malformed variant.
    """
    if count < 1:
        raise InvalidOptionError(f"a set has at least one shard, not {count}")
    try:
        single, index = layout.single_name(variant), layout.index_name(variant)
    except ValueError as err:
        raise InvalidOptionError(str(err), option="variant") from None
    path = os.fspath(directory)
    if is_url(path):  # object stores have no directories: a prefix exists with its objects
        _prepare_folder(path, layout, variant, storage_options)
    else:
        _make_directory(path, durable)
    committed = _committed_names(_join(path, index), storage_options)
    if not overwrite:
        for name in (index, single):
            if _exists(_join(path, name), storage_options):
                raise DestinationExistsError(_join(path, name))
    left = _remove_unnamed(
        path, layout, variant, committed, remove_single=False, storage_options=storage_options
    )
    reserved = frozenset() if committed is None else committed
    while True:  # a second pass only when a tagged name is taken: 1 in 4 billion
        set_id = secrets.token_hex(SET_ID_HEX_LEN // 2)
        names = _fresh_names(path, layout, count, variant, set_id, reserved, left, storage_options)
        if names is not None:
            return SetPlan(path, layout, variant, set_id, names)


def write_shard(
    plan: SetPlan,
    number: int,
    entries: Sequence[TensorEntry],
    fmt: ContainerFormat,
    *,
    metadata: Mapping[str, str],
    durable: bool,
    storage_options: Mapping[str, Any] | None = None,
) -> dict[str, int]:
    """Write shard `number` (1-based) of `plan` atomically, one tensor pulled at a time.

    Its metadata is `metadata` plus the set id (a ``total_size`` or set id in `metadata`
    describes another set and is dropped). A shard's name is new to the directory (`plan_set`),
    so it is never replaced; the single file of an unsharded set replaces the old one
    atomically, which is that set's commit. `storage_options` are as for `plan_set`.

    Returns:
        Bytes of each tensor written, by name.

    Raises:
        EntryError, DTypeError: an entry the format cannot hold, before a byte is written.
        DestinationExistsError: the shard's name appeared since `plan_set` (another save).
        SaveFailedError: the disk is full, ...; no part of the shard is left.
    """
    writer = _shard_writer(plan, entries, fmt, metadata)
    _write_planned(plan, number, writer, durable, storage_options)
    return {entry.name: entry.nbytes for entry in entries}


def commit_set(
    plan: SetPlan,
    weight_map: Mapping[str, str],
    metadata: Mapping[str, str],
    *,
    total_size: int,
    durable: bool,
    storage_options: Mapping[str, Any] | None = None,
) -> str:
    """Commit the shards of `plan`: replace the index by an atomic rename (at a URL, by
    completing its upload), then remove what it superseded. For an unsharded plan (whose
    single file, written last, is already the commit) remove the old index, then old shards.

    Args:
        plan: the plan the shards were written under, all of them written.
        weight_map: tensor name -> shard file name (one of `plan.shard_names`).
        metadata: user pairs for the index's ``"metadata"``, beside ``total_size`` and the set
            id (those two keys in `metadata` describe another set and are dropped).
        total_size: bytes of tensor data in the set.
        durable: fsync the index and directory before anything is removed.
        storage_options: as for `plan_set`.

    Returns:
        The index path, or the single file's path for an unsharded set.

    Raises:
        EntryError: `weight_map` names a file that is not one of the plan's shards.
        SaveFailedError: the index cannot be written (or, unsharded, the old index cannot be
            removed); the old set is then still the one that loads.
    """
    directory = plan.directory
    unknown = set(weight_map.values()).difference(plan.shard_names)
    if unknown:
        raise EntryError(f"the weight map names {sorted(unknown)[0]!r}, not a shard of this save")
    layout, variant, options = plan.layout, plan.variant, storage_options
    if plan.single:
        _remove_old_index(plan.index_path, durable, options)
        _remove_unnamed(
            directory, layout, variant, frozenset(), remove_single=False, storage_options=options
        )
        return plan.shard_path(1)
    index = _index_json(plan, weight_map, metadata, total_size)
    write_atomic(
        plan.index_path,
        _write_bytes(index),
        overwrite=True,
        durable=durable,
        storage_options=options,
    )
    named = frozenset(plan.shard_names)
    _remove_unnamed(directory, layout, variant, named, remove_single=True, storage_options=options)
    return plan.index_path


def write_set(
    directory: str | os.PathLike[str],
    layout: SetLayout,
    fmt: ContainerFormat,
    entries: Iterable[TensorEntry],
    *,
    max_shard_size: int = DEFAULT_MAX_SHARD_SIZE,
    metadata: Mapping[str, str],
    overwrite: bool,
    durable: bool,
    variant: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    digests: str | None = None,
    index_tensor_digests: bool = False,
) -> str:
    """Save `entries` as a set in `directory`, in one process: plan, write each shard, commit.

    Every shard's writer is built before the first is written, so a bad name or dtype is
    refused with nothing written; a save that fails after that removes the shards it wrote.

    Args:
        directory: the set's directory, created if missing, or a URL (`plan_set`).
        layout: the format's naming (`weightstore.sets.layout_for`).
        fmt: the shards' container format (its `writer`).
        entries: the tensors, each's data pulled once, one at a time.
        max_shard_size: bytes of tensor data per shard (`weightstore.sets.parse_size`).
        metadata: string pairs for the index and every shard.
        overwrite: replace an existing set or single file.
        durable: fsync shards, index and directory (`weightstore.io._atomic`).
        variant: a variant such as ``"fp16"``.
        storage_options: for a URL, passed to its filesystem (``{"endpoint_url": ...}``).
        digests: an algorithm (docs/integrity.md): every shard carries its tensors' digests,
            and the index every shard file's, under ``weightstore.digests``.
        index_tensor_digests: with `digests`, the index lists every tensor's digest too.

    Returns:
        The index path, or the single file's when everything fits in one shard.

    Raises:
        DestinationExistsError: a set is there and `overwrite` is false.
        EntryError: two entries share a name, or an entry the format cannot hold.

    Example:
        >>> from weightstore import safetensors  # doctest: +SKIP
        >>> write_set("ckpt", layout_for("safetensors"), safetensors.FORMAT, entries,
        ...           max_shard_size=parse_size("5GB"), metadata={}, overwrite=True,
        ...           durable=True)
        'ckpt/model.safetensors.index.json'
    """
    given = list(entries)
    _refuse_duplicates(given)
    shards = plan_shards(given, max_shard_size)
    options = storage_options
    plan = plan_set(
        directory,
        layout,
        len(shards),
        variant=variant,
        overwrite=overwrite,
        durable=durable,
        storage_options=options,
    )
    writers = [_shard_writer(plan, shard, fmt, metadata) for shard in shards]
    written: list[str] = []
    signed = _SetDigests(digests) if digests is not None else None
    try:
        for number, writer in enumerate(writers, 1):
            if signed is None:
                _write_planned(plan, number, writer, durable, options)
            else:
                signed.write_shard(
                    plan, number, shards[number - 1], fmt, metadata, durable, options
                )
            written.append(plan.shard_names[number - 1])
        weight_map = {e.name: plan.shard_names[n] for n, shard in enumerate(shards) for e in shard}
        total_size = sum(entry.nbytes for entry in given)
        index_metadata = metadata
        if signed is not None and not plan.single:  # in the index before its commit
            index_metadata = {**metadata, **signed.index_pairs(index_tensor_digests)}
        return commit_set(
            plan,
            weight_map,
            index_metadata,
            total_size=total_size,
            durable=durable,
            storage_options=options,
        )
    except BaseException:
        # Uncommitted shards go. A single file written is already committed, and so are shards
        # the index names (its directory's fsync can fail after the rename).
        committed = _committed_names(plan.index_path, options) or frozenset()
        if not plan.single and committed.isdisjoint(plan.shard_names):
            _remove_names(plan.directory, written, options)
        raise


# -- planning -------------------------------------------------------------------------------------


def _make_directory(path: str, durable: bool) -> None:
    if os.path.isdir(path):
        return
    if os.path.lexists(path):
        raise SaveFailedError(path, errno.ENOTDIR, "a file is where the set's directory goes")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise SaveFailedError(path, err.errno, err.strerror) from err
    if durable:
        _fsync_directory(os.path.dirname(os.path.abspath(path)))


def _join(directory: str, name: str) -> str:
    """The path of `name` in `directory`; URLs join with ``/`` whatever the platform."""
    return posixpath.join(directory, name) if is_url(directory) else os.path.join(directory, name)


def _exists(path: str, storage_options: Mapping[str, Any] | None) -> bool:
    """Whether a file (or a link, or an object) is at `path`."""
    if is_url(path):
        from weightstore.io._remote_write import exists

        return exists(path, storage_options)
    return os.path.lexists(path)


def _fresh_names(
    directory: str,
    layout: SetLayout,
    count: int,
    variant: str | None,
    set_id: str,
    reserved: frozenset[str],
    present: frozenset[str] | None,
    storage_options: Mapping[str, Any] | None,
) -> tuple[str, ...] | None:
    """Plain names if no file has them, else names tagged with the set id, else None. A file
    is looked for in `present` (a folder of objects, listed once) or else asked for by name.

    An unsharded set is its single file, which it replaces atomically; only when the committed
    index itself names that file (a foreign index may) does the set become one tagged shard.
    """
    single = layout.single_name(variant)
    if count == 1 and single not in reserved:
        return (single,)
    tag = set_id[:TAG_HEX_LEN]
    for chosen in (None, tag):
        names = tuple(layout.shard_name(n, count, variant, chosen) for n in range(1, count + 1))
        if present is not None:
            taken = not present.isdisjoint(names)
        else:
            taken = any(_exists(_join(directory, name), storage_options) for name in names)
        if not taken:
            return names
    return None


def _committed_names(
    index_path: str, storage_options: Mapping[str, Any] | None
) -> frozenset[str] | None:
    """The file names the committed index at `index_path` holds: empty when there is no index,
    None when it cannot be read as an index (then nothing it might name is removed before the
    save, and the new names avoid every file in the directory anyway)."""
    try:
        if is_url(index_path):
            from weightstore.io._remote_write import read_head

            head = read_head(index_path, MAX_COMMITTED_INDEX_SIZE + 1, storage_options)
            if head is None:
                return frozenset()
            text = head
        else:
            with open(index_path, "rb") as file:
                text = file.read(MAX_COMMITTED_INDEX_SIZE + 1)
    except FileNotFoundError:
        return frozenset()
    except OSError:
        return None
    if len(text) > MAX_COMMITTED_INDEX_SIZE:
        return None
    try:
        index = json.loads(text)
    except (ValueError, RecursionError):
        return None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        return None
    return frozenset(name for name in weight_map.values() if isinstance(name, str))


def _refuse_duplicates(entries: Sequence[TensorEntry]) -> None:
    seen: set[str] = set()
    for entry in entries:
        if entry.name in seen:
            raise EntryError("two tensors have this name; a set holds each once", tensor=entry.name)
        seen.add(entry.name)


# -- writing --------------------------------------------------------------------------------------


def _shard_writer(
    plan: SetPlan, entries: Sequence[TensorEntry], fmt: ContainerFormat, metadata: Mapping[str, str]
) -> ContainerWriter:
    if fmt.writer is None:
        raise InvalidOptionError(f"{fmt.title} files cannot be written", format=fmt.name)
    pairs = {key: value for key, value in metadata.items() if key not in _RESERVED_KEYS}
    pairs[SET_ID_KEY] = plan.set_id
    writer: ContainerWriter = fmt.writer(entries, pairs)
    return writer


class _SetDigests:
    """A digest save's record of a set: each shard written with its tensors' digests in its
    metadata and hashed whole as its bytes go out; then the index's pairs."""

    def __init__(self, algorithm: str) -> None:
        self.algorithm = algorithm
        self.files: dict[str, str] = {}
        self.tensors: dict[str, str] = {}

    def write_shard(
        self,
        plan: SetPlan,
        number: int,
        entries: Sequence[TensorEntry],
        fmt: ContainerFormat,
        metadata: Mapping[str, str],
        durable: bool,
        storage_options: Mapping[str, Any] | None,
    ) -> None:
        from weightstore.io._digest import METADATA_KEY, encode_digests, new_hasher, tensor_digests

        digests = tensor_digests(self.algorithm, entries)
        self.tensors.update(digests)
        pairs = {**metadata, METADATA_KEY: encode_digests(self.algorithm, digests)}
        writer = _shard_writer(plan, entries, fmt, pairs)
        hasher = new_hasher(self.algorithm)
        _write_planned(plan, number, writer, durable, storage_options, hasher)
        self.files[plan.shard_names[number - 1]] = hasher.hexdigest()

    def index_pairs(self, with_tensors: bool) -> dict[str, str]:
        from weightstore.io._digest import METADATA_KEY, encode_digests

        tensors = dict(sorted(self.tensors.items())) if with_tensors else None
        return {METADATA_KEY: encode_digests(self.algorithm, tensors, self.files)}


def _write_planned(
    plan: SetPlan,
    number: int,
    writer: ContainerWriter,
    durable: bool,
    storage_options: Mapping[str, Any] | None,
    hasher: Hasher | None = None,
) -> None:
    # Shards never replace a file (their names are fresh); the single file replaces the old one.
    write = writer.write_to if hasher is None else functools.partial(writer.write_to, hasher=hasher)
    write_atomic(
        plan.shard_path(number),
        write,
        overwrite=plan.single,
        durable=durable,
        storage_options=storage_options,
    )


def _index_json(
    plan: SetPlan, weight_map: Mapping[str, str], metadata: Mapping[str, str], total_size: int
) -> bytes:
    """The index as huggingface_hub writes it (2-space indent), weight map sorted by name."""
    user = {key: value for key, value in metadata.items() if key not in _RESERVED_KEYS}
    header: dict[str, Any] = {TOTAL_SIZE_KEY: total_size, **user, SET_ID_KEY: plan.set_id}
    index = {"metadata": header, "weight_map": dict(sorted(weight_map.items()))}
    return (json.dumps(index, indent=2) + "\n").encode("utf-8")


def _write_bytes(data: bytes) -> Callable[[BinaryIO], None]:
    def write(file: BinaryIO) -> None:
        write_all(file, memoryview(data))

    return write


# -- cleaning up ----------------------------------------------------------------------------------


def _remove_old_index(
    index_path: str, durable: bool, storage_options: Mapping[str, Any] | None
) -> None:
    """Remove the index an unsharded save supersedes; made durable before any old shard goes,
    so no crash leaves an index naming shards that are gone."""
    if is_url(index_path):  # a deleted object is gone for every reader at once
        from weightstore.io._remote_write import delete

        delete(index_path, storage_options)
        return
    try:
        os.unlink(index_path)
    except FileNotFoundError:
        return
    except OSError as err:
        raise SaveFailedError(index_path, err.errno, err.strerror) from err
    if durable:
        _fsync_directory(os.path.dirname(index_path))


def _remove_unnamed(
    directory: str,
    layout: SetLayout,
    variant: str | None,
    named: frozenset[str] | None,
    *,
    remove_single: bool,
    storage_options: Mapping[str, Any] | None = None,
) -> frozenset[str] | None:
    """Remove this layout's and variant's shards that `named` lacks (none when `named` is None:
    the committed names are unknown), the single file when `remove_single`, and the scratch
    files killed saves of any of the set's files left. Housekeeping: a file that cannot be
    removed stays for the next save.

    Returns:
        For a folder of objects, the names left in it, so no name need be asked for again;
        None for a local directory (asking the disk costs nothing) or an unlistable folder.
    """
    if is_url(directory):
        return _remove_unnamed_objects(
            directory, layout, variant, named, remove_single, storage_options
        )
    try:
        listing = os.listdir(directory)
    except OSError:
        return None
    scratch_bases: set[str] = set()
    for name in listing:
        if _SCRATCH_NAME.fullmatch(name) is not None:
            base = _scratch_base(name, layout, variant)
            if base is not None:
                scratch_bases.add(base)
        elif _superseded(name, layout, variant, named, remove_single):
            _remove_file(os.path.join(directory, name))
    for base in sorted(scratch_bases):  # only files of dead, unlocked writers (`_atomic`)
        _remove_stale_scratch(os.path.join(directory, base))
    return None


def _remove_unnamed_objects(
    directory: str,
    layout: SetLayout,
    variant: str | None,
    named: frozenset[str] | None,
    remove_single: bool,
    storage_options: Mapping[str, Any] | None,
) -> frozenset[str] | None:
    """`_remove_unnamed` in a folder of objects, in one listing and one bulk delete; the names
    left. There is no writer to ask whether it is alive, and no need: one writer per set, so a
    scratch object of the set's files (left where uploads cannot be deferred) is a killed
    save's."""
    from weightstore.io._remote_write import list_names, remove

    listing = list_names(directory, storage_options)
    if listing is None:
        return None
    doomed = [
        name
        for name in listing
        if _scratch_base(name, layout, variant) is not None
        or _superseded(name, layout, variant, named, remove_single)
    ]
    remove(directory, doomed, storage_options)
    return frozenset(listing).difference(doomed)


def _scratch_base(name: str, layout: SetLayout, variant: str | None) -> str | None:
    """The set file the scratch file `name` was to become; None when `name` is no scratch
    file of one of this set's files."""
    scratch = _SCRATCH_NAME.fullmatch(name)
    if scratch is None:
        return None
    base = scratch["base"]
    return base if _is_set_file(layout, variant, base) else None


def _superseded(
    name: str,
    layout: SetLayout,
    variant: str | None,
    named: frozenset[str] | None,
    remove_single: bool,
) -> bool:
    """Whether `name` is a shard of this set that `named` lacks, or its superseded single file."""
    stale_shard = named is not None and name not in named and _is_own_shard(name, layout, variant)
    return stale_shard or (remove_single and name == layout.single_name(variant))


def _is_set_file(layout: SetLayout, variant: str | None, name: str) -> bool:
    """Whether `name` is the set's single file, its index or one of its shards."""
    own = (layout.single_name(variant), layout.index_name(variant))
    return name in own or _is_own_shard(name, layout, variant)


def _prepare_folder(
    directory: str,
    layout: SetLayout,
    variant: str | None,
    storage_options: Mapping[str, Any] | None,
) -> None:
    """Before planning a save into a folder of objects: forget this process's cached view of
    it (another process may have saved since), and abort the incomplete uploads that killed
    saves of this set's files left (S3: invisible to readers, but stored until aborted)."""
    from weightstore.io._remote_write import abort_uploads, forget_cached

    forget_cached(directory, storage_options)
    abort_uploads(directory, functools.partial(_is_set_file, layout, variant), storage_options)


def _remove_names(
    directory: str, names: Sequence[str], storage_options: Mapping[str, Any] | None
) -> None:
    """Remove the files `names` in `directory`, if they can be; housekeeping."""
    if is_url(directory):
        from weightstore.io._remote_write import remove

        remove(directory, names, storage_options)
        return
    for name in names:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, name))


def _is_own_shard(name: str, layout: SetLayout, variant: str | None) -> bool:
    shard = parse_shard_name(name)
    return (
        shard is not None
        and shard.stem == layout.stem
        and shard.variant == variant
        and shard.extension == layout.extension
    )


def _remove_file(path: str) -> None:
    """Unlink `path` if it is a file or a link (a directory named like a shard is left)."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            return
        os.unlink(path)
    except OSError:
        pass


def _fsync_directory(path: str) -> None:
    if os.name != "posix":  # Windows cannot open a directory for fsync
        return
    fd = os.open(path or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
