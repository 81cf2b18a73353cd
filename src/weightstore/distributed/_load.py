"""Tensor-parallel loads: each rank reads only its slice of each split tensor.

A load here is the store's own load (its filter, remapping, adapters, strictness and report)
over different snapshots: each tensor the plan splits becomes a snapshot of this rank's chunk
(`_plan.chunk_bounds`), whose data is read through the container reader's ``get_slice``, so
only the chunk's bytes are read (one run for a split on dim 0, one run per row on dim 1).
Tensors the plan does not split are read whole by every rank.

Which tensors are split, and on which dim, comes from two places. An explicit plan
(``{regex: dim}``) names them by their names after remapping; the model's parameters then
already hold local shapes. A torch model whose parameters are ``DTensor`` s brings its own
layout (`bridge._distributed.dtensor_layout`): each DTensor loads its local shard, and an
explicit plan may add plain tensors but must not contradict a DTensor.

A fused tensor is split part by part (`_plan.FusedSplit`): a rank reads its chunk of each part,
one run each. A model tensor a layout rule of the store makes (``qkv_proj`` from ``q_proj``,
``k_proj`` and ``v_proj``, adapters/_layout_rules.py) may be named by the plan too: its
sources are split instead, on the dims the rule's operations map its dim to
(`LayoutOp.input_split_dims`), so a rank reads its chunk of each source and the rule joins the
chunks into that rank's part of the fused tensor.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from weightstore.bridge import is_torch_module
from weightstore.distributed._parts import group_part_keys
from weightstore.distributed._plan import (
    FusedSplit,
    PlanInput,
    ShardPlan,
    Split,
    chunk_bounds,
    fused_ranges,
    normalize_dim,
    validate_rank,
)
from weightstore.errors import InvalidOptionError
from weightstore.snapshot import TensorSnapshot, load_part_reader

if TYPE_CHECKING:
    import numpy as np

    from weightstore.distributed._torch import DTensorLayout
    from weightstore.report import ApplyResult
    from weightstore.stores import Store

__all__ = ["load", "sliced_snapshots"]


def load(
    store: Store,
    model: object,
    plan: PlanInput = None,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    device: Any = None,
    read_once: bool = False,
) -> ApplyResult:
    """Load `store` into this rank's part of `model`, reading only this rank's slices.

    Args:
        store: any store (a single file, or a set where the store reads sets); its options
            apply as in `Store.apply_to`.
        model: a torch module, or a dict of NumPy arrays. Plain tensors the plan splits must
            already have this rank's local shape; DTensor parameters (``parallelize_module``,
            ``fully_shard``, ``distribute_tensor``) get their local shard.
        plan: ``{regex: dim}`` or a `ShardPlan`: tensors whose name (after the store's
            remapping) a pattern is found in are split on that dim; the first pattern wins.
            A `FusedSplit` in place of a dim splits a fused tensor part by part. A pattern
            may name a model tensor a layout rule of the store's from-adapter makes: its
            sources are split. None: only the model's DTensors are split.
        rank, world_size: this process's place; by default the DTensors' mesh, else the
            default process group. Give both or neither.
        device: where plain tensors go, as in `Store.apply_to`; DTensors stay on their mesh.
        read_once: the tensors every rank needs whole (replicated, data-parallel) are each
            read by one rank and broadcast to the others over the default process group
            (`_fanout`), so the ranks together read the file once; a collective, so every
            rank must call it, with the same model. Slices are read as before.

    Returns:
        The store's `ApplyResult` for this rank.

    Raises:
        InvalidOptionError: a bad plan or rank; ``read_once`` without a process group, or
            with ranks that would read different tensors; a plan that contradicts a DTensor,
            splits a tensor on a dim it lacks, gives fused sizes that do not add up to the
            tensor's, splits a layout rule's target that its operations cannot split part by
            part, or a DTensor layout that cannot be loaded this way;
            no rank given and no process group; a `device` for a model with DTensors.
        LoadFailedError: as `Store.apply_to` (local shapes are what it compares).

    Example:
        >>> result = load(SafetensorsStore.from_file("m.safetensors"), model,  # doctest: +SKIP
        ...               {r"^fc1\\.": 0, r"^fc2\\.weight$": 1})
    """
    rules = ShardPlan.of(plan)
    target, layout = _target(model, device)
    rank, world_size = _place(layout, rank, world_size)
    snapshots = store.get_all_snapshots()
    dims = _dims(snapshots, rules, layout)
    if rules:
        _add_layout_sources(dims, store, snapshots, rules, layout)
    sliced = sliced_snapshots(snapshots.values(), dims, rank, world_size)
    if not read_once or world_size == 1:
        return store._apply_snapshots(target, sliced, device)
    from weightstore.distributed._fanout import agree, check_group, shared_snapshots

    check_group(rank, world_size)
    replicated = {name for name in snapshots if name not in dims}
    shared = shared_snapshots(sliced, replicated, rank, world_size)
    return store._apply_snapshots(target, shared, device, before_reads=agree)


def sliced_snapshots(
    snapshots: Any, dims: Mapping[str, Split], rank: int, world_size: int
) -> list[TensorSnapshot]:
    """`snapshots` with each one `dims` names cut to rank `rank`'s chunk of that dim, or its
    chunks of a `FusedSplit`'s parts (dims normalized, sizes checked); the others as they
    are. Nothing is read."""
    snapshots = list(snapshots)
    plain = {name: dim for name, dim in dims.items() if isinstance(dim, int)}
    parts = group_part_keys(snapshots, plain, rank, world_size)
    return [
        _sliced_part(s, parts[s.full_path])
        if s.full_path in parts
        else _sliced(s, dims[s.full_path], rank, world_size)
        if s.full_path in dims
        else s
        for s in snapshots
    ]


def _target(model: object, device: Any) -> tuple[object, DTensorLayout | None]:
    """What to load into (the model, or a rank's bridge over its DTensors) and the layout."""
    if not is_torch_module(model):
        return model, None
    from weightstore.distributed._torch import DTensorBridge, dtensor_layout

    layout = dtensor_layout(model)  # type: ignore[arg-type]
    if layout is None:
        return model, None
    if device is not None:
        raise InvalidOptionError(
            "the model holds DTensors, which stay on their device mesh; leave device unset",
            option="device",
        )
    return DTensorBridge(model, layout), layout  # type: ignore[arg-type]


def _place(
    layout: DTensorLayout | None, rank: int | None, world_size: int | None
) -> tuple[int, int]:
    """This process's rank and the world size: given, from the mesh, or the default group."""
    if (rank is None) != (world_size is None):
        raise InvalidOptionError("give both rank and world_size, or neither", option="rank")
    if rank is not None and world_size is not None:
        validate_rank(rank, world_size)
        if layout is not None and (rank, world_size) != (layout.rank, layout.world_size):
            raise InvalidOptionError(
                f"rank {rank} of {world_size} disagrees with the model's DTensors, which place "
                f"this process at rank {layout.rank} of {layout.world_size}",
                option="rank",
            )
        return rank, world_size
    if layout is not None:
        return layout.rank, layout.world_size
    try:
        from weightstore.distributed._torch import default_rank_and_world
    except ImportError as err:  # no torch: only explicit ranks
        raise InvalidOptionError(
            f"pass rank and world_size (torch.distributed is unavailable: {err})", option="rank"
        ) from err
    return default_rank_and_world()


def _dims(
    snapshots: Mapping[str, TensorSnapshot], rules: ShardPlan, layout: DTensorLayout | None
) -> dict[str, Split]:
    """Tensor name -> the (normalized) dim it is split on, or its checked `FusedSplit`, for
    every split tensor."""
    own = {} if layout is None else layout.dims
    dims: dict[str, Split] = {}
    for name, snapshot in snapshots.items():
        planned = rules.dim_for(name) if rules else None
        if isinstance(planned, FusedSplit):
            dims[name] = _checked_fused(planned, snapshot, name in own)
            continue
        if planned is not None:
            planned = normalize_dim(planned, snapshot.shape, name)
        if name in own:
            if planned is not None and planned != own[name]:
                placed = "replicated" if own[name] is None else f"split on dim {own[name]}"
                raise InvalidOptionError(
                    f"the plan splits tensor {name!r} on dim {planned}, but the model's "
                    f"DTensor is {placed}; the DTensor's placement is what loads"
                )
            planned = own[name]
            if planned is not None and planned >= len(snapshot.shape):
                continue  # the file's tensor lacks the dim: read whole, the shape check reports
        if planned is not None:
            dims[name] = planned
    return dims


def _checked_fused(split: FusedSplit, snapshot: TensorSnapshot, is_dtensor: bool) -> FusedSplit:
    """`split` with its dim normalized against the tensor it splits, whose sizes it fits."""
    name = snapshot.full_path
    if is_dtensor:
        raise InvalidOptionError(
            f"the plan splits tensor {name!r} part by part, but the model's DTensor places it "
            "by its own Shard rule, which chunks the fused whole; load it into a plain tensor"
        )
    if snapshot.group is not None:
        raise InvalidOptionError(
            f"the plan splits quantized tensor {name!r} part by part; split its parts by a "
            "dim, which keeps codes and scales together"
        )
    dim = normalize_dim(split.dim, snapshot.shape, name)
    if sum(split.sizes) != snapshot.shape[dim]:
        raise InvalidOptionError(
            f"the plan splits tensor {name!r} of shape {list(snapshot.shape)} into parts of "
            f"{list(split.sizes)} along dim {dim}, which add up to {sum(split.sizes)}, not "
            f"{snapshot.shape[dim]}"
        )
    return FusedSplit(dim, split.sizes)


def _add_layout_sources(
    dims: dict[str, Split],
    store: Store,
    snapshots: Mapping[str, TensorSnapshot],
    rules: ShardPlan,
    layout: DTensorLayout | None,
) -> None:
    """Add to `dims` the sources of each layout group whose targets the plan splits, on the
    dims the group's operations map the targets' dims to (see the module docstring).

    Raises:
        InvalidOptionError: a split target is a DTensor, has no such dim, or is split by a
            `FusedSplit`; its group's operations cannot be split that way; its rule cannot
            be planned before the load; or a source is split two ways.
    """
    from weightstore.adapters._layout_rewrite import rewrite_layouts

    _, plan = rewrite_layouts(store._options.from_adapter, list(snapshots.values()))
    if plan is None:
        return
    own = {} if layout is None else layout.dims
    for problem in plan.problems:
        named = [t for t in problem.targets if rules.dim_for(t) is not None]
        if named:
            raise InvalidOptionError(
                f"the plan splits {named[0]!r}, which layout rule {problem.rule!r} makes, but "
                f"the rule cannot be planned before the load ({problem.reason}); split its "
                "sources in the plan instead"
            )
    for group in plan.groups:
        planned = [(target, rules.dim_for(target)) for target in group.targets]
        if all(split is None for _, split in planned):
            continue
        where = f"layout rule {group.rule!r} makes {', '.join(map(repr, group.targets))}"
        target_dims = []
        for (target, split), shape in zip(planned, group.shapes, strict=True):
            if not isinstance(split, int) or target in own:
                raise InvalidOptionError(
                    f"the plan splits {target!r} by {split!r}, but {where}: a rule's targets "
                    "are split by a dim, every one of them, into plain tensors (a rule's "
                    "concatenation is split part by part already)"
                )
            target_dims.append(normalize_dim(split, shape, target))
        source_dims = (
            None
            if group.op is None
            else group.op.input_split_dims(target_dims, group.source_shapes)
        )
        if source_dims is None or any(s not in snapshots for s in group.sources):
            raise InvalidOptionError(
                f"the plan splits {', '.join(map(repr, group.targets))} on dims {target_dims}, "
                f"but {where} by operations a rank's part cannot be read through (only "
                "concatenations, permutations and splits off their own dim can); split its "
                f"sources {', '.join(map(repr, group.sources))} in the plan instead"
            )
        for source, dim in zip(group.sources, source_dims, strict=True):
            if dims.get(source, dim) != dim:
                raise InvalidOptionError(
                    f"the plan splits {source!r} on dim {dims[source]!r}, but {where} and "
                    f"its split needs {source!r} split on dim {dim}"
                )
            dims[source] = dim


def _sliced(snapshot: TensorSnapshot, split: Split, rank: int, world_size: int) -> TensorSnapshot:
    if isinstance(split, FusedSplit):
        return _fused(snapshot, split, rank, world_size)
    dim = split
    start, stop = chunk_bounds(snapshot.shape[dim], rank, world_size)
    shape = (*snapshot.shape[:dim], stop - start, *snapshot.shape[dim + 1 :])
    key = (*(slice(None),) * dim, slice(start, stop))
    return TensorSnapshot(
        snapshot.path, snapshot.dtype, shape, _slice_load(snapshot.load, key),
        snapshot.container, snapshot.param_id,
    )  # fmt: skip


def _fused(
    snapshot: TensorSnapshot, split: FusedSplit, rank: int, world_size: int
) -> TensorSnapshot:
    """Rank `rank`'s chunks of the parts of `split`, joined; each chunk read as one slice."""
    dim = split.dim
    ranges = fused_ranges(split, rank, world_size)
    keys = [(*(slice(None),) * dim, slice(start, stop)) for start, stop in ranges]
    size = sum(stop - start for start, stop in ranges)
    shape = (*snapshot.shape[:dim], size, *snapshot.shape[dim + 1 :])
    reads = [_slice_load(snapshot.load, key) for key in keys]
    return TensorSnapshot(
        snapshot.path, snapshot.dtype, shape, functools.partial(_joined, reads, dim),
        snapshot.container, snapshot.param_id,
    )  # fmt: skip


def _joined(reads: list[Callable[[], Any]], dim: int) -> np.ndarray[Any, Any]:
    import numpy as np

    return np.concatenate([read() for read in reads], axis=dim)


def _sliced_part(snapshot: TensorSnapshot, key: tuple[slice, ...] | None) -> TensorSnapshot:
    """Part `key` of a quantized group's stored part (`_parts`), still tagged with its group."""
    if key is None:
        return snapshot
    shape = tuple(
        len(range(*part.indices(size)))
        for part, size in zip(
            (*key, *(slice(None),) * len(snapshot.shape)), snapshot.shape, strict=False
        )
    )
    return TensorSnapshot(
        snapshot.path, snapshot.dtype, shape, _slice_load(snapshot.load, key),
        snapshot.container, snapshot.param_id, None, snapshot.group,
    )  # fmt: skip


def _slice_load(load: Callable[[], Any], key: tuple[slice, ...]) -> Callable[[], Any]:
    """A load of `key` of what `load` loads: through the reader's ``get_slice`` when `load`
    is a store's (`snapshot.ReaderLoad`), reading only the slice, or a quantized group's
    decoding (`snapshot.DecodedLoad`), reading only the enclosing blocks; else the whole
    tensor, sliced in memory."""
    read_part = load_part_reader(load)
    if read_part is not None:
        return functools.partial(read_part, key)
    return functools.partial(_slice_of_whole, load, key)


def _slice_of_whole(load: Callable[[], Any], key: tuple[slice, ...]) -> np.ndarray[Any, Any]:
    import numpy as np

    return np.ascontiguousarray(load()[key])
