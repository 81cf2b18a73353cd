"""torch.distributed for `weightstore.distributed`: everything of it that imports torch.

Four things, each small:

- `default_rank_and_world`: this process's place in the default process group.
- `dtensor_layout`: what a model's ``DTensor`` parameters and buffers say about a load, the
  dimension each is split on (``Shard(dim)``) or None (``Replicate()``), on one 1-D device
  mesh, as ``parallelize_module`` and ``fully_shard`` leave them. Other meshes and placements
  are refused by name rather than loaded wrongly.
- `DTensorBridge`: the torch bridge seen from one rank. Its targets carry each DTensor's local
  shape, so a rank's slices pass the usual shape checks, and the tensors it loads into them
  become DTensors again (``DTensor.from_local``, with the global shape and stride given, so
  uneven chunks are exact) before torch's own ``load_state_dict`` machinery copies them in,
  as ``torch.distributed.checkpoint.state_dict.set_model_state_dict`` hands DTensors to it.
- `GatheringSource` and `TorchGroup`: what a rank-aware save reads (each DTensor gathered whole
  with ``full_tensor``, a collective that every rank runs in the same order) and how ranks agree
  (broadcast and all-gather of Python objects on the default group).
"""

from __future__ import annotations

import functools
from typing import Any, Final, cast

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Replicate, Shard

from weightstore.bridge._torch import TorchBridge, array_to_torch, torch_to_array
from weightstore.dtypes import DType
from weightstore.errors import InvalidOptionError
from weightstore.snapshot import TensorSnapshot
from weightstore.transfer._plan import ArrayReader, LoadOutcome, LoadPlan, PendingTensor, Target

__all__ = [
    "DTensorBridge",
    "DTensorLayout",
    "GatheringSource",
    "TorchGroup",
    "default_rank_and_world",
    "dtensor_layout",
    "has_dtensors",
]

_NO_GROUP: Final = (
    "no default process group: call torch.distributed.init_process_group first, or pass "
    "rank and world_size"
)


def default_rank_and_world() -> tuple[int, int]:
    """This process's rank and the world size of the default process group.

    Raises:
        InvalidOptionError: torch.distributed is unavailable or not initialized.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise InvalidOptionError(_NO_GROUP, option="rank")
    return dist.get_rank(), dist.get_world_size()


class DTensorLayout:
    """How a model's DTensors are laid out over ranks.

    Attributes:
        rank: this process's coordinate on the mesh.
        world_size: the mesh's size.
        dims: state_dict path -> the dimension it is split on, or None where replicated.
        tensors: state_dict path -> the DTensor itself (its mesh, placements, global shape).
    """

    __slots__ = ("dims", "rank", "tensors", "world_size")

    def __init__(
        self, rank: int, world_size: int, dims: dict[str, int | None], tensors: dict[str, DTensor]
    ) -> None:
        self.rank, self.world_size, self.dims, self.tensors = rank, world_size, dims, tensors


def has_dtensors(model: torch.nn.Module) -> bool:
    """Whether any state_dict tensor of `model` is a DTensor."""
    return any(isinstance(v, DTensor) for v in model.state_dict(keep_vars=True).values())


def dtensor_layout(model: torch.nn.Module) -> DTensorLayout | None:
    """The layout of `model`'s DTensors, or None when it holds none.

    Raises:
        InvalidOptionError: a DTensor on a mesh of more than one dimension, with a placement
            other than ``Shard(dim)`` or ``Replicate()`` (``Partial``, a strided shard), or two
            meshes that give this process different places.
    """
    dims: dict[str, int | None] = {}
    tensors: dict[str, DTensor] = {}
    place: tuple[int, int] | None = None
    for path, value in model.state_dict(keep_vars=True).items():
        if not isinstance(value, DTensor):
            continue
        mesh = value.device_mesh
        if mesh.ndim != 1:
            raise InvalidOptionError(
                f"tensor {path!r} is a DTensor on a {mesh.ndim}-D device mesh; sliced loads "
                "take 1-D meshes only (one Shard or Replicate placement)"
            )
        here = (mesh.get_local_rank(), mesh.size())
        if place is not None and here != place:
            raise InvalidOptionError(
                f"tensor {path!r} places this process at rank {here[0]} of {here[1]}, other "
                f"DTensors at rank {place[0]} of {place[1]}; load each mesh's part separately"
            )
        place = here
        dims[path] = _dim_of(path, value.placements[0])
        tensors[path] = value
    if place is None:
        return None
    return DTensorLayout(place[0], place[1], dims, tensors)


def _dim_of(path: str, placement: object) -> int | None:
    # Exact types: torch's strided shard (FSDP over TP) subclasses Shard and cuts differently.
    if type(placement) is Shard:
        return placement.dim
    if type(placement) is Replicate:
        return None
    raise InvalidOptionError(
        f"tensor {path!r} is a DTensor placed {placement!r}; sliced loads take Shard(dim) "
        "and Replicate() placements"
    )


class DTensorBridge(TorchBridge):
    """A `TorchBridge` over one rank's part of a model with DTensors (module docstring).

    Tensors that are no DTensor load as in `TorchBridge`; what reaches them is the plan's.
    """

    def __init__(self, model: torch.nn.Module, layout: DTensorLayout) -> None:
        super().__init__(model)
        self._layout = layout

    def targets(self) -> list[Target]:
        """`TorchBridge.targets`, with each DTensor's local shape."""
        tensors = self._layout.tensors
        return [
            Target(t.path, t.container, t.dtype, tuple(tensors[t.path].to_local().shape))
            if t.path in tensors
            else t
            for t in super().targets()
        ]

    def load(self, plan: LoadPlan) -> LoadOutcome:
        """`TorchBridge.load`, with each DTensor's local data made a DTensor like it first."""
        tensors = self._layout.tensors
        pending = {
            path: _as_dtensor(tensor, tensors[path]) if path in tensors else tensor
            for path, tensor in plan.tensors.items()
        }
        return super().load(LoadPlan(pending, plan.spare, plan.blocked))


def _as_dtensor(pending: PendingTensor, like: DTensor) -> PendingTensor:
    read = functools.partial(_read_dtensor, pending.read, pending.dtype, like)
    # The torch bridge passes tensors through as they are (`_torch._copy_source`); a reader's
    # contract is an array, which this one keeps for every tensor that is no DTensor.
    return PendingTensor(cast(ArrayReader, read), pending.dtype, pending.param_id)


def _read_dtensor(read: ArrayReader, dtype: DType, like: DTensor) -> DTensor:
    """The rank's local data, read now, as a DTensor placed as `like` (no collective)."""
    array = read()
    if not array.flags.writeable:  # torch's ``assign`` would make it a parameter as it is
        array = array.copy()
    local = array_to_torch(array, dtype)
    return DTensor.from_local(
        local, like.device_mesh, like.placements, run_check=False,
        shape=like.shape, stride=like.stride(),
    )  # fmt: skip


class GatheringSource(TorchBridge):
    """What a rank-aware save reads from a torch model: every tensor whole, each DTensor
    gathered with ``full_tensor`` when its data is asked for. That is a collective: every
    rank must ask for the same DTensors in the same order (`weightstore.distributed`)."""

    def snapshots(self) -> list[TensorSnapshot]:
        """`TorchBridge.snapshots`, DTensors gathered on read."""
        state = self._state
        return [
            s.replace(load=functools.partial(_gathered, state[s.full_path]))
            if isinstance(state[s.full_path], DTensor)
            else s
            for s in super().snapshots()
        ]


def _gathered(tensor: torch.Tensor) -> np.ndarray[Any, Any]:
    return torch_to_array(cast(DTensor, tensor).full_tensor())


class TorchGroup:
    """The default process group, as `weightstore.distributed.save` needs it: Python objects
    (plans, weight maps, errors) broadcast and gathered; a gather is also the barrier."""

    def __init__(self) -> None:
        self.rank, self.world_size = default_rank_and_world()

    def broadcast(self, value: object, source: int = 0) -> object:
        """`value` from rank `source`, on every rank."""
        box = [value]
        dist.broadcast_object_list(box, src=source)
        return box[0]

    def all_gather(self, value: object) -> list[object]:
        """Every rank's `value`, in rank order, on every rank (a barrier too)."""
        gathered: list[object] = [None] * self.world_size
        dist.all_gather_object(gathered, value)
        return gathered
