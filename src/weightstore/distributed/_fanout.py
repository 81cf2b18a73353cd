"""Read once, share across ranks: a replicated tensor is read by one rank and broadcast to the
others over the process group, so a data-parallel load reads the file once in all, not once
per rank (`weightstore.distributed.load` with ``read_once=True``).

Each tensor every rank needs whole gets an owner, the ranks taking turns by bytes (the largest
tensors first, each to the rank holding the fewest bytes so far), so each reads about 1/world
of them. Its snapshot's load becomes a `SharedLoad`: the owner reads the tensor and broadcasts
its bytes; the others receive them into an array of their own. Collectives must run in the
same order everywhere, and a load reads its tensors in the model's order; so before anything
is read every rank states the shared tensors it will read (`agree`), and a rank whose list
differs from rank 0's (another model, a tensor failing a shape check on one rank only) stops
every rank with an error naming the first difference, never a hang.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.distributed as dist

from weightstore.errors import InvalidOptionError
from weightstore.snapshot import TensorSnapshot

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["SharedLoad", "agree", "check_group", "owners", "shared_snapshots"]


def check_group(rank: int, world_size: int) -> None:
    """Refuse ``read_once`` without a process group to broadcast over, or with a rank that is
    not the group's.

    Raises:
        InvalidOptionError: no default group, or another rank or world size than its.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise InvalidOptionError(
            "read_once shares tensors over the default process group: "
            "torch.distributed.init_process_group first",
            option="read_once",
        )
    place = (dist.get_rank(), dist.get_world_size())
    if place != (rank, world_size):
        raise InvalidOptionError(
            f"read_once: rank {rank} of {world_size} is not this process's place in the "
            f"process group (rank {place[0]} of {place[1]})",
            option="read_once",
        )


def owners(snapshots: Iterable[TensorSnapshot], world_size: int) -> dict[str, int]:
    """Each snapshot's name -> the rank that reads it: the largest first, each to the rank
    with the fewest bytes so far (ties to the lowest rank), the same on every rank."""
    ordered = sorted(snapshots, key=lambda s: (-s.nbytes, s.full_path))
    loads = [(0, rank) for rank in range(world_size)]
    chosen: dict[str, int] = {}
    for snapshot in ordered:
        held, rank = heapq.heappop(loads)
        chosen[snapshot.full_path] = rank
        heapq.heappush(loads, (held + snapshot.nbytes, rank))
    return chosen


class SharedLoad:
    """A snapshot load that one rank runs and broadcasts; the others receive its bytes."""

    __slots__ = ("_dtype", "_load", "_owner", "_rank", "_shape")

    def __init__(
        self,
        load: Callable[[], Any],
        owner: int,
        rank: int,
        dtype: np.dtype[Any],
        shape: tuple[int, ...],
    ) -> None:
        self._load, self._owner, self._rank = load, owner, rank
        self._dtype, self._shape = dtype, shape

    def __call__(self) -> np.ndarray[Any, Any]:
        if self._rank == self._owner:
            array = np.ascontiguousarray(self._load())
            if array.dtype != self._dtype or array.shape != self._shape:
                raise InvalidOptionError(
                    f"read {array.dtype}{list(array.shape)}, where the file says "
                    f"{self._dtype}{list(self._shape)}: cannot share it with the other ranks"
                )
        else:
            array = np.empty(self._shape, self._dtype)
        raw = array.reshape(-1).view(np.uint8)  # any dtype (bf16, fp8) as its bytes
        dist.broadcast(torch.from_numpy(raw), src=self._owner)
        return array


def shared_snapshots(
    snapshots: Sequence[TensorSnapshot], replicated: Collection[str], rank: int, world_size: int
) -> list[TensorSnapshot]:
    """`snapshots` with each `replicated` one NumPy can hold made a `SharedLoad` (its owner
    from `owners`); the others (split ones, quantized blocks and groups, a dtype without a
    NumPy form) as they are, each read by the ranks that need it."""
    shareable = [
        s
        for s in snapshots
        if s.full_path in replicated
        and s.dtype.numpy is not None
        and s.group is None
        and s.stored is None
    ]
    chosen = owners(shareable, world_size)
    shared: list[TensorSnapshot] = []
    for snapshot in snapshots:
        owner = chosen.get(snapshot.full_path)
        if owner is None:
            shared.append(snapshot)
            continue
        assert snapshot.dtype.numpy is not None  # `shareable` holds only these
        load = SharedLoad(snapshot.load, owner, rank, snapshot.dtype.numpy, snapshot.shape)
        shared.append(snapshot.replace(load=load))
    return shared


def agree(reads: Sequence[TensorSnapshot]) -> None:
    """Check, on every rank at once, that all ranks will read the same shared tensors in the
    same order, so the broadcasts pair up.

    Raises:
        InvalidOptionError: on every rank, when any rank's list differs, naming the first
            difference.
    """
    mine = [s.full_path for s in reads if isinstance(s.load, SharedLoad)]
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    first = everyone[0]
    for other_rank, theirs in enumerate(everyone):
        if theirs == first:
            continue
        position = next(
            (i for i, (a, b) in enumerate(zip(first, theirs, strict=False)) if a != b),
            min(len(first), len(theirs)),
        )
        ours = first[position] if position < len(first) else "nothing more"
        other = theirs[position] if position < len(theirs) else "nothing more"
        raise InvalidOptionError(
            f"read_once needs every rank to read the same replicated tensors in the same "
            f"order; at tensor {position} rank 0 reads {ours!r} and rank {other_rank} reads "
            f"{other!r} (do all ranks load the same model?)",
            option="read_once",
        )
