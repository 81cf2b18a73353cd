"""Saving a DCP checkpoint directory: a sharded set's commit protocol, for files many ranks
write (docs/sharded.md has the protocol; `_index` the layout).

A save over a committed checkpoint can be killed at any instant, on any rank, and the
directory still loads as the whole old checkpoint or the whole new one:

1. **Prepare** (every rank, `prepare_directory`): create the directory; refuse a committed
   checkpoint there unless the save overwrites.
2. **Plan** (the coordinator, `plan_rank_files`): remove leftovers of killed saves (rank files
   the committed index does not name, scratch files of writers that are gone), then pick a
   fresh set id and, for each rank that writes tensors, a file name no file in the directory
   has. No other rank has written yet: they wait for the plan.
3. **Write** (each rank, `write_rank_file`): its file, atomically and never over an existing
   one (`weightstore.io._atomic.write_atomic`), one tensor at a time.
4. **Commit** (the coordinator, `commit_index`): replace the index by an atomic rename, fsynced
   with its directory. From this instant readers see the new checkpoint.
5. **Clean up** (`remove_unnamed`): remove the rank files the new index does not name.

One writer per directory at a time, as for sets.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Sequence
from typing import BinaryIO, Final

from weightstore.dcp._index import (
    DCP_INDEX_NAME,
    RANK_FILE,
    rank_file_name,
    read_dcp_index,
)
from weightstore.errors import DestinationExistsError, WeightstoreError
from weightstore.io._atomic import _remove_stale_scratch, write_atomic

# The set writer's pieces, shared: creating the directory, writing bytes, removing a file,
# and the scratch-file names `write_atomic` uses.
from weightstore.sets._writer import (
    _SCRATCH_NAME,
    SET_ID_HEX_LEN,
    _make_directory,
    _remove_file,
    _write_bytes,
)

__all__ = [
    "commit_index",
    "committed_files",
    "plan_rank_files",
    "prepare_directory",
    "remove_unnamed",
    "write_rank_file",
]

_MAX_ATTEMPTS: Final = 16  # set ids tried before giving up: a clash is 1 in 4 billion each


def prepare_directory(directory: str, *, overwrite: bool, durable: bool) -> None:
    """Create `directory` if missing; refuse a committed checkpoint in it unless `overwrite`.

    Raises:
        DestinationExistsError: an index is there and `overwrite` is false.
        SaveFailedError: the directory cannot be created (a file is in its place).
    """
    _make_directory(directory, durable)
    index = os.path.join(directory, DCP_INDEX_NAME)
    if not overwrite and os.path.lexists(index):
        raise DestinationExistsError(index)


def committed_files(directory: str) -> frozenset[str] | None:
    """The rank files the committed index names: empty when there is no index, None when it
    cannot be read as one (then no file it might name is removed)."""
    index = os.path.join(directory, DCP_INDEX_NAME)
    if not os.path.lexists(index):
        return frozenset()
    try:
        return frozenset(read_dcp_index(index).files())
    except (WeightstoreError, OSError):
        return None


def plan_rank_files(
    directory: str, ranks: Sequence[int], extension: str
) -> tuple[str, dict[int, str]]:
    """Remove leftovers of killed saves, then choose this save's set id and file names.

    Args:
        directory: the checkpoint directory (`prepare_directory` made it).
        ranks: the ranks that write tensors.
        extension: the rank files' extension (``"bpk"``).

    Returns:
        The set id (32 lowercase hex digits) and each rank's file name, new to the directory.
    """
    remove_unnamed(directory, committed_files(directory))
    for _ in range(_MAX_ATTEMPTS):
        set_id = secrets.token_hex(SET_ID_HEX_LEN // 2)
        names = {rank: rank_file_name(rank, set_id, extension) for rank in ranks}
        if not any(os.path.lexists(os.path.join(directory, name)) for name in names.values()):
            return set_id, names
    raise DestinationExistsError(os.path.join(directory, rank_file_name(0, set_id, extension)))


def write_rank_file(
    directory: str, name: str, write: Callable[[BinaryIO], None], *, durable: bool
) -> str:
    """Write one rank's file atomically; it never replaces a file (its name is fresh).

    Raises:
        DestinationExistsError: the name appeared since it was planned (another save).
        SaveFailedError: the disk is full, ...; no part of the file is left.
    """
    return write_atomic(os.path.join(directory, name), write, overwrite=False, durable=durable)


def commit_index(directory: str, data: bytes, files: frozenset[str], *, durable: bool) -> str:
    """Replace the index by `data` in one rename (fsynced with the directory when durable),
    then remove the rank files other than `files` (those it names). Returns the index path.

    Raises:
        SaveFailedError: the index cannot be written; the old checkpoint still loads.
    """
    path = write_atomic(
        os.path.join(directory, DCP_INDEX_NAME), _write_bytes(data), overwrite=True, durable=durable
    )
    remove_unnamed(directory, files)
    return path


def remove_unnamed(directory: str, keep: frozenset[str] | None) -> None:
    """Remove rank files not in `keep` (none when `keep` is None: the committed names are
    unknown) and the scratch files that dead writers of rank files or the index left.
    Housekeeping: a file that cannot be removed stays for the next save."""
    try:
        listing = os.listdir(directory)
    except OSError:
        return
    scratch_bases: set[str] = set()
    for name in listing:
        scratch = _SCRATCH_NAME.fullmatch(name)
        if scratch is not None:
            base = scratch["base"]
            if base == DCP_INDEX_NAME or RANK_FILE.fullmatch(base):
                scratch_bases.add(base)
        elif keep is not None and name not in keep and RANK_FILE.fullmatch(name):
            _remove_file(os.path.join(directory, name))
    for base in sorted(scratch_bases):  # only files of dead, unlocked writers (`_atomic`)
        _remove_stale_scratch(os.path.join(directory, base))
