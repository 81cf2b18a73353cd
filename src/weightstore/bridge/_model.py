"""What the load and save pipelines need from a model, whatever framework it comes from.

A `ModelBridge` lists the model's tensors as `Target`s (path, owning module types, dtype,
shape), names the tensors tied under several paths, produces snapshots for saving, and loads the
`LoadPlan` that `transfer.apply` built after name matching and its own shape and dtype checks,
answering with a `LoadOutcome`. A bridge over a model with load code of its own
(`ReachingBridge`) also says beforehand where that code may act (`LoadReach`), so that a strict
load can be refused before anything is written. The plan's types are the pipeline's
(`weightstore.transfer._plan`): a bridge receives a plan and never defines one.

A save needs less: a `TensorSource` (lazy snapshots in order, the ties between names, the
framework the tensors come from, whether they know their module types). Every `ModelBridge` is
one; `_sources.py` adds the sources that are no model (stores, readers, snapshots, state dicts).

This module imports no other bridge module; `bridge_for` (in the package) picks a bridge.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any, Final, Protocol, runtime_checkable

from weightstore.errors import WeightstoreError
from weightstore.snapshot import TensorSnapshot
from weightstore.transfer._plan import LoadOutcome, LoadPlan, LoadReach, Target

__all__ = [
    "READ_ERRORS",
    "ModelBridge",
    "ReachingBridge",
    "TensorSource",
    "TreeSlot",
    "aliases_by_identity",
    "aliases_by_key",
    "is_torch_module",
    "is_torch_tensor",
]

READ_ERRORS: Final = (WeightstoreError, ValueError, RuntimeError, TypeError)
"""What reading, adapting or converting one tensor raises for bad data. Each becomes a load
error for that tensor and the load goes on; anything else is a bug and propagates."""


@runtime_checkable
class TensorSource(Protocol):
    """What a save reads from: a model's bridge, or a source that is no model (a store, a
    reader, snapshots, a state dict)."""

    @property
    def framework(self) -> str | None:
        """The framework the tensors come from as SafeTensors' ``format`` metadata names it
        (``"pt"``), or None when unknown; a SafeTensors save writes it by default."""
        ...

    @property
    def module_types(self) -> bool:
        """Whether the snapshots name their owning module types (``container``). Adapters
        keyed on module types (the PyTorch <-> Burn layout, half precision) need them."""
        ...

    def aliases(self) -> dict[str, str]:
        """Later names of tied tensors -> the first name holding the same tensor.

        A save may keep only first names; a load counts an alias the source lacks as applied
        when its first name was, since both are one tensor.
        """
        ...

    def snapshots(self) -> list[TensorSnapshot]:
        """Lazy snapshots of every tensor, in the source's order, for saving; nothing is read
        until a snapshot's data is asked for."""
        ...


class ModelBridge(TensorSource, Protocol):
    """How the pipelines reach into one kind of model."""

    def targets(self) -> list[Target]:
        """Every loadable tensor, in the model's own order (state_dict order for torch)."""
        ...

    def load(self, plan: LoadPlan) -> LoadOutcome:
        """Write the plan's tensors into the model, reading one at a time.

        Failures of single tensors are recorded in the outcome, never raised.
        """
        ...


def aliases_by_identity(named: Iterable[tuple[str, object]]) -> dict[str, str]:
    """Later names -> first name, for names whose values are one object (a tie)."""
    return aliases_by_key((name, id(value)) for name, value in named)


def aliases_by_key(keyed: Iterable[tuple[str, Hashable]]) -> dict[str, str]:
    """Later names -> first name, for names whose values have one key (a tie: the same
    object, or for detached torch tensors the same memory, dtype, shape and strides)."""
    first: dict[Hashable, str] = {}
    aliases: dict[str, str] = {}
    for name, key in keyed:
        earlier = first.setdefault(key, name)
        if earlier != name:
            aliases[name] = earlier
    return aliases


def is_torch_module(model: object) -> bool:
    """True for `torch.nn.Module` instances, checked without importing torch."""
    return any(
        cls.__module__ == "torch.nn.modules.module" and cls.__name__ == "Module"
        for cls in type(model).__mro__
    )


def is_torch_tensor(value: object) -> bool:
    """True for `torch.Tensor` instances (parameters included), checked without importing
    torch, as `is_torch_module` does."""
    return any(
        cls.__module__ == "torch" and cls.__name__ == "Tensor" for cls in type(value).__mro__
    )


class TreeSlot:
    """A JAX pytree to load into, and the tree the load built.

    JAX arrays never change in place, and neither do tuples, FrozenDicts or most pytree
    nodes, so a load into a pytree builds a new tree of the same structure (loaded leaves
    replaced, the rest kept) and leaves it in `tree`; `weightstore.bridge.load_tree` wraps
    this.

    Attributes:
        tree: the pytree (a Linen variable dict, a pytree of arrays or of abstract
            ``jax.ShapeDtypeStruct`` leaves, or an NNX module, which loads in place).
    """

    __slots__ = ("tree",)

    def __init__(self, tree: Any) -> None:
        self.tree = tree

    def __repr__(self) -> str:
        return f"TreeSlot({type(self.tree).__name__})"


@runtime_checkable
class ReachingBridge(Protocol):
    """A bridge over a model with load code of its own (torch's hooks): it says where that code
    may act. A bridge without (NumPy dicts) need not implement it: nothing is reached."""

    def load_reach(self) -> LoadReach:
        """Where the model's load code may fill paths or consume source names."""
        ...
