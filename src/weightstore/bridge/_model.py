"""What the load and save pipelines need from a model, whatever framework it comes from.

A `ModelBridge` lists the model's tensors as `Target`s (path, owning module types, dtype,
shape), names the tensors tied under several paths, produces snapshots for saving, and loads a
`LoadPlan`. The plan is built by `transfer.apply` after name matching and its own shape and
dtype checks: the tensors to load (`PendingTensor`, read only when the model asks), the source
tensors matching left over (offered to the model's own migration code, such as torch's
load hooks), and the paths the load must not write. The bridge answers with a `LoadOutcome`:
which paths were written, which failed and why, which spare source tensors were consumed.
A bridge over a model with load code of its own (`ReachingBridge`) also says beforehand where
that code may act (`LoadReach`), so that a strict load can be refused before anything is written.

A save needs less: a `TensorSource` (lazy snapshots in order, the ties between names, the
framework the tensors come from, whether they know their module types). Every `ModelBridge` is
one; `_sources.py` adds the sources that are no model (stores, readers, snapshots, state dicts).

This module imports no other bridge module; `bridge_for` (in the package) picks a bridge.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from weightstore.dtypes import DType
from weightstore.errors import WeightstoreError
from weightstore.snapshot import TensorSnapshot

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "READ_ERRORS",
    "ArrayReader",
    "LoadOutcome",
    "LoadPlan",
    "LoadReach",
    "ModelBridge",
    "PendingTensor",
    "ReachingBridge",
    "Target",
    "TensorSource",
    "TreeSlot",
    "aliases_by_identity",
    "aliases_by_key",
    "is_torch_module",
    "is_torch_tensor",
]

ArrayReader = Callable[[], "np.ndarray[Any, Any]"]
"""Produces one tensor's data when called; each call reads again (nothing is cached)."""

READ_ERRORS: Final = (WeightstoreError, ValueError, RuntimeError, TypeError)
"""What reading, adapting or converting one tensor raises for bad data. Each becomes a load
error for that tensor and the load goes on; anything else is a bug and propagates."""


class Target:
    """One tensor slot in a model that a load can fill."""

    __slots__ = ("container", "dtype", "path", "shape")

    def __init__(
        self, path: str, container: tuple[str, ...], dtype: DType, shape: tuple[int, ...]
    ) -> None:
        self.path: Final = path
        self.container: Final = container
        self.dtype: Final = dtype
        self.shape: Final = shape

    def __repr__(self) -> str:
        return f"Target({self.path!r}, {self.container!r}, {self.dtype.name}, {self.shape!r})"

    @property
    def container_path(self) -> str:
        """The owning module types from the root, joined with ``.`` (filters match on it)."""
        return ".".join(self.container)

    @property
    def module_type(self) -> str | None:
        """The type of the module that directly owns the tensor (adapters key on it)."""
        return self.container[-1] if self.container else None


class PendingTensor:
    """A source tensor matched to a model path and checked against it, not yet read.

    Attributes:
        read: the data as the model should receive it (adapted, converted as the dtype policy
            says); raises one of `READ_ERRORS` when the source fails. Called once per use.
        dtype: the dtype `read` returns, known without reading (a bridge that keeps the
            source dtype prepares the model tensor for it before copying).
        param_id: the source's parameter identity, restored on the loaded tensor.
    """

    __slots__ = ("dtype", "param_id", "read")

    def __init__(self, read: ArrayReader, dtype: DType, param_id: int | None = None) -> None:
        self.read: Final = read
        self.dtype: Final = dtype
        self.param_id: Final = param_id

    def __repr__(self) -> str:
        return f"PendingTensor({self.dtype.name}, param_id={self.param_id})"


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

    __slots__ = ("blocked", "spare", "tensors")

    def __init__(
        self,
        tensors: Mapping[str, PendingTensor],
        spare: Mapping[str, ArrayReader] | None = None,
        blocked: frozenset[str] = frozenset(),
    ) -> None:
        self.tensors: Final = tensors
        self.spare: Final[Mapping[str, ArrayReader]] = {} if spare is None else spare
        self.blocked: Final = blocked

    def __repr__(self) -> str:
        return f"LoadPlan({list(self.tensors)}, spare={list(self.spare)}, blocked={self.blocked})"


class LoadOutcome:
    """What a bridge's `load` did.

    Attributes:
        loaded: model paths written, from the plan or by the model's migration code.
        errors: path -> why it failed. Usually a model path; a spare source name when reading
            it failed, or a module path when the model's code failed outside any tensor.
        taken: spare source names the model's code consumed (removed from what it was given).
    """

    __slots__ = ("errors", "loaded", "taken")

    def __init__(
        self,
        loaded: set[str] | None = None,
        errors: dict[str, str] | None = None,
        taken: set[str] | None = None,
    ) -> None:
        self.loaded: set[str] = set() if loaded is None else loaded
        self.errors: dict[str, str] = {} if errors is None else errors
        self.taken: set[str] = set() if taken is None else taken

    def __repr__(self) -> str:
        return f"LoadOutcome(loaded={self.loaded}, errors={self.errors}, taken={self.taken})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LoadOutcome):
            return NotImplemented
        return (self.loaded, self.errors, self.taken) == (other.loaded, other.errors, other.taken)

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass it replaced


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


class LoadReach:
    """Where a model's own load code may act beyond name matching, known before it runs.

    `transfer.apply` judges a strict load before writing anything; a path this code may still
    fill is not counted missing then, and a source name it may still consume is not counted
    unused, since only running the code would tell (the load then runs and is judged after).

    Attributes:
        prefixes: module prefixes (``""`` the root, ``"enc."`` a submodule) whose load code we
            do not know (a load pre-hook, an overridden loader): it may fill any model path and
            consume any source name under the prefix, with data from the source.
        defaults: model paths that known load code fills with a value of its own when the
            source lacks them (BatchNorm's ``num_batches_tracked``): not missing, but not data
            from the source either.
        consumed: source names known load code removes when present (an InstanceNorm without
            running stats drops ``running_mean`` and ``running_var``).
    """

    __slots__ = ("consumed", "defaults", "prefixes")

    def __init__(
        self,
        prefixes: tuple[str, ...] = (),
        defaults: frozenset[str] = frozenset(),
        consumed: frozenset[str] = frozenset(),
    ) -> None:
        self.prefixes: Final = prefixes
        self.defaults: Final = defaults
        self.consumed: Final = consumed

    def __repr__(self) -> str:
        return f"LoadReach({self.prefixes!r}, {self.defaults!r}, {self.consumed!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LoadReach):
            return NotImplemented
        mine = (self.prefixes, self.defaults, self.consumed)
        return mine == (other.prefixes, other.defaults, other.consumed)

    def __hash__(self) -> int:
        return hash((self.prefixes, self.defaults, self.consumed))

    def may_supply(self, path: str) -> bool:
        """Whether model code may fill `path` from the source's data."""
        return any(path.startswith(prefix) for prefix in self.prefixes)

    def may_fill(self, path: str) -> bool:
        """Whether model code may fill `path` at all, from the source or with its own value."""
        return path in self.defaults or self.may_supply(path)

    def may_consume(self, name: str) -> bool:
        """Whether model code may take the source tensor `name`."""
        return name in self.consumed or self.may_supply(name)


@runtime_checkable
class ReachingBridge(Protocol):
    """A bridge over a model with load code of its own (torch's hooks): it says where that code
    may act. A bridge without (NumPy dicts) need not implement it: nothing is reached."""

    def load_reach(self) -> LoadReach:
        """Where the model's load code may fill paths or consume source names."""
        ...
