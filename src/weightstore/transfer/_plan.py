"""The load plan: what `transfer.apply` decides before a model's own code runs, and the rules
that judge it.

A load is planned here and carried out by a bridge. `transfer.apply` lists the model's tensors
as `Target`s (from the bridge), matches source tensors to them by name, checks shapes and dtypes,
and hands the bridge a `LoadPlan`: the tensors to load (`PendingTensor`, read only when the model
asks), the source tensors matching left over (offered to the model's own migration code, such as
torch's load hooks), and the paths the load must not write. The bridge answers with a
`LoadOutcome`: which paths were written, which failed and why, which spare source tensors were
consumed. A bridge over a model with load code of its own also says beforehand where that code
may act (`LoadReach`), so that a strict load (`LoadRules`) can be refused before anything is
written.

These types live with the pipeline that builds them, not with the bridges: a bridge receives a
plan and never defines one, so this module imports no bridge and the bridges import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from weightstore.base._record import Record, ValueRecord
from weightstore.dtypes import DType

if TYPE_CHECKING:
    import numpy as np

    from weightstore.report import ApplyResult, LoadFailure

__all__ = [
    "ArrayReader",
    "LoadOutcome",
    "LoadPlan",
    "LoadReach",
    "LoadRules",
    "PendingTensor",
    "Target",
]

ArrayReader = Callable[[], "np.ndarray[Any, Any]"]
"""Produces one tensor's data when called; each call reads again (nothing is cached)."""


class Target:
    """One tensor slot in a model that a load can fill.

    A plain slotted class, not a `Record`, as `PendingTensor` is: one is made per tensor per
    load, and plain attribute stores cost a third (here) to two thirds (`PendingTensor`) less
    than a record's slot setters."""

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
            says); raises one of the bridges' `READ_ERRORS` when the source fails. Called
            once per use.
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


class LoadPlan(Record):
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
    spare: Mapping[str, ArrayReader]
    blocked: frozenset[str] = frozenset()

    def __init__(
        self,
        tensors: Mapping[str, PendingTensor],
        spare: Mapping[str, ArrayReader] | None = None,
        blocked: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(tensors, {} if spare is None else spare, blocked)

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


class LoadReach(ValueRecord):
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

    prefixes: tuple[str, ...] = ()
    defaults: frozenset[str] = frozenset()
    consumed: frozenset[str] = frozenset()

    def __repr__(self) -> str:
        return f"LoadReach({self.prefixes!r}, {self.defaults!r}, {self.consumed!r})"

    def may_supply(self, path: str) -> bool:
        """Whether model code may fill `path` from the source's data."""
        return any(path.startswith(prefix) for prefix in self.prefixes)

    def may_fill(self, path: str) -> bool:
        """Whether model code may fill `path` at all, from the source or with its own value."""
        return path in self.defaults or self.may_supply(path)

    def may_consume(self, name: str) -> bool:
        """Whether model code may take the source tensor `name`."""
        return name in self.consumed or self.may_supply(name)


class LoadRules(ValueRecord):
    """What fails a load, as a store's or a record's options say; `failure` applies them.

    A load that would write nothing although the model has tensors fails whatever the rules
    say: no option accepts it (a caller who wants one calls `weightstore.apply`, which never
    raises).

    Attributes:
        validate: errors fail the load (a store's ``validate``, a record's ``strict_shapes``).
        allow_partial: missing tensors do not fail it.
        allow_unused: unused source tensors do not fail it (stores: always).
    """

    validate: bool = True
    allow_partial: bool = False
    allow_unused: bool = True

    def failure(self, result: ApplyResult) -> LoadFailure | None:
        """The first rule `result` breaks, or None; checked in this order: errors (with
        `validate`), nothing loaded, missing (without `allow_partial`), unused (without
        `allow_unused`). Tensors in `held_back` count as loaded: the rules judge what the load
        does, whether or not it was refused."""
        if self.validate and result.errors:
            return "errors"
        if not result.held_back and result.loaded_nothing():
            return "nothing_loaded"
        if result.missing and not self.allow_partial:
            return "missing"
        if result.unused and not self.allow_unused:
            return "unused"
        return None
