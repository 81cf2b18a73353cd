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
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from weightstore.bridge import is_torch_module
from weightstore.distributed._parts import group_part_keys
from weightstore.distributed._plan import (
    PlanInput,
    ShardPlan,
    chunk_bounds,
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
            None: only the model's DTensors are split.
        rank, world_size: this process's place; by default the DTensors' mesh, else the
            default process group. Give both or neither.
        device: where plain tensors go, as in `Store.apply_to`; DTensors stay on their mesh.

    Returns:
        The store's `ApplyResult` for this rank.

    Raises:
        InvalidOptionError: a bad plan or rank; a plan that contradicts a DTensor, splits a
            tensor on a dim it lacks, or a DTensor layout that cannot be loaded this way;
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
    sliced = sliced_snapshots(snapshots.values(), dims, rank, world_size)
    return store._apply_snapshots(target, sliced, device)


def sliced_snapshots(
    snapshots: Any, dims: Mapping[str, int], rank: int, world_size: int
) -> list[TensorSnapshot]:
    """`snapshots` with each one `dims` names cut to rank `rank`'s chunk of that dim (dims
    normalized); the others as they are. Nothing is read."""
    snapshots = list(snapshots)
    parts = group_part_keys(snapshots, dims, rank, world_size)
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
) -> dict[str, int]:
    """Tensor name -> the (normalized) dim it is split on, for every split tensor."""
    own = {} if layout is None else layout.dims
    dims: dict[str, int] = {}
    for name, snapshot in snapshots.items():
        planned = rules.dim_for(name) if rules else None
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


def _sliced(snapshot: TensorSnapshot, dim: int, rank: int, world_size: int) -> TensorSnapshot:
    start, stop = chunk_bounds(snapshot.shape[dim], rank, world_size)
    shape = (*snapshot.shape[:dim], stop - start, *snapshot.shape[dim + 1 :])
    key = (*(slice(None),) * dim, slice(start, stop))
    return TensorSnapshot(
        snapshot.path, snapshot.dtype, shape, _slice_load(snapshot.load, key),
        snapshot.container, snapshot.param_id,
    )  # fmt: skip


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
