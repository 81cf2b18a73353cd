"""Rank-aware saves: a model sharded over processes saved into one set, each rank writing what
it owns, with the set's old-or-new guarantee (`weightstore.sets._writer`).

Every rank calls `save` with the same store and its part of the same model. Then:

1. Each rank lists the tensors as the store would save them (filter, to-adapter, remapping),
   whole: a DTensor's snapshot gathers it (``full_tensor``) when read. The lists must agree on
   every rank (names, dtypes, global shapes), which the first all-gather checks.
2. Tensors are given to owners, largest first, each to the rank owning the fewest bytes so far;
   each rank's tensors are cut into shards by `max_shard_size` as a single-process save cuts
   them. Rank 0 plans the set (fresh set id and shard names) and broadcasts the plan.
3. Each rank writes its shards, pulling one tensor at a time. Gathering a DTensor is a
   collective every rank must run, in the same order, so no rank reads its own tensors freely:
   all ranks walk one shared sequence of tensors (`Lockstep`), each running every tensor's
   read and keeping only its own. The sequence interleaves the ranks' pull orders (the order
   each shard's format writer lays tensors out, asked of the writer itself), so every rank
   writes while the others gather, and nothing is held but the tensor being written.
4. An all-gather of the weight maps is the barrier; rank 0 commits the index (the set's only
   commit point) and broadcasts the outcome. Any failure on any rank stops the commit on all:
   the old set stays the one that loads, and each rank removes the shards it wrote.

A model with no DTensors (replicated on every rank) saves the same way, without collectives:
its tensors are split among the ranks' shards.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn, Protocol

from weightstore.entry import TensorEntry
from weightstore.errors import (
    DestinationExistsError,
    InvalidOptionError,
    SaveFailedError,
    WeightstoreError,
)

if TYPE_CHECKING:
    import numpy as np

    from weightstore.container._format import ContainerFormat
    from weightstore.sets._writer import SetPlan
    from weightstore.snapshot import TensorSnapshot
    from weightstore.stores import Store

__all__ = ["Group", "Lockstep", "assign_owners", "interleave", "save"]

MAX_FAILURE_TEXT: Final = 2_000  # characters of one rank's error sent to the others


class Group(Protocol):
    """How the ranks of one save talk (`bridge._distributed.TorchGroup` over torch.distributed)."""

    rank: int
    world_size: int

    def broadcast(self, value: object, source: int = 0) -> object:
        """`value` from rank `source`, on every rank."""
        ...

    def all_gather(self, value: object) -> list[object]:
        """Every rank's `value` in rank order, on every rank; also a barrier."""
        ...


def save(store: Store, model: object, *, group: Group | None = None) -> str:
    """Save a model held by many processes into `store` as one sharded set; every rank calls
    it, with its part of the same model.

    DTensor parameters (``parallelize_module``, ``fully_shard``, ``distribute_tensor``) are
    saved whole, gathered one at a time; other tensors are taken to be the same on every rank
    (replicated) and saved once. Each rank writes the shards of the tensors it owns.

    Args:
        store: a writable store over the set's directory; its filter, to-adapter, remapping,
            metadata, ``overwrite``, ``durable``, ``max_shard_size`` and ``variant`` apply.
        model: this rank's model (a torch module, or a dict of NumPy arrays).
        group: how ranks communicate; the default process group by default.

    Returns:
        The index path (the single file's, when everything fits in one shard), on every rank.

    Raises:
        InvalidOptionError: the store cannot write sets, or the ranks' tensors differ in
            name, dtype or shape (a plain tensor holding a rank's slice cannot be saved whole;
            make it a DTensor).
        DestinationExistsError: a set is there and the store does not overwrite.
        SaveFailedError: a rank failed to write; no rank commits and the old set still loads.

    Example:
        >>> save(SafetensorsStore.from_file("ckpt").overwrite(), model)  # doctest: +SKIP
        'ckpt/model.safetensors.index.json'
    """
    if group is None:
        from weightstore.distributed._torch import TorchGroup

        group = TorchGroup()
    ranks, where = range(group.world_size), str(getattr(store, "_path", None) or "<memory>")
    mine = _attempt(lambda: _Job(store, model, group.world_size))
    shared = (mine[0], mine[1].signature if mine[0] else mine[1])
    _check_same(_settle(group.all_gather(shared), mine, ranks, where))
    job: _Job = mine[1]
    mine = _attempt(job.plan_set) if group.rank == 0 else (True, None)
    (plan,) = _settle([group.broadcast(mine, 0)], mine, [0], where)
    written: list[str] = []
    mine = _attempt(lambda: job.write(plan, group.rank, written))
    try:
        parts = _settle(group.all_gather(mine), mine, ranks, where)
    except BaseException:
        if not plan.single:  # uncommitted shards; a single file written is already committed
            for path in written:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        raise
    weight_map = {name: shard for part in parts for name, shard in part.items()}
    mine = _attempt(lambda: job.commit(plan, weight_map)) if group.rank == 0 else (True, None)
    (path,) = _settle([group.broadcast(mine, 0)], mine, [0], where)
    return str(path)


class _Job:
    """One rank's view of the save: its tensors, their owners and shards, and the store's."""

    def __init__(self, store: Store, model: object, world_size: int) -> None:
        from weightstore.sets import layout_for

        fmt = store.format
        if not fmt.writable:
            raise InvalidOptionError(f"{fmt.title} files cannot be written", format=fmt.name)
        try:
            self.layout = layout_for(fmt.name)
        except KeyError:
            raise InvalidOptionError(f"{fmt.title} has no sharded sets", format=fmt.name) from None
        self.fmt, self.store = fmt, store
        snapshots, framework, gathers = _snapshots(store, model)
        self.metadata = _metadata(store, fmt, framework)
        self.signature = [(s.full_path, s.dtype.name, s.shape) for s in snapshots]
        owners = assign_owners([s.nbytes for s in snapshots], world_size)
        self.shards = _shards(snapshots, owners, world_size, fmt, _max_shard_size(store))
        order = interleave([[i for shard in mine for i in shard] for mine in self.shards])
        self.lockstep = Lockstep(snapshots, order, gathers)
        self.nbytes = [s.nbytes for s in snapshots]

    def plan_set(self) -> SetPlan:
        from weightstore.sets._writer import plan_set

        count = sum(len(mine) for mine in self.shards)
        options = self.store.options
        return plan_set(
            _directory(self.store), self.layout, count, variant=options.variant,
            overwrite=options.overwrite, durable=options.durable,
            storage_options=self.storage_options,
        )  # fmt: skip

    @property
    def storage_options(self) -> dict[str, Any] | None:
        """The store's filesystem options, for a set at a URL (None for a local one)."""
        return getattr(self.store, "_storage_options", None)

    def write(self, plan: SetPlan, rank: int, written: list[str]) -> dict[str, str]:
        """Write this rank's shards (every rank's reads run in step); the weight map part."""
        from weightstore.sets._writer import write_shard

        first = sum(len(mine) for mine in self.shards[:rank]) + 1
        durable = self.store.options.durable
        part: dict[str, str] = {}
        try:
            for number, shard in enumerate(self.shards[rank], first):
                entries = [self._entry(index) for index in shard]
                write_shard(
                    plan, number, entries, self.fmt, metadata=self.metadata, durable=durable,
                    storage_options=self.storage_options,
                )  # fmt: skip
                written.append(plan.shard_path(number))
                part.update(dict.fromkeys((e.name for e in entries), plan.shard_names[number - 1]))
        finally:
            self.lockstep.finish()  # the other ranks' collectives, even after a failure
        return part

    def commit(self, plan: SetPlan, weight_map: dict[str, str]) -> str:
        from weightstore.sets._writer import commit_set

        return commit_set(
            plan, weight_map, self.metadata, total_size=sum(self.nbytes),
            durable=self.store.options.durable, storage_options=self.storage_options,
        )  # fmt: skip

    def _entry(self, index: int) -> TensorEntry:
        s = self.lockstep.snapshots[index]
        read = _Pull(self.lockstep, index)
        return TensorEntry(s.full_path, s.dtype, s.shape, read, s.param_id)


class _Pull:
    """An entry's data: this rank's turn at tensor `index` of the shared sequence."""

    __slots__ = ("index", "lockstep")

    def __init__(self, lockstep: Lockstep, index: int) -> None:
        self.lockstep, self.index = lockstep, index

    def __call__(self) -> np.ndarray[Any, Any]:
        return self.lockstep.pull(self.index)


class Lockstep:
    """Walks one sequence of tensors that every rank shares, in order.

    With collectives (`gathers`), each step runs that tensor's read on this rank whether or not
    it is this rank's, and only `pull` keeps the result; without, steps that are not pulled
    read nothing.

    Args:
        snapshots: every tensor of the save, the same list on every rank.
        order: indices into `snapshots`: the shared sequence.
        gathers: whether reads are collectives that every rank must run in step.
    """

    def __init__(
        self, snapshots: Sequence[TensorSnapshot], order: Sequence[int], gathers: bool
    ) -> None:
        self.snapshots, self.order, self.gathers = snapshots, order, gathers
        self.position = 0

    def pull(self, index: int) -> np.ndarray[Any, Any]:
        """Tensor `index`'s data, after running every step before it.

        Raises:
            RuntimeError: `index` is not ahead in the sequence (a writer that pulls in another
                order than it said); the caller's save then fails on every rank.
        """
        while self.position < len(self.order):
            current = self.order[self.position]
            self.position += 1
            if current == index:
                return self.snapshots[current].to_numpy()
            self._skip(current)
        raise RuntimeError(
            f"tensor {self.snapshots[index].full_path!r} was read out of the agreed order"
        )

    def finish(self) -> None:
        """Run the steps left, so the other ranks' collectives complete."""
        while self.position < len(self.order):
            self.position += 1
            self._skip(self.order[self.position - 1])

    def _skip(self, index: int) -> None:
        if not self.gathers:
            return
        # This rank's part of a collective; the data is dropped. A failure after the exchange
        # (a dtype with no NumPy form) is the owner's to report, which reads the same tensor;
        # raising here would leave this rank out of the collectives still to come.
        with contextlib.suppress(Exception):
            self.snapshots[index].to_numpy()


def assign_owners(sizes: Sequence[int], world_size: int) -> list[int]:
    """The rank that writes each tensor: largest first, each to the rank with the fewest bytes
    so far (the lowest rank on a tie), so ranks write about equal bytes. Deterministic, so every
    rank computes the same owners.

    Example:
        >>> assign_owners([100, 10, 60, 50], 2)  # 110 bytes each
        [0, 0, 1, 1]
    """
    loads = [0] * world_size
    owners = [0] * len(sizes)
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        owners[index] = rank
        loads[rank] += sizes[index]
    return owners


def interleave(sequences: Sequence[Sequence[int]]) -> list[int]:
    """One item of each sequence in turn: the shared order of the ranks' pulls.

    Example:
        >>> interleave([[0, 3, 4], [1], [2, 5]])
        [0, 1, 2, 3, 5, 4]
    """
    longest = max((len(s) for s in sequences), default=0)
    return [s[k] for k in range(longest) for s in sequences if k < len(s)]


def _snapshots(store: Store, model: object) -> tuple[list[TensorSnapshot], str | None, bool]:
    """The tensors as the store saves them, whole; the source's framework; whether reading
    them runs collectives."""
    from weightstore.bridge import is_torch_module, source_for
    from weightstore.transfer._apply import collect

    gathers = False
    if is_torch_module(model):
        from weightstore.distributed._torch import GatheringSource, has_dtensors

        gathers = has_dtensors(model)  # type: ignore[arg-type]
        source: Any = GatheringSource(model)  # type: ignore[arg-type]
    else:
        source = source_for(model)
    options = store.options
    snapshots = collect(source, options.filter, options.to_adapter, dedupe_tied=options.dedupe_tied)
    remapper = options.active_remapper()
    if remapper is not None:
        names = remapper.remap_names([s.full_path for s in snapshots])
        by_old = {s.full_path: s for s in snapshots}
        snapshots = [by_old[old].with_name(new) for new, old in names.items()]
    return snapshots, source.framework, gathers


def _shards(
    snapshots: Sequence[TensorSnapshot],
    owners: Sequence[int],
    world_size: int,
    fmt: ContainerFormat,
    max_shard_size: int,
) -> list[list[list[int]]]:
    """Per rank, its shards, each a list of snapshot indices in the order the format's writer
    lays them out (and so reads them). A save of no tensors is one empty shard of rank 0."""
    from weightstore.sets._writer import plan_shards

    index = {s.full_path: i for i, s in enumerate(snapshots)}
    per_rank: list[list[list[int]]] = []
    for rank in range(world_size):
        entries = [_plain_entry(snapshots[i]) for i, owner in enumerate(owners) if owner == rank]
        groups = [g for g in plan_shards(entries, max_shard_size) if g]
        per_rank.append([[index[n] for n in _file_order(fmt, group)] for group in groups])
    if not any(per_rank):
        per_rank[0] = [[]]
    return per_rank


def _plain_entry(snapshot: TensorSnapshot) -> TensorEntry:
    """An entry that only describes a tensor, for planning; reading it is a bug."""
    return TensorEntry(snapshot.full_path, snapshot.dtype, snapshot.shape, _never_read)


def _never_read() -> bytes:
    raise RuntimeError("a planning entry was read")


def _file_order(fmt: ContainerFormat, entries: Sequence[TensorEntry]) -> list[str]:
    """The names of `entries` in the order `fmt`'s writer lays them out: the writer plans
    its layout when built, reading no data (one that keeps no `entries` writes them as given)."""
    assert fmt.writer is not None
    laid_out: Sequence[TensorEntry] = getattr(fmt.writer(entries, {}), "entries", entries)
    return [entry.name for entry in laid_out]


def _metadata(store: Store, fmt: ContainerFormat, framework: str | None) -> dict[str, str]:
    from weightstore.stores._save import save_metadata

    return save_metadata(store.options.metadata, fmt, framework)


def _max_shard_size(store: Store) -> int:
    from weightstore.sets._writer import DEFAULT_MAX_SHARD_SIZE

    size = store.options.max_shard_size
    return DEFAULT_MAX_SHARD_SIZE if size is None else size


def _directory(store: Store) -> str:
    path = getattr(store, "_path", None)
    if path is None:
        raise InvalidOptionError("a sharded save writes a directory; open the store on one")
    return str(path)


Outcome = tuple[bool, Any]
"""``(True, result)``, or ``(False, _Failure)``: what a rank tells the others of one step."""


def _attempt(work: Callable[[], Any]) -> Outcome:
    """`work`'s outcome; an error becomes a `_Failure` the other ranks can hear of."""
    try:
        return True, work()
    except Exception as err:
        return False, _Failure.of(err)


def _settle(outcomes: Sequence[Any], mine: Outcome, ranks: Sequence[int], where: str) -> list[Any]:
    """The results of one step on `ranks` when all succeeded. Else every rank raises: one
    that failed its own error, the others one naming the ranks that failed (`where`: the
    set's directory, for the message)."""
    failed = [(rank, value) for rank, (ok, value) in zip(ranks, outcomes, strict=True) if not ok]
    if not failed:
        return [value for _, value in outcomes]
    ok, value = mine
    if not ok and value.error is not None:
        raise value.error
    return _raise_remote(failed, where)


class _Failure:
    """What failed on a rank: what the other ranks are told, and at home the error itself.

    Attributes:
        kind: the error's class name.
        text: the error's message, cut to MAX_FAILURE_TEXT characters.
        path: the file the error names, if any.
        code: its errno, if any (a full disk on one rank is a full disk everywhere's message).
        error: the error itself, on the rank that raised it only (never sent).
    """

    def __init__(
        self, kind: str, text: str, path: str | None, code: int | None, error: Exception | None
    ) -> None:
        self.kind, self.text, self.path, self.code, self.error = kind, text, path, code, error

    @classmethod
    def of(cls, err: Exception) -> _Failure:
        path = err.path if isinstance(err, WeightstoreError) else None
        code = err.errno if isinstance(err, OSError) else None
        if isinstance(err, OSError) and err.strerror:
            text = f"{err.strerror}" + (f" ({path})" if path else "")
        elif isinstance(err, WeightstoreError):
            text = str(err)
        else:
            text = f"{type(err).__name__}: {err}"
        if len(text) > MAX_FAILURE_TEXT:  # it travels to every rank and into their messages
            text = text[:MAX_FAILURE_TEXT] + "..."
        return cls(type(err).__name__, text, path, code, err)

    def __reduce__(self) -> tuple[type[_Failure], tuple[object, ...]]:
        return (_Failure, (self.kind, self.text, self.path, self.code, None))  # error stays


def _raise_remote(failed: Sequence[tuple[int, _Failure]], where: str) -> NoReturn:
    """Raise, on a rank where nothing failed, the failing rank's kind where callers catch it
    (an existing set), else a save failure naming the ranks and what failed there."""
    failure = failed[0][1]
    if failure.kind == "DestinationExistsError" and failure.path is not None:
        raise DestinationExistsError(failure.path)
    reasons = "; ".join(f"rank {rank} failed: {f.text}" for rank, f in failed)
    raise SaveFailedError(where, failure.code, reasons)


def _check_same(signatures: Sequence[Any]) -> None:
    """Raise `InvalidOptionError` on every rank unless every rank lists the same tensors."""
    first = signatures[0]
    for rank, other in enumerate(signatures[1:], 1):
        if other == first:
            continue
        for mine, theirs in zip(first, other, strict=False):
            if mine != theirs:
                raise InvalidOptionError(
                    f"rank 0 saves tensor {mine[0]!r} as {mine[1]} {list(mine[2])}, rank {rank} "
                    f"{theirs[0]!r} as {theirs[1]} {list(theirs[2])}; every rank must hold the "
                    "same tensors (a plain tensor holding a rank's slice cannot be saved whole: "
                    "make it a DTensor)"
                )
        raise InvalidOptionError(
            f"rank 0 saves {len(first):,} tensors, rank {rank} {len(other):,}; every rank must "
            "hold the same tensors"
        )
