"""What the load and save pipelines need from a model, whatever framework it comes from.

A `ModelBridge` lists the model's tensors as `Target`s (path, owning module types, dtype,
shape), names the tensors tied under several paths, produces snapshots for saving, and loads a
`LoadPlan`. The plan is built by `transfer.apply` after name matching and its own shape and
dtype checks: the tensors to load (`PendingTensor`, read only when the model asks), the source
tensors matching left over (offered to the model's own migration code, such as torch's
load hooks), and the paths the load must not write. The bridge answers with a `LoadOutcome`:
which paths were written, which failed and why, which spare source tensors were consumed.

This module imports no other bridge module; `bridge_for` (in the package) picks a bridge.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import numpy as np

from weightstore.dtypes import DType
from weightstore.errors import WeightstoreError
from weightstore.snapshot import TensorSnapshot

__all__ = [
    "READ_ERRORS",
    "ArrayReader",
    "LoadOutcome",
    "LoadPlan",
    "ModelBridge",
    "PendingTensor",
    "Target",
    "aliases_by_identity",
    "is_torch_module",
]

ArrayReader = Callable[[], "np.ndarray[Any, Any]"]
"""Produces one tensor's data when called; each call reads again (nothing is cached)."""

READ_ERRORS: Final = (WeightstoreError, ValueError, RuntimeError, TypeError)
"""What reading, adapting or converting one tensor raises for bad data. Each becomes a load
error for that tensor and the load goes on; anything else is a bug and propagates."""


@dataclass(frozen=True, slots=True)
class Target:
    """One tensor slot in a model that a load can fill."""

    path: str
    container: tuple[str, ...]
    dtype: DType
    shape: tuple[int, ...]

    @property
    def container_path(self) -> str:
        """The owning module types from the root, joined with ``.`` (filters match on it)."""
        return ".".join(self.container)

    @property
    def module_type(self) -> str | None:
        """The type of the module that directly owns the tensor (adapters key on it)."""
        return self.container[-1] if self.container else None


@dataclass(frozen=True, slots=True)
class PendingTensor:
    """A source tensor matched to a model path and checked against it, not yet read.

    Attributes:
        read: the data as the model should receive it (adapted, converted as the dtype policy
            says); raises one of `READ_ERRORS` when the source fails. Called once per use.
        dtype: the dtype `read` returns, known without reading (a bridge that keeps the
            source dtype prepares the model tensor for it before copying).
        param_id: the source's parameter identity, restored on the loaded tensor.
    """

    read: ArrayReader
    dtype: DType
    param_id: int | None = None


@dataclass(frozen=True, slots=True)
class LoadPlan:
    """What one load asks of a bridge.

    Attributes:
        tensors: model path -> the tensor to load there, in the model's order.
        spare: source tensors name matching left unused, under their source names. A bridge
            with migration hooks (torch) offers them to the model's code, which may rename or
            split them; others ignore them.
        blocked: model paths the load must not write, whatever the model's code does:
            excluded by the filter, or failed the shape or dtype checks.
    """

    tensors: Mapping[str, PendingTensor]
    spare: Mapping[str, ArrayReader] = field(default_factory=dict)
    blocked: frozenset[str] = frozenset()


@dataclass(slots=True)
class LoadOutcome:
    """What a bridge's `load` did.

    Attributes:
        loaded: model paths written, from the plan or by the model's migration code.
        errors: path -> why it failed. Usually a model path; a spare source name when reading
            it failed, or a module path when the model's code failed outside any tensor.
        taken: spare source names the model's code consumed (removed from what it was given).
    """

    loaded: set[str] = field(default_factory=set)
    errors: dict[str, str] = field(default_factory=dict)
    taken: set[str] = field(default_factory=set)


class ModelBridge(Protocol):
    """How the pipelines reach into one kind of model."""

    def targets(self) -> list[Target]:
        """Every loadable tensor, in the model's own order (state_dict order for torch)."""
        ...

    def aliases(self) -> dict[str, str]:
        """Later names of tied tensors -> the first name holding the same tensor.

        A save may keep only first names; a load counts an alias the source lacks as applied
        when its first name was, since both are one tensor.
        """
        ...

    def snapshots(self) -> list[TensorSnapshot]:
        """Lazy snapshots of every tensor, in the same order, for saving."""
        ...

    def load(self, plan: LoadPlan) -> LoadOutcome:
        """Write the plan's tensors into the model, reading one at a time.

        Failures of single tensors are recorded in the outcome, never raised.
        """
        ...


def aliases_by_identity(named: Iterable[tuple[str, object]]) -> dict[str, str]:
    """Later names -> first name, for names whose values are one object (a tie)."""
    first: dict[int, str] = {}
    aliases: dict[str, str] = {}
    for name, value in named:
        earlier = first.setdefault(id(value), name)
        if earlier != name:
            aliases[name] = earlier
    return aliases


def is_torch_module(model: object) -> bool:
    """True for `torch.nn.Module` instances, checked without importing torch."""
    return any(
        cls.__module__ == "torch.nn.modules.module" and cls.__name__ == "Module"
        for cls in type(model).__mro__
    )
